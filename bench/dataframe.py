"""A trace's launches into a pandas DataFrame: through `kernels.csv` against through the JSON
detail (issue 21: at most a third of the time).

Both ways are timed end to end, as a researcher's script runs them against a live server:
request, transfer (plain, over loopback) and parse into a DataFrame of one row per launch.

- CSV: `pandas.read_csv` reading the HTTP response as it arrives (a file object: no copy of
  the body is held first), the default C parser;
- JSON: the body read whole, `json.loads` (what `httpx.Response.json()` and requests' do),
  then `pandas.DataFrame(detail["kernels"])`. Its grid and block stay lists in one column
  each; unfolded they would cost the JSON way more: the reference is the cheapest JSON way.

`orjson.loads` in place of `json.loads` is timed too, beside, for a reader who has it.
"""

import http.client
import json
import time
from dataclasses import dataclass

import orjson

TIMEOUT = 1800


@dataclass
class Loaded:
    seconds: float
    rows: int
    columns: int
    nbytes: int


def _get(port: int, path: str, headers: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    conn.request("GET", path, headers={**headers, "Accept-Encoding": "identity"})
    response = conn.getresponse()
    if response.status != 200:
        conn.close()
        raise RuntimeError(f"GET {path} answered {response.status}")
    return conn, response


def csv_frame(port: int, trace_id: str, headers: dict) -> Loaded:
    import pandas

    started = time.perf_counter()
    conn, response = _get(port, f"/api/traces/{trace_id}/kernels.csv", headers)
    try:
        frame = pandas.read_csv(response, engine="c")  # the body as it arrives
    finally:
        conn.close()
    return Loaded(time.perf_counter() - started, len(frame), len(frame.columns), 0)


def json_frame(port: int, trace_id: str, headers: dict, *, loads=json.loads) -> Loaded:
    import pandas

    started = time.perf_counter()
    conn, response = _get(port, f"/api/traces/{trace_id}", headers)
    try:
        body = response.read()
    finally:
        conn.close()
    frame = pandas.DataFrame(loads(body)["kernels"])
    return Loaded(time.perf_counter() - started, len(frame), len(frame.columns), len(body))


def measure(port: int, trace_id: str, headers: dict, *, repeat: int = 2) -> dict:
    """The best of `repeat` of each way (the first CSV and JSON warm the server's worker too)."""
    from bench.common import http_get

    csv_bytes = http_get(
        port, f"/api/traces/{trace_id}/kernels.csv", {**headers, "Accept-Encoding": "identity"}
    ).nbytes
    csv_runs = [csv_frame(port, trace_id, headers) for _ in range(repeat)]
    json_runs = [json_frame(port, trace_id, headers) for _ in range(repeat)]
    orjson_runs = [json_frame(port, trace_id, headers, loads=orjson.loads) for _ in range(repeat)]
    best_csv = min(csv_runs, key=lambda run: run.seconds)
    best_json = min(json_runs, key=lambda run: run.seconds)
    best_orjson = min(orjson_runs, key=lambda run: run.seconds)
    return {
        "csv_seconds": best_csv.seconds,
        "csv_bytes": csv_bytes,
        "csv_rows": best_csv.rows,
        "csv_columns": best_csv.columns,
        "json_seconds": best_json.seconds,
        "json_bytes": best_json.nbytes,
        "json_rows": best_json.rows,
        "orjson_seconds": best_orjson.seconds,
        "ratio": best_csv.seconds / best_json.seconds,
    }
