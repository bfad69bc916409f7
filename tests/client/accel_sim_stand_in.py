"""A STAND-IN for Accel-Sim, shared by the tests and benchmarks that run the client's simulator
loop (tests/client/test_simulate.py, test_worker.py, bench/sweep.py), and the real traces
uploaded with measured times.

CI has no simulator, and none can be installed from the package registries. So the tests write a
fake accel-sim-framework tree whose `accel-sim.out` and `post-traces-processing` are small Python
stand-ins: they check the arguments and files they are given as the real ones need them (both
config files in the working folder, the files gpgpusim.config names beside it, the kernel list,
3-field MemcpyHtoD lines, every listed trace file present, whole and grouped), and the simulator
stand-in then prints the REAL simulator's recorded log for that trace, from
shared_fixture("real-simulatable"). It proves the loop (pull, post-process, run, upload, read,
print), not the simulator.

What else the simulator stand-in is told, by environment: STAND_IN_LOG (which recorded log;
default the one of its config), STAND_IN_STALL_AFTER_LINES (never end after that many lines),
STAND_IN_INVOCATIONS (a file it appends its kernel list's path and its pid to, once per run),
STAND_IN_BURN_SECONDS (CPU burnt before it prints, as a real simulator's time).
"""

import json
import re
import sys
from pathlib import Path

from tests.client.accel_sim_trees import OPCODE_MAPS_73F9FAC, opcode_maps

PREFIX = "accelsim-traces/"
BUILD_LINES = re.compile(rb"^(Accel-Sim \[build [^\]]*\]|\s*\*\*\* GPGPU-Sim Simulator Version .*)$", re.M)

STAND_IN_SIMULATOR = '''#!@PYTHON@
"""STAND-IN for Accel-Sim's accel-sim.out (tests/client/accel_sim_stand_in.py): checks what the
real one needs, then prints the real simulator's recorded log for this trace. Not a simulator.
Built as: @BUILDS@"""
import json, lzma, os, re, sys
from pathlib import Path

def die(message, status=134):
    print("stand-in accel-sim.out: " + message, file=sys.stderr)
    sys.exit(status)

args = sys.argv[1:]
if len(args) != 6 or args[0] != "-trace" or args[2:] != ["-config", "./gpgpusim.config", "-config", "./trace.config"]:
    die("expected -trace LIST -config ./gpgpusim.config -config ./trace.config, got %r" % args, 1)
for name in ("gpgpusim.config", "trace.config"):
    if not Path(name).is_file():
        die("no ./%s in %s" % (name, os.getcwd()), 1)
for line in Path("gpgpusim.config").read_text().splitlines():
    if line.startswith("-inter_config_file") and not Path(line.split()[1]).is_file():
        die("gpgpusim.config names %s, not in the working folder" % line.split()[1], 1)
listing = Path(args[1])
if not listing.is_file():
    die("no kernel list %s" % listing, 1)
kernels = 0
for line in listing.read_text().splitlines():
    if not line.strip():
        continue
    if line.startswith("Memcpy"):
        if len(line.split(",")) != 3:
            die("trace_parser.cc:278: Assertion `params.size() == 3' failed.")
        continue
    path = listing.parent / line.strip()
    if not path.is_file():
        die("xz: %s: No such file or directory" % path, 0)
    opener = lzma.open if path.name.endswith(".xz") else open
    try:
        with opener(path, "rb") as f:
            body = f.read()  # the whole file: a cut .xz raises here
    except (OSError, EOFError, lzma.LZMAError) as error:
        die("%s is not whole: %s" % (path, error))
    if not re.search(rb"^-binary version = \\d+", body, re.M):
        die("%s has no -binary version header" % path)
    if not re.search(rb"^#BEGIN_TB\\n\\nthread block = \\d+,\\d+,\\d+\\n\\nwarp = \\d+\\ninsts = [1-9]", body, re.M):
        die("accel-sim.cc:144: Assertion `k' failed. (%s has no grouped warp)" % path.name)
    kernels += 1
if kernels == 0:
    die("the kernel list names no kernel", 0)
listed = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
if listed[-1].startswith("Memcpy"):  # the real one aborts so once its kernels are done
    die("accel-sim.cc:144: void accel_sim_framework::cleanup(unsigned int): Assertion `k' failed.")
if len(set(listed)) != len(listed):
    die("a line listed twice: the real one would run it twice, its recorded log has each once", 1)
if os.environ.get("STAND_IN_INVOCATIONS"):  # one line per run, in one write
    with open(os.environ["STAND_IN_INVOCATIONS"], "a") as runs:
        runs.write("%s %d\\n" % (listing.resolve(), os.getpid()))
# Which recorded log to print is the one thing it is told of the trace (STAND_IN_LOG), else
# the log of its config (the first line of the stand-in gpgpusim.config names it).
config = Path("gpgpusim.config").read_text().splitlines()[0].split()[-1]
LOG = json.loads(Path("@LOGS@").read_text())[os.environ.get("STAND_IN_LOG") or config]
STALL_AFTER = int(os.environ.get("STAND_IN_STALL_AFTER_LINES", "0"))  # a run that never ends
burn_until = __import__("time").monotonic() + float(os.environ.get("STAND_IN_BURN_SECONDS", "0"))
while __import__("time").monotonic() < burn_until:  # a simulator's time, on a core of its own
    sum(range(10000))
with open(LOG, "rb") as recorded:
    for number, line in enumerate(recorded, start=1):
        sys.stdout.buffer.write(line)
        if number == STALL_AFTER:
            sys.stdout.flush()
            import time
            time.sleep(600)
'''

STAND_IN_POSTPROCESSOR = '''#!@PYTHON@
"""STAND-IN for Accel-Sim's post-traces-processing (tests/client/test_simulate.py): groups raw
lines per block and warp as the real one does, and like the real one exits 0 whatever happens and
returns while its xz writer is still writing."""
import lzma, os, subprocess, sys, time
from collections import defaultdict
from pathlib import Path

if os.environ.get("STAND_IN_POSTPROCESS_FAILS") or len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
    print("Unable to open file: %s" % sys.argv[1:], file=sys.stderr)
    sys.exit(0)
listing = Path(sys.argv[1])
out = []
for line in listing.read_text().splitlines():
    if line.startswith("Memcpy"):
        out.append(line)
        continue
    if not line.startswith("kernel"):
        print("Undefined command: " + line, file=sys.stderr)
        sys.exit(0)
    source = listing.parent / line
    with (lzma.open if line.endswith(".xz") else open)(source, "rt") as f:
        text = f.read()
    header, _, body = text.partition("#traces format")
    fmt, _, body = body.partition("\\n")
    warps = defaultdict(list)
    for raw in body.splitlines():
        fields = raw.split()
        if len(fields) > 4 and not raw.startswith("#"):
            warps[tuple(fields[:3]), fields[3]].append(" ".join(fields[4:]))
    grouped = [header + "#traces format" + fmt + "\\n"]
    for block in sorted({b for b, _ in warps}):
        grouped.append("#BEGIN_TB\\n\\nthread block = %s\\n\\n" % ",".join(block))
        for (b, w), insts in sorted(warps.items()):
            if b == block:
                grouped.append("warp = %s\\ninsts = %d\\n%s\\n\\n" % (w, len(insts), "\\n".join(insts)))
        grouped.append("#END_TB\\n\\n")
    target = listing.parent / (line[:-3] + "g.xz" if line.endswith(".xz") else line + "g")
    out.append(target.name)
    data = "".join(grouped).encode()
    if line.endswith(".xz"):
        # A detached writer, slow on purpose: the real one returns before its `xz` finishes.
        code = "import lzma,sys,time;d=sys.stdin.buffer.read();f=open(sys.argv[1],'wb');" \\
               "c=lzma.compress(d);f.write(c[:len(c)//2]);f.flush();time.sleep(1.5);f.write(c[len(c)//2:]);f.close()"
        writer = subprocess.Popen([sys.executable, "-c", code, str(target)], stdin=subprocess.PIPE, start_new_session=True)
        writer.stdin.write(data)
        writer.stdin.close()
    else:
        target.write_bytes(data)
(listing.parent / (listing.name + ".g")).write_text("".join(l + "\\n" for l in out))
sys.exit(0)
'''


def stand_in_tree(root: Path, logs: dict[str, Path]) -> Path:
    """A fake accel-sim-framework checkout laid out as a real built one: tested configs (one
    without its trace.config, as SM2_GTX480 really is), 73f9fac's opcode maps and trace reader
    (tests/client/accel_sim_trees.py), the simulator and the post-processor."""
    opcode_maps(root, OPCODE_MAPS_73F9FAC)
    for config in ("SM86_RTX3070", "SM75_RTX2060", "SM2_GTX480"):
        folder = root / "gpu-simulator/gpgpu-sim/configs/tested-cfgs" / config
        folder.mkdir(parents=True)
        (folder / "gpgpusim.config").write_text(
            f"# stand-in config {config}\n-inter_config_file config_{config}_islip.icnt\n"
        )
        (folder / f"config_{config}_islip.icnt").write_text("// stand-in interconnect\n")
        if config != "SM2_GTX480":
            trace_config = root / "gpu-simulator/configs/tested-cfgs" / config / "trace.config"
            trace_config.parent.mkdir(parents=True)
            trace_config.write_text(f"# stand-in trace.config {config}\n")
    simulator = root / "gpu-simulator/bin/release/accel-sim.out"
    simulator.parent.mkdir(parents=True)
    # One stand-in per log: which recorded log it prints is the only thing it knows of the trace.
    logs_json = root / "logs.json"
    logs_json.write_text(json.dumps({k: str(v) for k, v in logs.items()}))
    # A real build holds the build strings its log header prints (accel-sim.out, libcudart.so).
    builds = b" ".join(BUILD_LINES.findall(next(iter(logs.values())).read_bytes()[:20000]))
    simulator.write_text(
        STAND_IN_SIMULATOR.replace("@PYTHON@", sys.executable)
        .replace("@LOGS@", str(logs_json))
        .replace("@BUILDS@", " ".join(builds.decode().split()))
    )
    post = root / "util/tracer_nvbit/tracer_tool/traces-processing/post-traces-processing"
    post.parent.mkdir(parents=True)
    post.write_text(STAND_IN_POSTPROCESSOR.replace("@PYTHON@", sys.executable))
    for tool in (simulator, post):
        tool.chmod(0o755)
    return root


# --- the real traces, uploaded with measured times -----------------------------------------


def log_cycles(log: Path) -> dict[int, int]:
    """uid -> gpu_sim_cycle, read from the real log's stat blocks."""
    text = log.read_text(errors="replace")
    uids = [int(u) for u in re.findall(r"^kernel_launch_uid = (\d+)", text, re.M)]
    cycles = [int(c) for c in re.findall(r"^gpu_sim_cycle = (\d+)", text, re.M)]
    assert len(uids) == len(cycles) > 0
    return dict(zip(uids, cycles, strict=True))


def log_kernel_ids(log: Path) -> list[int]:
    """uid k's launch: the k-th `Header info loaded ... kernel-N...` line's N."""
    text = log.read_text(errors="replace")
    return [
        int(n)
        for n in re.findall(r"^Header info loaded for kernel command : \S*/kernel-(\d+)[-.]", text, re.M)
    ]


def upload_run(
    bucket,
    name: str,
    run: str,
    folder: Path,
    ctx: str,
    kernel_ids: list[int],
    *,
    arch: str | None,
    gpu: str | None = None,
) -> dict:
    """The real trace folder as it is, a timing.csv of made-up measured times, metadata.json last,
    into bucket `name` as run `run`."""
    keys = []
    for path in sorted((folder / "traces").iterdir()):
        key = f"{PREFIX}{run}/traces/{path.name}"
        bucket.put_object(Bucket=name, Key=key, Body=path.read_bytes())
        keys.append({"key": key, "bytes": path.stat().st_size})
    measured = {kid: 3000 + 517 * kid for kid in kernel_ids}  # ns
    rows = "".join(f"{ctx},{kid},{1000 * kid},{1000 * kid + ns},{ns}\n" for kid, ns in measured.items())
    timing = f"ctx,kernel_id,start_ns,end_ns,duration_ns\n{rows}".encode()
    bucket.put_object(Bucket=name, Key=f"{PREFIX}{run}/timing.csv", Body=timing)
    keys.append({"key": f"{PREFIX}{run}/timing.csv", "bytes": len(timing)})
    metadata = {"status": "ok", "files": keys}
    if arch:
        metadata["trace_gpu_arch"] = arch
    if gpu:
        metadata["source_gpu"] = gpu
    bucket.put_object(Bucket=name, Key=f"{PREFIX}{run}/metadata.json", Body=json.dumps(metadata))
    return measured
