"""accel-sim-framework trees laid out as each version of Accel-Sim is, for the tests of what
Cascade reads from a tree (cascade_client.accel_sim). Only the parts read are written, each as
the real sources have it:

- 73f9fac: accel-sim-framework `dev` 73f9fac68a1a717750da54d2d867c7524b47b4c3 (2024-10-08) with
  gpgpu-sim_distribution `dev` 667834cfe5214523edd7769aeab77f91b7137686 (2024-10-07), the build
  ../shared/docs/accel-sim-simulator.md was observed with. Its opcode maps,
  gpu-simulator/ISA_Def/{kepler,pascal,volta,turing,ampere}_opcode.h, each define the
  `-binary version`s they are for (`#define AMPERE_RTX_BINART_VERSION 86`,
  `#define AMPERE_A100_BINART_VERSION 80`, `PASCAL_TITANX` 61, `PASCAL_P100` 60, `VOLTA` 70,
  `TURING` 75, `KEPLER` 35); gpu-simulator/trace-driven/trace_driven.cc (lines 104-121,
  trace_kernel_info_t's constructor) selects a map by comparing the trace's binary version with
  each, else prints `unsupported binary version`. Its tested configs: gpgpu-sim's
  configs/tested-cfgs/<CONFIG>/gpgpusim.config (SM2_GTX480 has no trace.config), with the
  `-gpgpu_ptx_force_max_capability`, `-gpgpu_compute_capability_major/minor` and
  `-gpgpu_occupancy_sm_number` values of GPU_NUMBERS below, as those files give them.
- A100: the same with an `SM80_A100` config (accel-sim-framework 443, gpgpu-sim_distribution
  120, named so since 129: accel-sim-simulator.md). Its files are not in any snapshot here; its
  numbers are taken as the A100's (8.0).
- h100-test: accel-sim-framework branch `h100-test` c4d00b55463350d5e79119c673c4c58f21871d99
  (2024-10-23, "dummpy h100 config") adds gpu-simulator/configs/tested-cfgs/SM90_H100/trace.config,
  gpgpu-sim_distribution `h100-test` fa235ebc adds configs/tested-cfgs/SM90_H100/ whose
  gpgpusim.config still carries Volta's numbers (capability 7.0, occupancy 70), and no opcode map
  for 90: ISA_Def is 73f9fac's.
- 2.0: Accel-Sim 2.0 (accel-sim-framework 553, merged into `dev` 2026-08-25) runs Hopper; its
  sources are in no snapshot here. Laid out as h100-test plus a Hopper opcode map written the
  way every earlier map is (`#define HOPPER_BINART_VERSION 90` in ISA_Def/hopper_opcode.h,
  selected in trace_driven.cc) and its traces as per-warp zstd `.tracez` files (their layout
  unknown: only their names matter to Cascade).
"""

from pathlib import Path

GPGPUSIM_CONFIGS = "gpu-simulator/gpgpu-sim/configs/tested-cfgs"
ACCELSIM_CONFIGS = "gpu-simulator/configs/tested-cfgs"

# ISA_Def header -> its `*_BINART_VERSION` defines (73f9fac).
OPCODE_MAPS_73F9FAC = {
    "kepler_opcode.h": {"KEPLER_BINART_VERSION": 35},
    "pascal_opcode.h": {"PASCAL_TITANX_BINART_VERSION": 61, "PASCAL_P100_BINART_VERSION": 60},
    "volta_opcode.h": {"VOLTA_BINART_VERSION": 70},
    "turing_opcode.h": {"TURING_BINART_VERSION": 75},
    "ampere_opcode.h": {"AMPERE_RTX_BINART_VERSION": 86, "AMPERE_A100_BINART_VERSION": 80},
}
HOPPER_MAP = {"hopper_opcode.h": {"HOPPER_BINART_VERSION": 90}}

# ../shared/docs/accel-sim-simulator.md's table, not these trees: config -> the `-binary version`s
# it runs, seen in a real run of 73f9fac (what the tests expect Cascade to read from a tree).
DOCUMENTED_73F9FAC = {
    "SM3_KEPLER_TITAN": {35},
    "SM6_TITANX": {60, 61},
    "SM7_QV100": {70},
    "SM7_GV100": {70},
    "SM7_TITANV": {70},
    "SM75_RTX2060": {75},
    "SM75_RTX2060_S": {75},
    "SM86_RTX3070": {80, 86},
}

# config -> (ptx_force_max_capability, compute capability major, minor, occupancy_sm_number),
# as gpgpu-sim 667834c's (and h100-test fa235ebc's SM90_H100) gpgpusim.config give them.
GPU_NUMBERS = {
    "SM2_GTX480": (20, 2, 0, 20),
    "SM3_KEPLER_TITAN": (35, 3, 5, 62),
    "SM6_TITANX": (61, 6, 1, 62),
    "SM7_QV100": (70, 7, 0, 70),
    "SM7_GV100": (70, 7, 0, 70),
    "SM7_TITANV": (70, 7, 0, 70),
    "SM75_RTX2060": (75, 7, 5, 75),
    "SM75_RTX2060_S": (75, 7, 5, 75),
    "SM86_RTX3070": (86, 8, 6, 86),
}
CONFIGS_73F9FAC = list(GPU_NUMBERS)
A100_NUMBERS = {"SM80_A100": (80, 8, 0, 80)}
H100_TEST_NUMBERS = {"SM90_H100": (70, 7, 0, 70)}  # the dummy config: Volta's numbers


def opcode_maps(root: Path, maps: dict[str, dict[str, int]]) -> None:
    """ISA_Def headers with their version defines, and a trace reader selecting a map by each."""
    isa = root / "gpu-simulator/ISA_Def"
    isa.mkdir(parents=True, exist_ok=True)
    (isa / "trace_opcode.h").write_text("// the opcode enums (no version here)\n")
    selections = []
    for header, defines in maps.items():
        family = header.removesuffix("_opcode.h").capitalize()
        (isa / header).write_text(
            "".join(f"#define {name} {value}\n" for name, value in defines.items())
            + f"static const std::unordered_map<std::string, OpcodeChar> {family}_OpcodeMap = {{}};\n"
        )
        tests = " ||\n      ".join(f"kernel_trace_info->binary_verion == {name}" for name in defines)
        selections.append(f"if ({tests})\n    OpcodeMap = &{family}_OpcodeMap;")
    reader = root / "gpu-simulator/trace-driven/trace_driven.cc"
    reader.parent.mkdir(parents=True, exist_ok=True)
    reader.write_text(
        "  // resolve the binary version\n  "
        + "\n  else ".join(selections)
        + '\n  else {\n    printf("unsupported binary version: %d\\n", kernel_trace_info->binary_verion);\n'
        "    exit(0);\n  }\n"
    )


def add_config(root: Path, config: str, numbers: tuple[int, int, int, int], *, trace_config=True) -> None:
    force, major, minor, occupancy = numbers
    folder = root / GPGPUSIM_CONFIGS / config
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpgpusim.config").write_text(
        f"# functional simulator specification\n-gpgpu_ptx_force_max_capability {force}\n"
        f"-gpgpu_compute_capability_major {major}\n-gpgpu_compute_capability_minor {minor}\n"
        f"-gpgpu_occupancy_sm_number {occupancy}\n"
    )
    if trace_config:
        accel = root / ACCELSIM_CONFIGS / config
        accel.mkdir(parents=True, exist_ok=True)
        (accel / "trace.config").write_text("-trace_opcode_latency_initiation_int 2,2\n")


def tree_73f9fac(root: Path) -> Path:
    opcode_maps(root, OPCODE_MAPS_73F9FAC)
    for config, numbers in GPU_NUMBERS.items():
        add_config(root, config, numbers, trace_config=config != "SM2_GTX480")
    return root


def tree_a100(root: Path) -> Path:
    tree_73f9fac(root)
    add_config(root, "SM80_A100", A100_NUMBERS["SM80_A100"])
    return root


def tree_h100_test(root: Path) -> Path:
    tree_73f9fac(root)
    add_config(root, "SM90_H100", H100_TEST_NUMBERS["SM90_H100"])
    return root


def tree_2_0(root: Path) -> Path:
    tree_h100_test(root)
    add_config(root, "SM80_A100", A100_NUMBERS["SM80_A100"])
    opcode_maps(root, {**OPCODE_MAPS_73F9FAC, **HOPPER_MAP})
    return root
