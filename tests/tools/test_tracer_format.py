"""The one definition of the tracer's stats rows writes what tracer_tool.cu's fprintf calls write."""

from tools.tracer_format import (
    DEVICE_STATS_HEADER,
    STATS_HEADER,
    printed_d,
    stats_launch_half,
    stats_totals,
)


def test_the_header_names_twelve_columns_and_the_device_fork_two_more_in_front():
    assert STATS_HEADER.endswith("#threads, total_insts, total_reported_insts\n")
    assert len(STATS_HEADER.split(", ")) == 12
    assert DEVICE_STATS_HEADER.startswith("device_id, stream_id, kernel id, kernel mangled name, ")


def test_percent_d_of_an_unsigned_32_bit_value():
    assert [printed_d(v) for v in (0, 2**31 - 1, 2**31, 2**32 - 1, 2**32 + 5)] == [
        0,
        2**31 - 1,
        -(2**31),
        -1,
        5,
    ]


def test_a_launch_half_then_its_totals():
    half = stats_launch_half("kernel-1-ctx_0x1.trace.xz", "_Z6vecAddPdS_S_i", (98, 1, 1), (1024, 1, 1))
    assert half == "kernel-1-ctx_0x1.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, "
    assert half + stats_totals(50066, 50066) == (
        "kernel-1-ctx_0x1.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
    )


def test_unsigned_products_and_totals_print_negative_past_2_to_the_31():
    half = stats_launch_half("kernel-1.trace", "_Z1av", (65536, 65535, 1), (1024, 1, 1))
    assert half == "kernel-1.trace, _Z1av, 65536, 65535, 1, -65536, 1024, 1, 1, 1024, "
    assert stats_totals(3_000_000_000, 2**32 - 2) == "-1294967296,-2\n"


def test_the_forks_device_and_stream_in_front_and_latency_after_the_totals():
    half = stats_launch_half(
        "kernel-3-ctx_0x1.trace.xz", "_Z1bv", (2, 1, 1), (64, 1, 1), device_id=1, stream_id=7
    )
    assert half == "1, 7, kernel-3-ctx_0x1.trace.xz, _Z1bv, 2, 1, 1, 2, 64, 1, 1, 64, "
    assert stats_totals(5, 6, "0.001234") == "5,6,0.001234\n"
