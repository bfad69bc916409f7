"""Helpers the traces tests share (kernel rows, hostile and real kernel names, c++filt): not tests themselves."""

import shutil
import subprocess

import pytest

from tests.helpers import kernel_dict

FLASH = (
    "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0ELb0EN7cutlass"
    "6half_tE19Flash_kernel_traitsILi64ELi64ELi256ELi4ES3_EELb1ELb0ELb0ELb0ELb1ELb0ELb0ELb0EEEv"
    "NS_16Flash_fwd_paramsE"
)


def launch(kernel_id: int, name: str, insts: int | None, **fields) -> dict:
    return kernel_dict(
        kernel_id,
        ctx="0x1",
        name=name,
        trace_file=f"kernel-{kernel_id}.trace",
        grid=(1, 1, 1),
        block=(128, 1, 1),
        insts=insts,
        **fields,
    )


def substitution(index: int) -> str:
    """The Itanium ABI's reference to substitution `index`: S_, S0_, ... S9_, SA_, ... SZ_, S10_."""
    if index == 0:
        return "S_"
    number, digits = index - 1, ""
    while True:
        number, digit = divmod(number, 36)
        digits = BASE36[digit] + digits
        if not number:
            return f"S{digits}_"


def hostile(levels: int, function: str = "f") -> str:
    """f(A, B<A, A>, B<B<A, A>, B<A, A> >, ...): each parameter is B of the one before, twice.

    Substitutions: S_ is A, S0_ the template B, S1_ B<A, A>; each `S0_I<last><last>E` is B of
    the last parameter, twice, and the next substitution. About 11 bytes a level, and each
    level doubles the demangled text.
    """
    return f"_Z{len(function)}{function}1A1BIS_S_E" + "".join(
        f"S0_I{substitution(level + 1)}{substitution(level + 1)}E" for level in range(1, levels)
    )


def cxx_filt(names: list[str]) -> list[str]:
    if shutil.which("c++filt") is None:
        pytest.skip("needs binutils' c++filt, the outside truth")
    # Without --no-recursion-limit c++filt, like libstdc++, refuses a symbol past 1,024
    # characters: CUTLASS's kernels; a demangler can read them, so the page must.
    answer = subprocess.run(
        ["c++filt", "--no-recursion-limit"],
        input="".join(f"{name}\n" for name in names),
        capture_output=True,
        text=True,
    )
    return answer.stdout.splitlines()


BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
