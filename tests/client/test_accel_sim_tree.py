"""What a simulator tree runs is read from the tree, never from a list in Cascade (issue 39).

The trees are laid out as each Accel-Sim version is (tests/client/accel_sim_trees.py cites the
files and commits). The expected values come from outside Cascade: the table of
../shared/docs/accel-sim-simulator.md ("Tested configs that exist at these commits"), observed
with a real build of 73f9fac, and the sweeps contract's generation rule (issue 39).
"""

import io
import lzma

import pytest
from cascade_client import accel_sim, sass
from cascade_client.accel_sim import (
    SimulateError,
    check_sass,
    config_sass,
    prepare,
    suggestion_note,
    tree_configs,
    tree_sass_versions,
)

from tests.client.accel_sim_trees import (
    DOCUMENTED_73F9FAC,
    GPGPUSIM_CONFIGS,
    OPCODE_MAPS_73F9FAC,
    add_config,
    opcode_maps,
    tree_2_0,
    tree_73f9fac,
    tree_a100,
    tree_h100_test,
)


def test_the_73f9fac_tree_runs_what_the_real_build_ran(tmp_path):
    root = tree_73f9fac(tmp_path)
    assert tree_configs(root) == sorted(DOCUMENTED_73F9FAC)  # SM2_GTX480 has no trace.config
    assert tree_sass_versions(root) == set().union(*DOCUMENTED_73F9FAC.values())
    assert {c: config_sass(root, c) for c in tree_configs(root)} == DOCUMENTED_73F9FAC
    # The document's "no Ada or Hopper ... and no opcode map for them".
    assert not tree_sass_versions(root) & {89, 90}


def test_an_a100_config_runs_ampere_sass_with_the_same_maps(tmp_path):
    root = tree_a100(tmp_path)
    assert "SM80_A100" in tree_configs(root)
    assert config_sass(root, "SM80_A100") == {80, 86}


def test_the_h100_test_branchs_dummy_config_runs_nothing_without_a_hopper_map(tmp_path):
    root = tree_h100_test(tmp_path)
    assert "SM90_H100" in tree_configs(root)
    assert 90 not in tree_sass_versions(root)
    # Its gpgpusim.config carries Volta's numbers; the name says the generation it is for.
    assert config_sass(root, "SM90_H100") == set()
    with pytest.raises(SimulateError) as refused:
        check_sass(root, "SM90_H100", {"h100": 90}, force=False, said_by="its trace_gpu_arch is sm_90")
    message = str(refused.value)
    assert message.startswith("config SM90_H100 runs no SASS in this tree, the trace is SASS 90")
    assert "SM90_H100 (none)" in message and "SM86_RTX3070 (80/86)" in message


def test_accel_sim_2_runs_hopper_from_its_own_map_without_a_change_to_cascade(tmp_path):
    root = tree_2_0(tmp_path)
    assert {"SM80_A100", "SM90_H100"} <= set(tree_configs(root))
    assert tree_sass_versions(root) == {35, 60, 61, 70, 75, 80, 86, 90}
    assert config_sass(root, "SM90_H100") == {90}
    check_sass(root, "SM90_H100", {"kernel-1.traceg": 90}, force=False)  # no refusal


def test_a_map_the_reader_does_not_select_is_not_run(tmp_path):
    root = tree_73f9fac(tmp_path)
    (root / "gpu-simulator/ISA_Def/hopper_opcode.h").write_text("#define HOPPER_BINART_VERSION 90\n")
    assert 90 not in tree_sass_versions(root)  # trace_driven.cc never compares with it


def test_a_reader_laid_out_otherwise_runs_every_map_the_tree_has(tmp_path):
    opcode_maps(tmp_path, OPCODE_MAPS_73F9FAC)
    (tmp_path / "gpu-simulator/trace-driven/trace_driven.cc").write_text("// maps chosen elsewhere\n")
    assert tree_sass_versions(tmp_path) == {35, 60, 61, 70, 75, 80, 86}


def test_a_tree_without_sources_is_held_to_the_configs_generation_only(tmp_path):
    for config in ("SM75_RTX2060", "SM86_RTX3070"):
        add_config(tmp_path, config, (0, 0, 0, 0))
    assert tree_sass_versions(tmp_path) == set()
    check_sass(tmp_path, "SM86_RTX3070", {"a100": 80}, force=False)
    with pytest.raises(SimulateError, match=r"config SM75_RTX2060 models SASS 75, the trace is SASS 80 "):
        check_sass(tmp_path, "SM75_RTX2060", {"a100": 80}, force=False)


def test_a_config_of_the_users_naming_models_what_its_gpgpusim_config_says(tmp_path):
    root = tree_73f9fac(tmp_path)
    add_config(root, "MY_A30", (80, 8, 0, 80))
    assert config_sass(root, "MY_A30") == {80, 86}
    (root / GPGPUSIM_CONFIGS / "MY_A30/gpgpusim.config").write_text("-gpgpu_occupancy_sm_number 75\n")
    assert config_sass(root, "MY_A30") == {75}


def test_a_sass_the_config_cannot_run_is_refused_listing_the_trees_configs(tmp_path):
    root = tree_73f9fac(tmp_path)
    with pytest.raises(SimulateError) as refused:
        check_sass(root, "SM75_RTX2060", {"gemm": 80}, force=False, said_by="its trace_gpu_arch is sm_80")
    message = str(refused.value)
    assert message.startswith(
        "config SM75_RTX2060 runs SASS 75, the trace is SASS 80 (its trace_gpu_arch is sm_80)"
    )
    for config, versions in DOCUMENTED_73F9FAC.items():
        assert f"{config} ({'/'.join(map(str, sorted(versions)))})" in message
    assert message.endswith("--force to run anyway")
    check_sass(root, "SM75_RTX2060", {"gemm": 80}, force=True)


@pytest.mark.parametrize(
    ("config", "models"),
    [
        # The sweeps contract's rule, as issue 39 states it.
        ("SM6_TITANX", range(60, 70)),
        ("SM7_QV100", range(70, 73)),
        ("SM75_RTX2060", range(75, 76)),
        ("SM80_A100", range(80, 88)),
        ("SM86_RTX3070", range(80, 88)),
        ("SM89_RTX4060_LAPTOP", range(89, 90)),
        ("SM90_H100", range(90, 100)),
        ("SM100_B200", range(100, 110)),
        ("SM3_KEPLER_TITAN", range(30, 40)),
        ("QV100-SASS", None),
    ],
)
def test_a_configs_name_says_its_generation(config, models):
    assert sass.config_generation(config) == models


@pytest.mark.parametrize(
    ("arch", "version"),
    [("sm_75", 75), ("sm_90a", 90), ("SM_86", 86), ("sm80", 80), ("", None), (None, None)],
)
def test_a_traces_sass_version_comes_from_its_arch(arch, version):
    assert sass.arch_version(arch) == version


@pytest.mark.parametrize(
    ("build", "suggested", "nearest"),
    [
        (tree_73f9fac, "SM80_A100", "SM86_RTX3070"),  # same generation
        (tree_73f9fac, "SM90_H100", "SM86_RTX3070"),  # none: the nearest SM number
        (tree_73f9fac, "SM89_RTX4060_LAPTOP", "SM86_RTX3070"),
        (tree_a100, "SM86_RTX3070", None),  # it has it
        (tree_a100, "SM89_RTX4060_LAPTOP", "SM86_RTX3070"),  # 86 is nearer 89 than 80
        (tree_2_0, "SM90_H100", None),
        (tree_2_0, "SM90_H200", "SM90_H100"),
    ],
)
def test_a_missing_suggested_config_names_the_trees_nearest(tmp_path, build, suggested, nearest):
    root = build(tmp_path)
    note = suggestion_note(root, suggested)
    if nearest is None:
        assert note is None
    else:
        assert note == (
            f"the trace suggests config {suggested} (the config of its GPU), which {root} lacks; "
            f"its nearest config is {nearest}"
        )


def test_nothing_is_said_when_nothing_is_suggested(tmp_path):
    assert suggestion_note(tree_73f9fac(tmp_path), None) is None
    assert sass.nearest_config("SM7_QV100", ["SM75_RTX2060", "SM7_TITANV", "SM7_GV100"]) == "SM7_GV100"


ZSTD_FRAME = b"\x28\xb5\x2f\xfd" + b"\x00" * 12  # zstd's magic number: the layout past it is not known


def test_tracez_files_are_handed_over_as_the_kernel_list_names_them(tmp_path):
    root = tree_2_0(tmp_path / "accel-sim")
    traces = tmp_path / "run/traces"
    traces.mkdir(parents=True)
    listed = ["MemcpyHtoD,0x00007f0000000000,4096", "kernel-1.tracez", "kernel-2.tracez"]
    (traces / "kernelslist.g").write_text("".join(line + "\n" for line in listed))
    for name in listed[1:]:
        # A header line inside must not be read as one: the file's layout is not known here.
        (traces / name).write_bytes(ZSTD_FRAME + b"\n-binary version = 75\n")
    before = {p.name: p.read_bytes() for p in traces.iterdir()}
    out = io.StringIO()
    listing = prepare(root, traces, config="SM90_H100", jobs=1, force=False, out=out)
    assert listing == traces / "kernelslist.g"
    assert {p.name: p.read_bytes() for p in traces.iterdir()} == before  # never post-processed or rewritten
    assert out.getvalue() == ""
    assert accel_sim.binary_version(traces / "kernel-1.tracez") is None


def test_a_tracez_the_run_lacks_is_still_refused_by_name(tmp_path):
    root = tree_2_0(tmp_path / "accel-sim")
    traces = tmp_path / "run/traces"
    traces.mkdir(parents=True)
    (traces / "kernelslist.g").write_text("kernel-1.tracez\nkernel-2.tracez\n")
    (traces / "kernel-1.tracez").write_bytes(ZSTD_FRAME)
    with pytest.raises(
        SimulateError, match=r"names 1 of 2 trace files the pull does not have \(kernel-2.tracez\)"
    ):
        prepare(root, traces, config="SM90_H100", jobs=1, force=False, out=io.StringIO())


def test_a_readable_header_is_still_checked_against_the_tree(tmp_path):
    root = tree_73f9fac(tmp_path / "accel-sim")
    traces = tmp_path / "run/traces"
    traces.mkdir(parents=True)
    (traces / "kernelslist.g").write_text("kernel-1.traceg.xz\n")
    (traces / "kernel-1.traceg.xz").write_bytes(
        lzma.compress(b"-kernel id = 1\n-binary version = 90\n#BEGIN_TB\n")
    )
    with pytest.raises(
        SimulateError, match=r"^config SM86_RTX3070 runs SASS 80/86, the trace is SASS 90 \(1 of 1"
    ):
        prepare(root, traces, config="SM86_RTX3070", jobs=1, force=False, out=io.StringIO())
