"""The stats parser on files the real NVBit tracer (and its forks) wrote, in public repositories.

The files are read where they are provided (shared_fixture("real-tracer"); its SOURCES.md says where
each comes from; docs/formats.md#the-tracers-files describes the format).
Every expected value here comes from outside Cascade's code: read off the files by hand (awk and
sha256sum for the long names), or from `spec_rows`, a small reader written in this module from
the tracer's printf format. Nothing here imports the parser's helpers.
"""

import hashlib
import re

import pytest

from ingest.kernelslist import parse_kernelslist_lines
from ingest.stats import KernelRow, StatsError, first_line_extra_columns, parse_stats_lines
from tests.helpers import shared_fixture

REAL = shared_fixture("real-tracer")

FLASHINFER_GEMM = "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__flashinfer-gemm__traces__"
NN_ONESTEP = "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__nn-onestep__traces__"
CUTLASS_FP16 = "liuweibupt+accel-sim-framework__modal__artifacts__fp16-512x512x512__traces__"
VECTOR_ADD_SUB = "qishao-chalmers+accel-sim-framework__util__tracer_nvbit__traces__traces__"

STATS_FILES = [
    REAL / f"{FLASHINFER_GEMM}stats.csv",
    REAL / f"{NN_ONESTEP}stats.csv",
    REAL / f"{CUTLASS_FP16}stats_ctx_0x56201b8d3c00",
    REAL / f"{VECTOR_ADD_SUB}stats_ctx_0x2356c30",
    shared_fixture("accelsim-vecadd-v5", "stats_ctx_0x6165bdd7ec90"),
]
STATS_IDS = ["flashinfer-gemm", "nn-onestep", "cutlass-fp16", "vector-add-sub", "vecadd-v5"]


def parse(data: bytes, **options) -> list[KernelRow]:
    return list(parse_stats_lines(data.splitlines(keepends=True), **options))


def kernel(
    kernel_id: int,
    name: str,
    trace_file: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    totals: tuple[int, int] | None,
) -> KernelRow:
    """A row of a standard (non-fork) file: #blocks and #threads are the products of the dimensions."""
    return KernelRow(
        kernel_id=kernel_id,
        name=name,
        trace_file=trace_file,
        grid_x=grid[0],
        grid_y=grid[1],
        grid_z=grid[2],
        block_x=block[0],
        block_y=block[1],
        block_z=block[2],
        blocks=grid[0] * grid[1] * grid[2],
        threads=block[0] * block[1] * block[2],
        total_insts=None if totals is None else totals[0],
        total_reported_insts=None if totals is None else totals[1],
        device_id=None,
        stream_id=None,
    )


# --- An independent reader, from the tracer's two fprintf formats ----------------------------------
# At launch: "%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, " (trace file, name, grid x/y/z, #blocks,
# block x/y/z, #threads); at exit: "%d,%d\n". None of these real files has graph-captured launches,
# so every physical row is one launch: the launch half, then the totals unless the run was killed.
NUMBER = rb"(-?[0-9]+)"
SPEC_ROW = re.compile(
    rb"(kernel-([0-9]+)[^,]*), (.+), "
    + rb", ".join([NUMBER] * 8)
    + rb", (?:"
    + NUMBER
    + rb","
    + NUMBER
    + rb"\r?\n?)?"
)
SPEC_HEADER = (
    b"kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
    b"block_dimY, block_dimZ, #threads, total_insts, total_reported_insts"
)


def spec_rows(data: bytes) -> list[KernelRow]:
    lines = data.splitlines(keepends=True)
    if lines and lines[0].rstrip(b"\r\n") == SPEC_HEADER:
        lines = lines[1:]
    rows = []
    for line in lines:
        match = SPEC_ROW.fullmatch(line)
        assert match, f"not a tracer row: {line[:120]!r}"
        trace_file, kernel_id, name, *numbers = match.groups()
        gx, gy, gz, blocks, bx, by, bz, threads, total, reported = (
            None if n is None else int(n) % 2**32 for n in numbers
        )
        rows.append(
            KernelRow(
                kernel_id=int(kernel_id),
                name=name.decode(),
                trace_file=trace_file.decode(),
                grid_x=gx,
                grid_y=gy,
                grid_z=gz,
                block_x=bx,
                block_y=by,
                block_z=bz,
                blocks=blocks,
                threads=threads,
                total_insts=total,
                total_reported_insts=reported,
                device_id=None,
                stream_id=None,
            )
        )
    return rows


@pytest.mark.parametrize("path", STATS_FILES, ids=STATS_IDS)
def test_every_row_of_every_real_file_matches_the_independent_reader(path):
    data = path.read_bytes()
    expected = spec_rows(data)
    assert expected, "the reader found no rows"
    # The data itself is what the tracer computes: #blocks and #threads are the products.
    for row in expected:
        assert row.blocks == row.grid_x * row.grid_y * row.grid_z
        assert row.threads == row.block_x * row.block_y * row.block_z
    assert parse(data) == expected


@pytest.mark.parametrize("path", STATS_FILES, ids=STATS_IDS)
def test_real_files_copied_through_other_systems(path):
    """CRLF line endings, a final newline added, or the header dropped (a later context's file)."""
    data = path.read_bytes()
    expected = spec_rows(data)
    assert parse(data.replace(b"\n", b"\r\n")) == expected
    final = data if data.endswith(b"\n") else data + b"\n"
    assert parse(final) == expected
    assert parse(final.replace(b"\n", b"\r\n")) == expected
    header, rest = data.split(b"\n", 1)
    assert first_line_extra_columns(header + b"\n") == 0
    assert first_line_extra_columns(rest.split(b"\n", 1)[0]) is None
    assert parse(rest, extra_columns=0) == expected


# --- Rows checked by hand ---------------------------------------------------------------------------


def test_vector_add_and_sub_two_kernels_in_one_context():
    data = (REAL / f"{VECTOR_ADD_SUB}stats_ctx_0x2356c30").read_bytes()
    assert parse(data) == [
        kernel(
            1,
            "_Z9vectorAddPKfS0_Pfi",
            "kernel-1-ctx_0x2356c30.trace.xz",
            (4096, 1, 1),
            (256, 1, 1),
            (491520, 491520),
        ),
        kernel(
            2,
            "_Z9vectorSubPKfS0_Pfi",
            "kernel-2-ctx_0x2356c30.trace.xz",
            (4096, 1, 1),
            (256, 1, 1),
            (491520, 491520),
        ),
    ]


def test_cutlass_kernel_with_a_1532_character_name_and_an_uncompressed_trace_name():
    data = (REAL / f"{CUTLASS_FP16}stats_ctx_0x56201b8d3c00").read_bytes()
    (row,) = parse(data)
    assert row._replace(name="") == kernel(
        1, "", "kernel-1-ctx_0x56201b8d3c00.trace", (4, 2, 1), (256, 1, 1), (201664, 201664)
    )
    assert len(row.name) == 1532
    assert row.name.startswith("_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock13MmaMultistage")
    assert row.name.endswith("GemmIdentityThreadblockSwizzleILi1EEELb0EEEEEvNT_6ParamsE")
    assert sha256(row.name) == "bf54908bce6383cec8dbc3c7d93368a2d81c7569a99f327d9b15c5799f3c32e6"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


FLASHINFER_NORMAL = (
    "_ZN2at6native54_GLOBAL__N__0d993ca2_21_DistributionNormal_cu_0c5b6e8543distribution_elementwise_"
    "grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIN3c104HalfEfPNS_17CUDAGenerator"
    "ImplEZZZNS4_13normal_kernelIS9_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE1_clEvEUlfE_EEvRNS_18Tens"
    "orIteratorBaseET1_T2_EUlP24curandStatePhilox4_32_10E0_ZNS1_27distribution_nullary_kernelIS7_f6float"
    "4S9_SO_SH_EEvSJ_SL_RKT3_T4_EUlifE_EEviNS_15PhiloxCudaStateESK_SL_"
)


def test_flashinfer_gemm_killed_during_its_tenth_launch():
    """A run killed during kernel 10: its launch half ends the file in ", ", with no totals and no newline."""
    data = (REAL / f"{FLASHINFER_GEMM}stats.csv").read_bytes()
    assert data.endswith(b"ParamsE, 4, 1, 1, 4, 128, 1, 1, 128, ")
    rows = parse(data)
    assert len(rows) == 10
    assert [r.kernel_id for r in rows] == list(range(1, 11))
    assert [r.trace_file for r in rows] == [f"kernel-{n}.trace.xz" for n in range(1, 11)]
    # Read off the file with awk -F', ' (length($2)); the long names are pinned by sha256 below.
    assert [len(r.name) for r in rows] == [458, 458, 282, 272, 105, 79, 157, 115, 28, 1588]
    assert [(r.total_insts, r.total_reported_insts) for r in rows] == [
        (2531, 2531),
        (2531, 2531),
        (115, 115),
        (113, 113),
        (49, 49),
        (68, 68),
        (996, 996),
        (48, 48),
        (920, 920),
        (None, None),
    ]
    assert rows[0] == kernel(1, FLASHINFER_NORMAL, "kernel-1.trace.xz", (1, 1, 1), (256, 1, 1), (2531, 2531))
    assert rows[1] == rows[0]._replace(kernel_id=2, trace_file="kernel-2.trace.xz")
    assert rows[5] == kernel(
        6,
        "_ZN14at_cuda_detail3cub20DeviceScanInitKernelINS0_13ScanTileStateIlLb1EEEEEvT_i",
        "kernel-6.trace.xz",
        (1, 1, 1),
        (128, 1, 1),
        (68, 68),
    )
    assert rows[8] == kernel(
        9, "compute_sm80_group_gemm_args", "kernel-9.trace.xz", (4, 1, 1), (128, 1, 1), (920, 920)
    )
    killed = rows[9]
    assert killed._replace(name="") == kernel(10, "", "kernel-10.trace.xz", (4, 1, 1), (128, 1, 1), None)
    assert killed.name.startswith("_ZN7cutlass6KernelINS_4gemm6kernel11GemmGroupedINS1_11threadblock")
    assert killed.name.endswith(
        "GemmBatchedIdentityThreadblockSwizzleELNS2_17GroupScheduleModeE0ELb0EEEEEvNT_6ParamsE"
    )
    assert sha256(rows[0].name) == "de3dd538459a77ab0b26bbdeabd9bc73eced3a609721901e0db4a4559f10f37f"
    assert sha256(killed.name) == "cffb343ba0de0a39198e92cc65cfbed15669b3289ea3f0a0b247a426b3f3c23e"
    for row in rows:
        assert "," not in row.name and row.name == row.name.strip()


# One PyTorch training step, repeated ten times (kernels 1-12, 13-24, ... 109-120), then kernel 121.
NN_STEP = [
    (
        "_ZN2at6native40_GLOBAL__N__4db7300b_8_Shape_cu_49f7391c26CatArrayBatchedCopy_contigINS1_10"
        "OpaqueTypeILj4EEEjLi1ELi128ELi1EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16"
        "TensorSizeStrideIS8_Lj4EEEiS8_",
        (1, 10, 1),
        (128, 1, 1),
        550,
    ),
    (
        "_ZN2at6native40_GLOBAL__N__4db7300b_8_Shape_cu_49f7391c26CatArrayBatchedCopy_contigINS1_10"
        "OpaqueTypeILj4EEEjLi1ELi128ELi1EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16"
        "TensorSizeStrideIS8_Lj4EEEiS8_",
        (1, 10, 1),
        (128, 1, 1),
        550,
    ),
    (
        "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_"
        "kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_EEvS4_RKT_EUliE_EEviT1_",
        (1, 1, 1),
        (128, 1, 1),
        70,
    ),
    (
        "_ZN8internal5gemvx6kernelIiiffffLb0ELb1ELb1ELb0ELi7ELb0E16cublasGemvParamsI30cublasGemvTensor"
        "StridedBatchedIKfES5_S3_IfEfEEENSt9enable_ifIXntT5_EvE4typeET11_",
        (1, 1, 1),
        (8, 16, 1),
        623,
    ),
    (
        "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_15mse_kernel_cudaERNS_18TensorIterator"
        "BaseEENKUlvE_clEvENKUlvE0_clEvEUlffE_NS_6detail5ArrayIPcLi3EEEEEviT0_T1_",
        (1, 1, 1),
        (128, 1, 1),
        162,
    ),
    (
        "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4EEEEEvT1_",
        (1, 1, 1),
        (8, 1, 1),
        141,
    ),
    (
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        (1, 1, 1),
        (128, 1, 1),
        80,
    ),
    (
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        (1, 1, 1),
        (128, 1, 1),
        80,
    ),
    (
        "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_24mse_backward_"
        "cuda_kernelERNS_14TensorIteratorERKN3c106ScalarEENKUlvE_clEvENKUlvE0_clEvEUlfffE_EEvRNS_18Tensor"
        "IteratorBaseERKT_EUliE_EEviT1_",
        (1, 1, 1),
        (128, 1, 1),
        82,
    ),
    (
        "_Z14gemvNSP_kernelIffffLi1ELi32ELi4ELi1024ELb0E16cublasGemvParamsI30cublasGemvTensorStrided"
        "BatchedIKfES3_S1_IfEfEEvT8_",
        (1, 1, 1),
        (8, 32, 1),
        736,
    ),
    (
        "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIff"
        "fEclERNS_14TensorIteratorEEUlffE_EEjfLi4EEEEEvT1_",
        (1, 1, 1),
        (8, 1, 1),
        140,
    ),
    (
        "_ZN2at6native55_GLOBAL__N__ea501026_22_ForeachBinaryOpList_cu_a911ec4325multi_tensor_apply_kernel"
        "INS1_18TensorListMetadataILi2EEENS1_24BinaryOpListAlphaFunctorIfLi2ELi2ELi0EEEJSt4plusIfEfEEEvT_T0_DpT1_",
        (2, 1, 1),
        (512, 1, 1),
        3488,
    ),
]
NN_LAST = (
    "_ZN8internal5gemvx6kernelIiiffffLb0ELb1ELb0ELb0ELi7ELb0E16cublasGemvParamsI30cublasGemvTensor"
    "StridedBatchedIKfES5_S3_IfEfEEENSt9enable_ifIXntT5_EvE4typeET11_"
)


def test_nn_onestep_121_launches_of_a_training_step_in_a_legacy_stats_csv():
    data = (REAL / f"{NN_ONESTEP}stats.csv").read_bytes()
    rows = parse(data)
    assert len(rows) == 121
    # Name lengths of one step, read off the file with awk -F', ' (length($2)).
    assert [len(name) for name, *_ in NN_STEP] == [214, 214, 187, 157, 166, 87, 105, 105, 222, 118, 146, 201]
    expected = [
        kernel(n, name, f"kernel-{n}.trace.xz", grid, block, (insts, insts))
        for n, (name, grid, block, insts) in enumerate(NN_STEP * 10, start=1)
    ]
    expected.append(kernel(121, NN_LAST, "kernel-121.trace.xz", (1, 1, 1), (32, 4, 1), (567, 567)))
    assert rows == expected


# --- Kernelslists: which kernels have an instruction trace -----------------------------------------


@pytest.mark.parametrize(
    ("name", "traced"),
    [
        (f"{VECTOR_ADD_SUB}kernelslist_ctx_0x2356c30", {1, 2}),
        # Three MemcpyHtoD lines, then kernel-1-ctx_0x56201b8d3c00.trace.
        (f"{CUTLASS_FP16}kernelslist_ctx_0x56201b8d3c00", {1}),
        # Post-processed (.traceg.xz): kernels 1-8 of the 10 launched; 9 and 10 were never traced.
        (f"{FLASHINFER_GEMM}kernelslist.g", set(range(1, 9))),
        # 114 of the 121 launches: 6, 11, 18, 23, 26, 30 and 121 have no trace.
        (f"{NN_ONESTEP}kernelslist.g", set(range(1, 122)) - {6, 11, 18, 23, 26, 30, 121}),
    ],
    ids=["vector-add-sub", "cutlass-fp16", "flashinfer-gemm", "nn-onestep"],
)
def test_kernelslist_names_the_traced_kernels(name, traced):
    data = (REAL / name).read_bytes()
    assert parse_kernelslist_lines(data.splitlines(keepends=True)) == traced
    assert parse_kernelslist_lines(data.replace(b"\n", b"\r\n").splitlines(keepends=True)) == traced


# --- What must be refused ---------------------------------------------------------------------------


def test_a_second_run_in_the_same_file_is_refused():
    """A context re-created at the same address appends a second sequence of ids starting at 1
    (no header: the process wrote it already); a reused traces/ folder appends a second process's
    header too. Either way two runs' kernels must not be merged into one trace."""
    data = (REAL / f"{NN_ONESTEP}stats.csv").read_bytes()
    header, rows = data.split(b"\n", 1)
    for second, line_numbers in ((rows, {123}), (data, {123, 124})):
        with pytest.raises(StatsError) as problem:
            parse(data + second)
        assert re.search(r"restart|second run", str(problem.value), re.IGNORECASE)
        # 122 lines of the first run; then (a header and) kernel 1 again.
        assert problem.value.line_number in line_numbers
        assert str(problem.value).startswith(f"line {problem.value.line_number}: ")


def test_the_2019_tracer_format_is_named_and_refused():
    """The doc's example of the 2019 tracer: `kernel name,total_insts,total_reported_insts`."""
    data = b"kernel name,total_insts,total_reported_insts\n1-_Z6vecAddPdS_S_i.trace,50066,50066\n"
    with pytest.raises(StatsError) as problem:
        parse(data)
    assert "2019" in str(problem.value)
    assert problem.value.line_number in (1, 2)
