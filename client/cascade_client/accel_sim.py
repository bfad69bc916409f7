"""The researcher's accel-sim-framework checkout, as `cascade simulate` and `cascade worker` use
it: where its parts are, what it runs (read from the tree itself, never from a list here: its
tested configs, the SASS versions of its opcode maps that its trace reader selects, the
generation each config models), its post-processor and its simulator run as a real
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

from cascade_client import kernelslist, sass
from cascade_client.errors import CascadeError
from cascade_client.terminal import visible

SIMULATOR = "gpu-simulator/bin/release/accel-sim.out"
POSTPROCESSOR = "util/tracer_nvbit/tracer_tool/traces-processing/post-traces-processing"
GPGPUSIM_CONFIGS = "gpu-simulator/gpgpu-sim/configs/tested-cfgs"  # gpgpusim.config + .icnt, power files
ACCELSIM_CONFIGS = "gpu-simulator/configs/tested-cfgs"  # trace.config
ISA_DEFS = "gpu-simulator/ISA_Def"  # the opcode maps, each with the `-binary version`s it is for
# The trace reader: where a trace's `-binary version` selects an opcode map (73f9fac:
# trace-driven/trace_driven.cc, trace_kernel_info_t's constructor; else "unsupported binary version").
TRACE_READER = ("gpu-simulator/trace-driven", "gpu-simulator/trace-parser")
SOURCE_SUFFIXES = (".cc", ".cpp", ".cxx", ".h", ".hpp", ".hh")
# `#define AMPERE_A100_BINART_VERSION 80` (Accel-Sim spells it BINART), or a constant of that name.
VERSION_DEFINE = re.compile(
    r"^[ \t]*+(?:#[ \t]*+define[ \t]++|(?:static[ \t]++)?(?:constexpr|const)[ \t]++\w++[ \t]++)"
    r"(\w{0,80}BINAR[TY]_VERSION\w{0,40})[ \t]*+=?[ \t]*+\(?(\d{1,4})\b",
    re.MULTILINE,
)
VERSION_NAME = re.compile(r"\b\w{0,80}BINAR[TY]_VERSION\w{0,40}\b")
# What a gpgpusim.config says of the GPU it models, for a config whose name has no `SMxx_`.
CONFIG_CAPABILITY = re.compile(
    r"^[ \t]*+-(gpgpu_compute_capability_major|gpgpu_compute_capability_minor|gpgpu_occupancy_sm_number"
    r"|gpgpu_ptx_force_max_capability)[ \t]++(\d{1,4})\b",
    re.MULTILINE,
)
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


def tree_version_defines(root: Path) -> dict[str, int]:
    """The `*_BINART_VERSION` constants of ROOT's opcode maps (gpu-simulator/ISA_Def/*.h): name
    -> the `-binary version` it stands for. Read from the sources, never the built binary."""
    defines: dict[str, int] = {}
    folder = root / ISA_DEFS
    for path in sorted(folder.glob("*.h")) if folder.is_dir() else []:
        for name, value in VERSION_DEFINE.findall(path.read_text(errors="replace")):
            defines.setdefault(name, int(value))
    return defines


def tree_sass_versions(root: Path) -> set[int]:
    """The SASS versions (`-binary version` in a trace header) ROOT's simulator runs: those of its
    opcode maps (`*_BINART_VERSION` in gpu-simulator/ISA_Def/*.h) that its trace reader selects a
    map for (the names its gpu-simulator/trace-driven and trace-parser sources use; every map's,
    when those sources name none, as a reader laid out otherwise may). Empty when the tree holds
    no such sources: then nothing is known of what it runs."""
    defines = tree_version_defines(root)
    used: set[str] = set()
    for folder in (root / part for part in TRACE_READER):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.suffix in SOURCE_SUFFIXES and path.is_file():
                used.update(VERSION_NAME.findall(path.read_text(errors="replace")))
    selected = {value for name, value in defines.items() if name in used}
    return selected or set(defines.values())


def config_capability(root: Path, config: str) -> int | None:
    """The SASS number the config's gpgpusim.config gives the GPU it models: its compute
    capability (`-gpgpu_compute_capability_major`/`_minor`), else `-gpgpu_occupancy_sm_number`,
    else `-gpgpu_ptx_force_max_capability`; None without any."""
    path = root / GPGPUSIM_CONFIGS / config / "gpgpusim.config"
    if not path.is_file():
        return None
    said: dict[str, int] = {}
    for option, value in CONFIG_CAPABILITY.findall(path.read_text(errors="replace")):
        said[option] = int(value)  # the last one given wins, as in the simulator's option parser
    major, minor = said.get("gpgpu_compute_capability_major"), said.get("gpgpu_compute_capability_minor")
    if major is not None and minor is not None:
        return major * 10 + minor
    return said.get("gpgpu_occupancy_sm_number") or said.get("gpgpu_ptx_force_max_capability")


def config_generation_in_tree(root: Path, config: str) -> range | None:
    """The SASS generation `config` models: by its `SMxx_` name (sass.config_generation, the
    contract's rule), else by what its gpgpusim.config says (a config of the user's own naming)."""
    by_name = sass.config_generation(config)
    if by_name is not None:
        return by_name
    number = config_capability(root, config)
    return None if number is None else sass.generation(number)


def config_sass(root: Path, config: str, runs: set[int] | None = None) -> set[int]:
    """The SASS versions of the config's generation that ROOT's simulator runs (`runs`: its
    tree_sass_versions, when already read)."""
    models = config_generation_in_tree(root, config)
    runs = tree_sass_versions(root) if runs is None else runs
    return set() if models is None else {v for v in runs if v in models}


def tree_runs(root: Path) -> dict[str, set[int]]:
    """Each of ROOT's tested configs with the SASS versions it runs there."""
    runs = tree_sass_versions(root)
    return {config: config_sass(root, config, runs) for config in tree_configs(root)}


def described(runs: dict[str, set[int]]) -> str:
    """`SM75_RTX2060 (75), SM90_H100 (none)`: configs with what they run."""
    return ", ".join(f"{c} ({_versions(s) or 'none'})" for c, s in runs.items()) or "no tested config"


def _versions(versions) -> str:
    return "/".join(map(str, sorted(versions)))


def check_sass(
    root: Path, config: str, versions: dict[str, int], *, force: bool, said_by: str | None = None
) -> None:
    """Every listed trace's SASS version is one the config runs in ROOT (the simulator stops at
    the first one it has no opcode map for, `unsupported binary version`, with exit status 0).
    `versions` maps each trace file to its header's version; `said_by` names what said it instead
    (the trace's `trace_gpu_arch`, before anything is pulled). A tree whose sources say nothing
    of the versions it runs is held to the config's generation only."""
    if force or not versions:
        return
    known = bool(tree_sass_versions(root))
    models = config_generation_in_tree(root, config)
    if known:
        runs = config_sass(root, config)
    elif models is not None:
        runs = set(models)
    else:
        return  # neither the tree nor the config's name says: the simulator will
    wrong = {name: v for name, v in versions.items() if v not in runs}
    if not wrong:
        return
    found = _versions(set(wrong.values()))
    where = said_by or f"{len(wrong)} of {len(versions)} listed trace files, e.g. {next(iter(wrong))}"
    if not known:
        first, last = models[0], models[-1]
        span = f"{first}" if first == last else f"{first}-{last}"
        raise WrongSass(
            f"config {config} models SASS {span}, the trace is SASS {found} ({where}); "
            f"{root} has no opcode maps ({ISA_DEFS}/*.h) to say what it runs; --force to run anyway"
        )
    what = f"runs SASS {_versions(runs)}" if runs else "runs no SASS in this tree"
    raise WrongSass(
        f"config {config} {what}, the trace is SASS {found} ({where}); {root}'s tested configs run: "
        f"{described(tree_runs(root))}; --force to run anyway"
    )


def suggestion_note(root: Path, suggested: str | None) -> str | None:
    """One line when ROOT lacks the trace's `suggested_sim_config` (the config of the GPU it was
    traced on), naming the nearest config it has (same generation first, then the nearest SM
    number); None when it has it or nothing is suggested. For `cascade simulate` and the worker."""
    if not suggested:
        return None
    configs = tree_configs(root)
    if suggested in configs:
        return None
    nearest = sass.nearest_config(suggested, configs)
    near = f"; its nearest config is {nearest}" if nearest else f"; it has {', '.join(configs) or 'none'}"
    return f"the trace suggests config {suggested} (the config of its GPU), which {root} lacks{near}"


def arch_version(trace_gpu_arch: str | None) -> int | None:
    """75 for `sm_75`, None when the trace does not say (sass.arch_version)."""
    return sass.arch_version(trace_gpu_arch)


def open_trace(path: Path):
    return lzma.open(path, "rb") if path.name.endswith(".xz") else path.open("rb")


def readable_header(name: str) -> bool:
    """A trace file whose header Cascade can read: `.trace`/`.traceg`, plain or `.xz`. Another
    (Accel-Sim 2.0's zstd `.tracez`, whose layout is not known here) is handed over as named."""
    return name.endswith((".trace", ".traceg", ".trace.xz", ".traceg.xz"))


def binary_version(path: Path) -> int | None:
    """The `-binary version = N` of a trace file's header, None without one (or for a file whose
    layout Cascade cannot read: the trace's `trace_gpu_arch` said it before the pull)."""
    if not readable_header(path.name):
        return None
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
        held = traces / name
        if held.is_file() or (held.exists() and not readable_header(name)):
            sources[name] = held  # a layout Cascade cannot read (2.0's .tracez) is accepted by name
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
    # Files whose headers cannot be read here (.tracez) were checked by the trace's trace_gpu_arch.
    check_sass(root, config, {n: v for n, v in versions.items() if v is not None}, force=force)
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
