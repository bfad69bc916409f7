"""A traced kernel's instruction trace: the header the NVBit tracer writes, then every warp of
every block, raw as the tracer writes `.trace[.xz]` or grouped as Accel-Sim's post-processing
writes `.traceg[.xz]` (docs/formats.md#the-tracers-files). Small, but simulatable: the opcodes
are real ones of each SASS generation.
"""

import lzma
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tools.kernels import kernel_resources, warp_program_length
from tools.workload import Launch


@dataclass(frozen=True)
class Opcodes:
    """The SASS one generation's generated warps run: opcode names taken from real traces of it
    (the shared fixtures' real-simulatable/ runs), each one the simulator's opcode map for it knows."""

    mov: str
    s2r: str
    imad: str
    address: str  # the address arithmetic before a load or store
    compare: str
    load: str
    store: str
    alu: tuple[str, ...]
    width: int  # bytes per thread of `load` and `store`, as the tracer derives it from the name
    pc_step: int  # bytes per instruction
    control_words: bool = False  # Pascal: every fourth 8-byte slot is a control word, no instruction


# Turing: a vectorAdd traced on sm_75 (every opcode below appears in it).
TURING_OPCODES = Opcodes(
    "MOV", "S2R", "IMAD", "IMAD.WIDE", "ISETP.GE.AND", "LDG.E.SYS", "STG.E.SYS", ("FADD",), 4, 16
)
# Ampere: PyTorch kernels traced on an A100 (sm_80).
AMPERE_OPCODES = Opcodes(
    "IMAD.MOV.U32",
    "S2R",
    "IMAD",
    "IMAD.WIDE",
    "ISETP.GE.AND",
    "LDG.E.64",
    "STG.E.64",
    ("FFMA", "FMUL", "FADD", "IADD3", "LOP3.LUT"),
    8,
    16,
)
# Pascal: a vecAdd traced on sm_61.
PASCAL_OPCODES = Opcodes(
    "MOV", "S2R", "XMAD", "IADD", "ISETP.GE.AND", "LDG.E.CG", "STG.E", ("FADD", "SHL", "SHR"), 4, 8, True
)


def opcodes_for(sass: int) -> Opcodes:
    """Volta's SASS is Turing's; Ada and Hopper (no real trace here, and no opcode map in
    Accel-Sim, whose simulator stops at `unsupported binary version: 90`) keep Ampere's names."""
    if sass >= 80:
        return AMPERE_OPCODES
    return TURING_OPCODES if sass >= 70 else PASCAL_OPCODES


TRACE_FORMAT_LINE = (
    "#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] "
    "mem_width [adrrescompress?] [mem_addresses] immediate"
)


def tracer_version(launch: Launch) -> int:
    """5 for per-context runs (`-ctx_` file names); 4 for legacy ones, whose tracer prints no immediate."""
    return 4 if launch.ctx is None else 5


def trace_header(launch: Launch, sass: int) -> str:
    """The header the tracer (accel-sim-framework tracer_tool.cu) writes, and its format line."""
    version = tracer_version(launch)
    format_line = TRACE_FORMAT_LINE if version >= 5 else TRACE_FORMAT_LINE.removesuffix(" immediate")
    gx, gy, gz = launch.grid
    bx, by, bz = launch.block
    regs, static, dynamic = kernel_resources(launch.name, sass)
    place = random.Random(f"{launch.ctx}:bases")  # one context, one stream and shared-memory window
    shmem_base = place.randrange(0x7F00, 0x7FFF) << 32
    stream = 0 if launch.ctx is None else int(launch.ctx, 16) % 2**32 // 16 * 16
    return (
        f"-kernel name = {launch.name}\n-kernel id = {launch.kernel_id}\n"
        f"-grid dim = ({gx},{gy},{gz})\n-block dim = ({bx},{by},{bz})\n"
        f"-shmem = {static + dynamic}\n-nregs = {regs}\n"
        f"-binary version = {sass}\n-cuda stream id = {stream}\n"
        f"-shmem base_addr = 0x{shmem_base:016x}\n-local mem base_addr = 0x{shmem_base - 0x2000000:016x}\n"
        f"-nvbit version = 1.7.4\n-accelsim tracer version = {version}\n-enable lineinfo = 0\n\n"
        f"{format_line}\n\n"
    )


def warp_program(launch: Launch, sass: int, rng: random.Random) -> list[tuple[str, str, int]]:
    """One warp's instructions as (opcode, operands before the memory part, memory operand index):
    the same program for every warp (SIMT), `warp_program_length` long. Index -1: no memory."""
    ops = opcodes_for(sass)
    body = (warp_program_length(launch.name) - 6) // 4
    program = [
        (ops.mov, "1 R1", "0", -1),
        (ops.s2r, "1 R0", "0", -1),
        (ops.s2r, "1 R3", "0", -1),
        (ops.imad, "1 R0", "2 R3 R0", -1),
        (ops.compare, "0", "1 R0", -1),
    ]
    for n in range(body):
        program += [
            (ops.address, "1 R2", "2 R0 R5", -1),
            (ops.load, "1 R4", "1 R2", 2 * n),
            (ops.alu[rng.randrange(len(ops.alu))], "1 R6", "2 R4 R6", -1),
            (ops.store, "0", "2 R2 R6", 2 * n + 1),
        ]
    program.append(("EXIT", "0", "0", -1))
    return program


def warp_lines(
    launch: Launch, sass: int, rng: random.Random
) -> Iterator[tuple[tuple[int, int, int], int, list[str]]]:
    """Every warp of every block, in block order (x fastest, as the simulator numbers them), with
    its instruction lines as the post-processor keeps them: everything after the warp id, i.e.
    `PC mask dest_num [reg_dests] opcode src_num [reg_srcs] mem_width [format base stride] immediate `,
    each field followed by a space, as the tracer prints them."""
    ops = opcodes_for(sass)
    gx, gy, gz = launch.grid
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    warps = math.ceil(threads / 32)
    program = warp_program(launch, sass, rng)
    immediate = "0 " if tracer_version(launch) >= 5 else ""  # v5 prints the immediate, v4 nothing
    arrays = [rng.randrange(0x7F00_0000_0000, 0x7F80_0000_0000) & ~0xFFFFF for _ in range(8)]
    pcs, pc = [], 0
    for _ in program:
        if ops.control_words and pc % 0x20 == 0:
            pc += ops.pc_step
        pcs.append(pc)
        pc += ops.pc_step
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                block_index = (z * gy + y) * gx + x
                for warp in range(warps):
                    active = min(32, threads - 32 * warp)
                    mask = f"{(1 << active) - 1:08x}"
                    first = (block_index * threads + 32 * warp) * ops.width
                    lines = []
                    for (opcode, dest, sources, memory), at in zip(program, pcs, strict=True):
                        if memory < 0:
                            tail = "0 " + immediate
                        else:
                            base = arrays[memory % len(arrays)] + first + (memory // len(arrays)) * 0x100000
                            tail = f"{ops.width} 1 0x{base:x} {ops.width} " + immediate
                        lines.append(f"{at:04x} {mask} {dest} {opcode} {sources} {tail}")
                    yield (x, y, z), warp, lines


def raw_trace(launch: Launch, sass: int, rng: random.Random) -> str:
    """The instruction trace as the tracer writes it: the header, then one line per warp
    instruction prefixed by `block_x block_y block_z warp`, as warps retire them: warps of a few
    resident blocks interleaved, instruction by instruction."""
    warps = list(warp_lines(launch, sass, rng))
    order = random.Random(rng.random())
    out = [trace_header(launch, sass)]
    resident = 4  # blocks at a time
    per_block = math.ceil(launch.block[0] * launch.block[1] * launch.block[2] / 32)
    for start in range(0, len(warps), resident * per_block):
        wave = warps[start : start + resident * per_block]
        order.shuffle(wave)
        for step in range(max(len(lines) for _, _, lines in wave)):
            for (x, y, z), warp, lines in wave:
                if step < len(lines):
                    out.append(f"{x} {y} {z} {warp} {lines[step]}\n")
    return "".join(out)


def grouped_trace(launch: Launch, sass: int, rng: random.Random) -> str:
    """What Accel-Sim's post-processing writes from the raw trace (post-traces-processing.cpp): the
    header lines and blank lines as they were, one more blank line (its last, empty read), then per
    block `#BEGIN_TB`, `thread block = x,y,z`, and per warp `warp = w`, `insts = n` and its lines."""
    out = [trace_header(launch, sass), "\n"]
    current = None
    for block, warp, lines in warp_lines(launch, sass, rng):
        if block != current:
            if current is not None:
                out.append("\n#END_TB\n")
            out.append(f"\n#BEGIN_TB\n\nthread block = {block[0]},{block[1]},{block[2]}\n")
            current = block
        out.append(f"\nwarp = {warp}\ninsts = {len(lines)}\n")
        out.extend(f"{line}\n" for line in lines)
    if current is not None:
        out.append("\n#END_TB\n")
    return "".join(out)


def instruction_trace(launch: Launch, sass: int, rng: random.Random, *, grouped: bool = False) -> bytes:
    """A traced kernel's instruction trace, whole: every warp of every block of its grid, raw as
    the tracer writes `.trace[.xz]` or grouped as post-processing writes `.traceg[.xz]` (xz for
    per-context runs, whose tracer compresses). The same `rng` state gives the same warps either way."""
    text = (grouped_trace if grouped else raw_trace)(launch, sass, rng)
    data = text.encode()
    return lzma.compress(data, format=lzma.FORMAT_XZ, preset=6) if launch.ctx is not None else data
