"""The researcher's accel-sim-framework checkout, as `cascade simulate` uses it: where its parts
are, which SASS its tested configs run, its post-processor and its simulator run as a real
build behaves (docs/simulations.md, "Simulate a trace"; the module `simulate` says what each
step guards against), and the builds its log names.
"""

import concurrent.futures
import lzma
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from cascade_client import kernelslist
from cascade_client.errors import CascadeError
from cascade_client.terminal import visible

SIMULATOR = "gpu-simulator/bin/release/accel-sim.out"
POSTPROCESSOR = "util/tracer_nvbit/tracer_tool/traces-processing/post-traces-processing"
GPGPUSIM_CONFIGS = "gpu-simulator/gpgpu-sim/configs/tested-cfgs"  # gpgpusim.config + .icnt, power files
ACCELSIM_CONFIGS = "gpu-simulator/configs/tested-cfgs"  # trace.config
# The SASS versions (`-binary version` in a trace header) each tested config runs: the
# simulator's opcode maps (gpu-simulator/ISA_Def/*_opcode.h) by the GPU each config models.
CONFIG_SASS = {
    "SM3_KEPLER_TITAN": {35},
    "SM6_TITANX": {60, 61},
    "SM7_QV100": {70},
    "SM7_GV100": {70},
    "SM7_TITANV": {70},
    "SM75_RTX2060": {75},
    "SM75_RTX2060_S": {75},
    "SM86_RTX3070": {80, 86},
}
BINARY_VERSION = re.compile(rb"^-binary version = (\d+)")
BUILD_ACCELSIM = re.compile(r"Accel-Sim \[build ([^\]]*)\]")
BUILD_GPGPUSIM = re.compile(r"GPGPU-Sim Simulator Version \S+\s+\[build ([^\]]*)\]")
KERNEL_DONE = re.compile(r"^kernel_name = (\S+)")
HEADER_BYTES = 64 * 1024  # a trace's header lines come before its first instruction
XZ_WAIT_SECONDS = 120.0  # how long the post-processor's detached xz writers may take to finish
APPEAR_SECONDS = 5.0  # an output not there by then was never begun


class SimulateError(CascadeError):
    """Refused before the simulator started, or Cascade's answer was not a comparison."""


class WrongSass(SimulateError):
    """The trace's SASS version is not one the config runs (a sweep's worker skips the job)."""


def tree_configs(root: Path) -> list[str]:
    """The tested configs ROOT has whole: GPGPU-Sim's gpgpusim.config and Accel-Sim's trace.config."""
    gpgpusim = root / GPGPUSIM_CONFIGS
    if not gpgpusim.is_dir():
        return []
    return sorted(
        d.name
        for d in gpgpusim.iterdir()
        if (d / "gpgpusim.config").is_file() and (root / ACCELSIM_CONFIGS / d.name / "trace.config").is_file()
    )


def check_tree(root: Path, config: str) -> None:
    """ROOT is a built checkout and has `config`, or one line saying what it has."""
    if not (root / SIMULATOR).is_file():
        raise SimulateError(
            f"{root} has no {SIMULATOR}: give --accel-sim (or ACCEL_SIM_ROOT) an accel-sim-framework "
            "checkout whose simulator is built (source gpu-simulator/setup_environment.sh; make -C gpu-simulator)"
        )
    configs = tree_configs(root)
    if config not in configs:
        raise SimulateError(
            f"config {config} is not in {root} (both {GPGPUSIM_CONFIGS}/{config}/gpgpusim.config and "
            f"{ACCELSIM_CONFIGS}/{config}/trace.config are needed); it has: {', '.join(configs) or 'none'}"
        )


def check_sass(config: str, versions: dict[str, int], *, force: bool, said_by: str | None = None) -> None:
    """Every listed trace's SASS version is one the config runs (the simulator stops at the first
    one it has no opcode map for, `unsupported binary version`, with exit status 0). `versions`
    maps each trace file to its header's version; `said_by` names what said it instead (the
    trace's `trace_gpu_arch`, before anything is pulled)."""
    runs = CONFIG_SASS.get(config)
    if runs is None or force:
        return
    wrong = {name: v for name, v in versions.items() if v not in runs}
    if wrong:
        found = "/".join(map(str, sorted(set(wrong.values()))))
        where = said_by or f"{len(wrong)} of {len(versions)} listed trace files, e.g. {next(iter(wrong))}"
        runnable = ", ".join(f"{c} ({'/'.join(map(str, sorted(s)))})" for c, s in CONFIG_SASS.items())
        raise WrongSass(
            f"config {config} runs SASS {'/'.join(map(str, sorted(runs)))}, the trace is SASS {found} "
            f"({where}); Accel-Sim's tested configs run: {runnable}; --force to run anyway"
        )


def arch_version(trace_gpu_arch: str | None) -> int | None:
    """75 for `sm_75`, None when the trace does not say."""
    match = re.fullmatch(r"sm_?(\d+)[a-z]?", (trace_gpu_arch or "").strip().lower())
    return int(match.group(1)) if match else None


def open_trace(path: Path):
    return lzma.open(path, "rb") if path.name.endswith(".xz") else path.open("rb")


def binary_version(path: Path) -> int | None:
    """The `-binary version = N` of a trace file's header, None without one."""
    with open_trace(path) as f:
        for line in f.read(HEADER_BYTES).splitlines():
            match = BINARY_VERSION.match(line)
            if match:
                return int(match.group(1))
    return None


def grouped_under_raw_name(path: Path) -> bool:
    """A `.trace` file must hold raw lines; one holding `#BEGIN_TB` is already grouped, and
    post-processing it leaves an empty block the simulator aborts on (accel-sim.cc:144)."""
    with open_trace(path) as f:
        return any(line.startswith(b"#BEGIN_TB") for line in f.read(HEADER_BYTES).splitlines())


def listed_kernels(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("Memcpy")]


def ends_whole(path: Path) -> bool:
    """A plain `.traceg` its `cat` writer has finished: it ends with a whole line."""
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def xz_whole(path: Path) -> bool:
    return subprocess.run(["xz", "-t", str(path)], capture_output=True).returncode == 0


def postprocess(root: Path, traces: Path, raw: list[str], *, jobs: int, out) -> None:
    """The tree's own post-processor over the raw files, then each output checked and waited for."""
    tool = root / POSTPROCESSOR
    if not os.access(tool, os.X_OK):
        raise SimulateError(
            f"the run holds raw traces and {root} has no {POSTPROCESSOR}: build it "
            f"(make -C {Path(POSTPROCESSOR).parent}) or pull a post-processed run"
        )
    listing = traces / "kernelslist.simulate"
    listing.write_text("".join(name + "\n" for name in raw))
    print(f"post-processing {len(raw)} raw trace file(s) with {POSTPROCESSOR}", file=out, flush=True)
    done = subprocess.run([str(tool), str(listing)], capture_output=True, text=True, timeout=24 * 3600)
    said = (done.stderr or "").strip().splitlines()
    outputs = [traces / kernelslist.postprocessed(name) for name in raw]

    def whole(path: Path) -> bool:
        # Its xz writers outlive it: wait until the file stops growing and `xz -t` passes.
        started = time.monotonic()
        last = -1
        while time.monotonic() < started + XZ_WAIT_SECONDS:
            if not path.is_file() and time.monotonic() > started + APPEAR_SECONDS:
                return False  # its writer's shell makes the file at once: none is writing it
            if path.is_file():
                size = path.stat().st_size
                if (
                    size == last
                    and size > 0
                    and (xz_whole(path) if path.name.endswith(".xz") else ends_whole(path))
                ):
                    return True
                last = size
            time.sleep(0.2)
        return False

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        bad = [p.name for p, ok in zip(outputs, pool.map(whole, outputs), strict=True) if not ok]
    if bad:
        raise SimulateError(
            f"post-processing wrote no whole {bad[0]} ({len(bad)} of {len(outputs)} missing or cut; "
            f"it said: {said[-1] if said else 'nothing'}; its exit status {done.returncode} tells nothing)"
        )


def prepare(root: Path, traces: Path, *, config: str, jobs: int, force: bool, out) -> Path:
    """From the pulled traces/ to the list the simulator reads: post-processed, checked, memcpy
    lines cut. Returns the kernel list."""
    listing = traces / "kernelslist.g"
    if not listing.is_file():
        raise SimulateError(f"the pull wrote no {listing}: the run lists no traced kernel")
    # The list as the simulator accepts it (kernelslist.for_simulator): what the pull writes already.
    lines = kernelslist.for_simulator([kernelslist.lines_of(listing.read_text())])
    names = listed_kernels(lines)
    if not names:
        raise SimulateError(f"{listing} lists no kernel: nothing to simulate")
    # Each listed file, or the raw file post-processing turns into it.
    sources, raw = {}, []
    for name in names:
        source = traces / name.replace(".traceg", ".trace")
        if (traces / name).is_file():
            sources[name] = traces / name
        elif ".traceg" in name and source.is_file():
            sources[name] = source
            raw.append(source.name)
    missing = [name for name in names if name not in sources]
    if missing and not force:
        raise SimulateError(
            f"{listing.name} names {len(missing)} of {len(names)} trace files the pull does not have "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); it has "
            f"{len(names) - len(missing)}; --force to simulate anyway (the simulator stops at the first)"
        )
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        versions = dict(zip(sources, pool.map(binary_version, sources.values()), strict=True))
    check_sass(config, {n: v for n, v in versions.items() if v is not None}, force=force)
    for name in raw:
        if grouped_under_raw_name(traces / name) and not force:
            raise SimulateError(
                f"{name} holds grouped content (#BEGIN_TB) under a raw .trace name: post-processing "
                "it leaves an empty block and the simulator aborts (accel-sim.cc:144); --force to try anyway"
            )
    if raw:
        postprocess(root, traces, raw, jobs=jobs, out=out)
    original = kernelslist.lines_of(listing.read_text())
    if len(lines) != len(original):
        print(
            f"dropped {len(original) - len(lines)} line(s) of {listing.name} repeated or after its last kernel",
            file=out,
            flush=True,
        )
    if [kernelslist.three_fields(line) for line in original] != original:
        print("cut MemcpyHtoD lines to 3 fields (the simulator aborts on a 4th)", file=out, flush=True)
    if lines != original:
        listing.write_text("".join(line + "\n" for line in lines))
    return listing


def config_folder(root: Path, config: str, run: Path) -> None:
    """The run folder holds the config's files as Accel-Sim's job scripts lay it out."""
    run.mkdir(parents=True, exist_ok=True)
    for path in (root / GPGPUSIM_CONFIGS / config).iterdir():
        if path.is_file():
            shutil.copy2(path, run / path.name)
    shutil.copy2(root / ACCELSIM_CONFIGS / config / "trace.config", run / "trace.config")


def simulator_env(root: Path) -> dict[str, str]:
    """The environment with GPGPU-Sim's libcudart.so found (setup_environment puts it on
    LD_LIBRARY_PATH; a shell that did not source it still runs the built simulator)."""
    env = dict(os.environ)
    lib = root / "gpu-simulator/gpgpu-sim/lib"
    if str(lib) in env.get("LD_LIBRARY_PATH", ""):
        return env  # setup_environment.sh was sourced: its choice of build stands
    libs = sorted({str(p.parent) for p in lib.glob("*/*/release/libcudart.so*")})
    libs = libs or sorted({str(p.parent) for p in lib.glob("*/*/*/libcudart.so*")})
    if libs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    return env


def run_simulator(
    root: Path, run: Path, listing: Path, *, timeout: float | None, out, progress=None
) -> int | None:
    """accel-sim.out, its stdout and stderr into run/sim.log as one stream, progress from its
    own stat blocks. The exit status (128 + signal when killed or aborted) is reported, not judged.
    `progress(finished, listed, process)`, when given, is called once the simulator has started,
    after each kernel it finishes and once it has ended (what it raises stops the simulator and
    propagates)."""
    listed = len(listed_kernels(kernelslist.lines_of(listing.read_text())))
    command = [str(root / SIMULATOR), "-trace", str(listing.resolve()), "-config", "./gpgpusim.config"]
    command += ["-config", "./trace.config"]
    print(f"simulating {listed} kernel(s): {' '.join(command)}", file=out, flush=True)
    log = run / "sim.log"
    finished = 0
    with log.open("wb") as sink:
        try:
            process = subprocess.Popen(
                command, cwd=run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=simulator_env(root)
            )
        except OSError as error:
            raise SimulateError(f"cannot run {command[0]}: {error.strerror or error}") from None
        killer = None
        if timeout:
            killer = threading.Timer(timeout, process.kill)
            killer.daemon = True
            killer.start()
        try:
            if progress:
                progress(finished, listed, process)
            for line in process.stdout:
                sink.write(line)
                match = KERNEL_DONE.match(line.decode(errors="replace"))
                if match:
                    finished += 1
                    print(
                        f"  kernel {finished}/{listed} finished: {visible(match.group(1)[:90])}",
                        file=out,
                        flush=True,
                    )
                    if progress:
                        progress(finished, listed, process)
            status = process.wait()
            if progress:
                progress(finished, listed, process)
        finally:
            if killer:
                killer.cancel()
            if process.poll() is None:
                process.kill()
                process.wait()
    if timeout and status < 0:
        print(f"  stopped after --timeout {timeout:g} s", file=out, flush=True)
    return 128 - status if status < 0 else status


def builds(log: Path) -> tuple[str | None, str | None]:
    accel = gpgpu = None
    with log.open("r", errors="replace") as f:
        for number, line in enumerate(f):
            accel = accel or _first(BUILD_ACCELSIM, line)
            gpgpu = gpgpu or _first(BUILD_GPGPUSIM, line)
            if (accel and gpgpu) or number > 2000:
                break
    return accel, gpgpu


def _first(pattern: re.Pattern, line: str) -> str | None:
    match = pattern.search(line)
    return match.group(1) if match else None
