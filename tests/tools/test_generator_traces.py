"""The generator's instruction traces against real ones: what the simulator runs.

The truth is the real traces in `shared_fixture("real-simulatable")` (traced by the Accel-Sim
NVBit tracer and run to completion by the real simulator, SOURCES.md there). The line grammar
below is written from their lines, and checked on them first; the grouping is read by a reader
written here from the post-processor's output format, also checked on them first. The simulator
aborts unless every warp of every block is in a trace (docs/formats.md#the-simulators-log),
so that is counted from the header's dimensions: blocks = product of grid dim, warps per block
= ceil(threads / 32).
"""

import functools
import lzma
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import shared_fixture
from tools import workload
from tools.generator import RunSpec, launches, write_run
from tools.samples import SAMPLES

REPO = Path(__file__).resolve().parents[2]
# Tested configs at accel-sim-framework 73f9fac / gpgpu-sim 667834c, and the SASS each runs
# (docs/formats.md#the-simulators-log).
TESTED_CONFIGS = {"SM75_RTX2060": {75}, "SM75_RTX2060_S": {75}, "SM86_RTX3070": {80, 86}, "SM7_QV100": {70}}

# One instruction as the real grouped traces hold it (the raw ones prefix `x y z warp [line] `):
# PC, active mask, destinations (0, or 1 and a register), opcode, source count and registers,
# then the memory part (0; or width, address format and addresses: 1 = base and stride,
# 2 = base and deltas, 0 = each address), then the immediate (tracer v5; v4 has none) and
# whatever a fork appends (STORE_DATA ...), each field followed by a space.
INSTRUCTION = re.compile(
    r"(?P<pc>[0-9a-f]{4,}) (?P<mask>[0-9a-f]{8}) (?:0|1 R\d+) (?P<opcode>[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*) "
    r"(?P<sources>\d+) (?P<registers>(?:R\d+ )*)"
    r"(?:0 |(?P<width>\d+) (?:1 0x[0-9a-f]+ -?\d+ |2 0x[0-9a-f]+ (?:-?\d+ )*|0 (?:0x[0-9a-f]{16} )*))"
    r"(?P<immediate>-?\d+ )?(?:STORE_DATA .*)?"
)
RAW_PREFIX = re.compile(r"(?P<x>\d+) (?P<y>\d+) (?P<z>\d+) (?P<warp>\d+) ")
HEADER_LINE = re.compile(r"-(?P<key>[a-z][a-z_ ]*[a-z]) = (?P<value>.*)")
FORMAT_LINE = "#traces format = "


def real(name: str) -> Path:
    return shared_fixture("real-simulatable", name, "traces")


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return (lzma.decompress(data) if path.name.endswith(".xz") else data).decode()


def header(text: str) -> tuple[list[str], dict[str, str]]:
    keys, values = [], {}
    for line in text.split("\n\n", 1)[0].splitlines():
        match = HEADER_LINE.fullmatch(line)
        assert match, line
        keys.append(match["key"])
        values[match["key"]] = match["value"]
    return keys, values


def dims(values: dict[str, str], key: str) -> tuple[int, int, int]:
    x, y, z = re.fullmatch(r"\((\d+),(\d+),(\d+)\)", values[key]).groups()
    return int(x), int(y), int(z)


def expected_warps(values: dict[str, str]) -> set[tuple[tuple[int, int, int], int]]:
    """Every (block, warp) the simulator gives this kernel."""
    gx, gy, gz = dims(values, "grid dim")
    bx, by, bz = dims(values, "block dim")
    warps = math.ceil(bx * by * bz / 32)
    return {((x, y, z), w) for z in range(gz) for y in range(gy) for x in range(gx) for w in range(warps)}


def check_instruction(line: str) -> str:
    match = INSTRUCTION.fullmatch(line)
    assert match, repr(line)
    assert len(match["registers"].split()) == int(match["sources"]), line
    return match["opcode"]


def read_grouped(text: str) -> dict[tuple[tuple[int, int, int], int], list[str]]:
    """(block, warp) -> instruction lines, reading the post-processor's layout strictly:
    `#BEGIN_TB`, blank, `thread block = x,y,z`, then per warp blank, `warp = w`, `insts = n` and n
    lines; blank, `#END_TB`."""
    body = text.split(FORMAT_LINE, 1)[1].split("\n", 1)[1]
    lines = body.split("\n")
    warps: dict = {}
    i = 0
    while i < len(lines):
        if lines[i] == "":
            i += 1
            continue
        assert lines[i] == "#BEGIN_TB" and lines[i + 1] == "", lines[i : i + 2]
        block = tuple(
            int(n) for n in re.fullmatch(r"thread block = (\d+),(\d+),(\d+)", lines[i + 2]).groups()
        )
        i += 3
        while lines[i] == "" and lines[i + 1].startswith("warp = "):
            warp = int(lines[i + 1].removeprefix("warp = "))
            count = int(re.fullmatch(r"insts = (\d+)", lines[i + 2])[1])
            assert (block, warp) not in warps
            warps[block, warp] = lines[i + 3 : i + 3 + count]
            i += 3 + count
        assert lines[i] == "" and lines[i + 1] == "#END_TB", lines[i : i + 2]
        i += 2
    return warps


def read_raw(text: str, lineinfo: bool) -> dict[tuple[tuple[int, int, int], int], list[str]]:
    """(block, warp) -> instruction lines of a raw trace, in the order written."""
    warps: dict = {}
    body = text.split(FORMAT_LINE, 1)[1].split("\n", 1)[1]
    for line in body.split("\n"):
        if not line:
            continue
        match = RAW_PREFIX.match(line)
        assert match, line
        rest = line[match.end() :]
        if lineinfo:
            rest = rest.split(" ", 1)[1]
        warps.setdefault(
            ((int(match["x"]), int(match["y"]), int(match["z"])), int(match["warp"])), []
        ).append(rest)
    return warps


# --- The real traces: the grammar and the reader hold on them ----------------------------------------

REAL_GROUPED = [
    ("qishao-chalmers+accel-sim-framework__vectoradd-vectorsub-sm75", "kernel-1-ctx_0x2356c30.traceg.xz"),
    ("MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80", "kernel-3.traceg.xz"),
    ("MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80", "kernel-7.traceg.xz"),
    ("romnn+microgpusim__vectoradd-100-32-sm61", "kernel-1.traceg"),
]
RAW_TRACE = ("qishao-chalmers+accel-sim-framework__vecadd-raw-sm75", "kernel-1-ctx_0x189ec30.trace.xz")
V5_REAL = ("qishao-chalmers+accel-sim-framework__vecadd-raw-sm75", "kernel-1-ctx_0x189ec30.trace.xz")


@pytest.mark.parametrize(("folder", "name"), REAL_GROUPED, ids=lambda v: v.split("__")[-1])
def test_the_grammar_and_the_reader_hold_on_real_grouped_traces(folder, name):
    text = read_text(real(folder) / name)
    _, values = header(text)
    warps = read_grouped(text)
    assert set(warps) == expected_warps(values)
    for lines in list(warps.values())[:200]:
        for line in lines:
            check_instruction(line)


def test_the_grammar_holds_on_the_real_raw_trace():
    text = read_text(real(RAW_TRACE[0]) / RAW_TRACE[1])
    _, values = header(text)
    warps = read_raw(text, lineinfo=values["enable lineinfo"] == "1")
    assert set(warps) == expected_warps(values)
    for lines in list(warps.values())[:100]:
        for line in lines:
            check_instruction(line)


@functools.cache
def real_opcodes(sass: int) -> set[str]:
    """The opcodes real traces of that SASS version hold (of the Turing one, its vectorAdd kernel)."""
    folders = {
        75: ("qishao-chalmers+accel-sim-framework__vectoradd-vectorsub-sm75", "kernel-1-*.traceg.xz"),
        80: ("MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80", "kernel-*.traceg.xz"),
        61: ("romnn+microgpusim__vectoradd-100-32-sm61", "kernel-*.traceg"),
    }
    opcodes = set()
    folder, pattern = folders[sass]
    for path in sorted(real(folder).glob(pattern)):
        for lines in read_grouped(read_text(path)).values():
            opcodes.update(check_instruction(line) for line in lines)
    return opcodes


# --- Generated runs ------------------------------------------------------------------------------------

ARCHS = {"sm_75": ("SM75_RTX2060", 75), "sm_80": ("SM86_RTX3070", 80), "sm_90": ("SM90_H100", 80)}


def generated(tmp_path: Path, arch: str, layout: str) -> tuple[Path, RunSpec]:
    spec = RunSpec(
        kernels=360,
        contexts=1,
        seed=11,
        trace_gpu_arch=arch,
        suggested_sim_config=ARCHS[arch][0],
        layers=("step 0 (prefill)", "step 2 (decode)"),
        trace_files=layout,
    )
    folder = tmp_path / f"{arch}-{layout}"
    write_run(folder, spec)
    return folder, spec


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("layout", ["raw", "grouped"])
def test_generated_traces_read_as_the_real_ones_whole(tmp_path, arch, layout):
    folder, spec = generated(tmp_path, arch, layout)
    traced = [launch for launch in launches(spec) if launch.traced]
    assert traced, "a run must trace something"
    real_keys, _ = header(read_text(real(V5_REAL[0]) / V5_REAL[1]))
    opcodes = real_opcodes(ARCHS[arch][1])
    files = sorted((folder / "traces").glob("kernel-*"))
    # Never one layout under the other's name: raw lines in `.trace[.xz]`, grouped in `.traceg[.xz]`.
    suffix = ".trace.xz" if layout == "raw" else ".traceg.xz"
    assert [p.name for p in files] == sorted(
        launch.trace_file if layout == "raw" else launch.grouped_trace_file for launch in traced
    )
    assert all(p.name.endswith(suffix) for p in files)
    by_name = {
        (launch.grouped_trace_file if layout == "grouped" else launch.trace_file): launch for launch in traced
    }
    for path in files:
        text = read_text(path)
        keys, values = header(text)
        assert keys == real_keys  # the same keys, in the same order, as the tracer's
        assert values["binary version"] == arch.removeprefix("sm_")
        assert FORMAT_LINE in text
        if layout == "raw":
            assert "#BEGIN_TB" not in text
            warps = read_raw(text, lineinfo=False)
        else:
            warps = read_grouped(text)
        assert set(warps) == expected_warps(values)  # every warp of every block
        seen = Counter(check_instruction(line) for lines in warps.values() for line in lines)
        assert all(INSTRUCTION.fullmatch(line)["immediate"] for lines in warps.values() for line in lines)
        assert set(seen) <= opcodes, set(seen) - opcodes  # opcodes real traces of that SASS hold
        launch = by_name[path.name]
        # The stats' totals for it are what its trace holds (plus replayed graphs, counted there).
        assert sum(seen.values()) == launch.total_insts
        assert {len(lines) for lines in warps.values()} <= set(range(10, 100))  # tens per warp
        assert len(warps) <= spec.max_traced_warps


def test_a_legacy_run_writes_tracer_v4_traces_uncompressed(tmp_path):
    """`kernel-N.trace` (no context, no xz), headed as the v4 tracer heads them, lines without the
    immediate v5 added: as the real Pascal trace."""
    spec = RunSpec(kernels=360, format="legacy", seed=2, layers=("step 0 (prefill)", "step 2 (decode)"))
    write_run(tmp_path / "legacy", spec)
    v4_keys, v4 = header(read_text(real("romnn+microgpusim__vectoradd-100-32-sm61") / "kernel-1.traceg"))
    assert v4["accelsim tracer version"] == "4"
    traced = [launch for launch in launches(spec) if launch.traced]
    assert traced
    for launch in traced:
        path = tmp_path / "legacy" / "traces" / f"kernel-{launch.kernel_id}.trace"
        text = path.read_text()
        keys, values = header(text)
        assert keys == v4_keys and values["accelsim tracer version"] == "4"
        assert (
            text.split("\n\n")[1]
            == "#traces format = "
            + read_text(real("romnn+microgpusim__vectoradd-100-32-sm61") / "kernel-1.traceg")
            .split("#traces format = ")[1]
            .split("\n")[0]
        )
        warps = read_raw(text, lineinfo=False)
        assert set(warps) == expected_warps(values)
        for lines in warps.values():
            for line in lines:
                check_instruction(line)
                assert INSTRUCTION.fullmatch(line)["immediate"] is None, line  # v4 prints none


def test_the_grouped_layout_is_what_post_processing_makes_of_the_raw_one(tmp_path):
    """Per warp, the same instructions in the same order (post-traces-processing keeps each warp's
    lines in the order the raw file has them); the lists say `.traceg` where the raw ones say `.trace`."""
    raw, _ = generated(tmp_path, "sm_75", "raw")
    grouped, _ = generated(tmp_path, "sm_75", "grouped")
    for path in sorted((raw / "traces").glob("kernel-*.trace.xz")):
        text = read_text(path)
        assert read_raw(text, lineinfo=False) == read_grouped(
            read_text(grouped / "traces" / workload.grouped_name(path.name))
        )
    (raw_list,) = (raw / "traces").glob("kernelslist_ctx_*")
    post = (grouped / "traces" / f"{raw_list.name}.g").read_text().splitlines()
    assert post == [
        line if line.startswith("MemcpyHtoD") else line.replace(".trace.xz", ".traceg.xz")
        for line in raw_list.read_text().splitlines()
    ]


def test_kernelslist_memcpy_lines_have_exactly_three_fields(tmp_path):
    folder, _ = generated(tmp_path, "sm_80", "raw")
    for path in (folder / "traces").glob("kernelslist*"):
        for line in path.read_text().splitlines():
            if line.startswith("MemcpyHtoD"):
                assert re.fullmatch(r"MemcpyHtoD,0x[0-9a-f]{16},\d+", line)
            else:
                assert (folder / "traces" / line).is_file()


# --- The shipped samples -----------------------------------------------------------------------------


def test_samples_carry_no_config_file_and_turing_and_ampere_name_tested_configs():
    import json

    assert not list((REPO / "samples").glob("*/configs")) and not list((REPO / "samples").rglob("*.config"))
    suggested = {}
    for run_id in SAMPLES:
        metadata = json.loads((REPO / "samples" / run_id / "metadata.json").read_text())
        suggested[metadata["trace_gpu_arch"], run_id] = metadata.get("suggested_sim_config")
        if metadata["trace_gpu_arch"] == "sm_90":
            assert "no Hopper config" in metadata["simulator_note"]
    runs = {arch: config for (arch, _), config in suggested.items()}
    assert 75 in TESTED_CONFIGS[runs["sm_75"]] and 80 in TESTED_CONFIGS[runs["sm_80"]]


@pytest.mark.parametrize("run_id", [r for r in SAMPLES if SAMPLES[r].trace_gpu_arch in ("sm_75", "sm_80")])
def test_simulatable_samples_hold_every_warp_of_every_traced_kernel(run_id):
    traces = REPO / "samples" / run_id / "traces"
    listed = [
        line
        for path in traces.glob("kernelslist_ctx_*")
        for line in path.read_text().splitlines()
        if not line.startswith("MemcpyHtoD")
    ]
    assert listed and all(name.endswith(".trace.xz") for name in listed)
    opcodes = real_opcodes(int(SAMPLES[run_id].trace_gpu_arch.removeprefix("sm_")))
    total = 0
    for name in listed:
        text = read_text(traces / name)
        _, values = header(text)
        warps = read_raw(text, lineinfo=False)
        assert set(warps) == expected_warps(values), name
        assert {check_instruction(line) for lines in warps.values() for line in lines} <= opcodes
        total += sum(len(lines) for lines in warps.values())
    # Seconds, not hours: the simulator runs some 12,500 warp instructions a second.
    assert total < 200_000


def test_accel_sims_own_post_processing_makes_the_grouped_layout_of_the_raw_one(tmp_path):
    """Where an Accel-Sim tree is at hand (ACCEL_SIM_ROOT, as `cascade simulate` takes it): its
    post-processor, run on the raw layout, writes the grouped layout byte for byte. CI has none."""
    import os
    import shutil
    import subprocess
    import time

    root = os.environ.get("ACCEL_SIM_ROOT")
    tool = (
        Path(root or "/nonexistent")
        / "util/tracer_nvbit/tracer_tool/traces-processing/post-traces-processing"
    )
    if not tool.is_file():
        pytest.skip("needs ACCEL_SIM_ROOT, an accel-sim-framework tree with post-traces-processing built")
    raw, _ = generated(tmp_path, "sm_75", "raw")
    grouped, _ = generated(tmp_path, "sm_75", "grouped")
    work = tmp_path / "post"
    shutil.copytree(raw / "traces", work)
    (kernelslist,) = work.glob("kernelslist_ctx_*")
    # Its exit status says nothing (0 also when it fails): the files it writes are checked instead.
    subprocess.run([str(tool), str(kernelslist)], capture_output=True, check=False, timeout=120)
    expected = sorted(p.name for p in (grouped / "traces").iterdir())
    deadline = time.monotonic() + 60  # it returns before its xz writers finish
    while True:
        try:
            made = {p.name: read_text(p) for p in work.glob("*.traceg.xz")}
            if len(made) == len([n for n in expected if n.endswith(".traceg.xz")]):
                break
        except lzma.LZMAError:
            pass
        assert time.monotonic() < deadline, "post-processing did not finish"
        time.sleep(0.5)
    for name in expected:
        if name.endswith(".traceg.xz"):
            assert made[name] == read_text(grouped / "traces" / name), name
    assert (work / f"{kernelslist.name}.g").read_bytes() == (
        grouped / "traces" / f"{kernelslist.name}.g"
    ).read_bytes()
