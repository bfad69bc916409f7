"""`cascade simulate`'s whole loop against Cascade as deployed (gunicorn, moto's S3 server), with a
STAND-IN for Accel-Sim.

CI has no simulator: the test writes a fake accel-sim-framework tree (tests/client/accel_sim_stand_in.py)
whose stand-ins check what the real tools need and print the REAL simulator's recorded log for the
trace, from shared_fixture("real-simulatable"). It proves the loop (pull, post-process, run,
upload, read, print), not the simulator.

The expected values are read here, independently of Cascade: the simulated cycles by a regex
over that real log's `gpu_sim_cycle` lines, the measured side from the timing file this test
writes and uploads.
"""

import json
import lzma
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.client.accel_sim_stand_in import PREFIX, log_cycles, log_kernel_ids, stand_in_tree, upload_run
from tests.client.conftest import ROOT, deployed_cascade
from tests.gunicorn_process import gunicorn
from tests.helpers import shared_fixture

pytestmark = pytest.mark.slow

BUCKET = "cascade-client-simulate"
GEMM = "MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80"  # 8 kernels, .traceg.xz, legacy stats.csv
RAW = "qishao-chalmers+accel-sim-framework__vecadd-raw-sm75"  # raw .trace.xz, 4-field MemcpyHtoD lines
GEMM_LOG = "accel-sim.SM86_RTX3070.log"
RAW_LOG = "accel-sim.SM75_RTX2060.log"
RAW_CTX = "0x189ec30"
A100 = "NVIDIA A100-SXM4-80GB"


class Live:
    def __init__(self, url, token, root, env, tmp):
        self.url, self.token, self.root, self.env, self.tmp = url, token, root, env, tmp

    def simulate(self, trace_id, *args, log, timeout=300, **stand_in):
        env = {
            **{f"STAND_IN_{key.upper()}": str(value) for key, value in stand_in.items()},
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT / "client"),
            "CASCADE_URL": self.url,
            "CASCADE_TOKEN": self.token,
            "ACCEL_SIM_ROOT": str(self.root),
            "STAND_IN_LOG": log,
        }
        command = [sys.executable, "-m", "cascade_client", "simulate", trace_id, *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=self.tmp)

    def get(self, path):
        import httpx

        return httpx.get(
            self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        ).json()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    gemm = shared_fixture("real-simulatable", GEMM)
    raw = shared_fixture("real-simulatable", RAW)
    tmp = tmp_path_factory.mktemp("client-simulate")
    # The logs (about 14 kB compressed) go up in parts.
    with deployed_cascade(tmp, BUCKET, CASCADE_SIM_MULTIPART_BYTES="4096") as (env, bucket, manage):
        bucket.create_bucket(Bucket=BUCKET)
        measured = {
            # Traced on an A100 (real-simulatable/SOURCES.md; which A100 is not said: one's name).
            "gemm": upload_run(
                bucket, BUCKET, "gemm", gemm, "", log_kernel_ids(gemm / GEMM_LOG), arch="sm_80", gpu=A100
            ),
            "raw": upload_run(bucket, BUCKET, "raw", raw, RAW_CTX, log_kernel_ids(raw / RAW_LOG), arch=None),
        }
        # A run whose kernel list names a trace file the run lacks (the pull cannot have it).
        for path in (gemm / "traces").iterdir():
            if path.name != "kernel-8.traceg.xz":
                bucket.put_object(
                    Bucket=BUCKET, Key=f"{PREFIX}lacking/traces/{path.name}", Body=path.read_bytes()
                )
        bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}lacking/metadata.json", Body=b'{"status": "ok"}')
        manage("ingest_traces")
        token = manage("create_token", "simulate-tests", "--scope", "write").splitlines()[-1]
        root = stand_in_tree(tmp / "accel-sim-framework", {"gemm": gemm / GEMM_LOG, "raw": raw / RAW_LOG})
        with gunicorn(env, tmp, workers=2) as server:
            live = Live(server.url, token, root, env, tmp)
            live.measured = measured
            live.bucket = bucket
            live.logs = {"gemm": gemm / GEMM_LOG, "raw": raw / RAW_LOG}
            deadline = time.monotonic() + 60
            while {t["id"] for t in live.get("/api/traces?state=ready")} < {"gemm", "raw", "lacking"}:
                assert time.monotonic() < deadline, "the runs never became ready"
                manage("ingest_traces")
            yield live


def accuracy_rows(live, trace_id, name) -> dict[int, tuple]:
    simulation = live.get(f"/api/traces/{trace_id}/simulations/{name}")
    assert simulation["state"] == "ready", simulation
    return {k["kernel_id"]: (k["sim_cycles"], k["measured_ns"]) for k in simulation["kernels"]}, simulation


def expected_rows(live, trace_id) -> dict[int, tuple]:
    log = live.logs[trace_id]
    cycles = log_cycles(log)
    kernel_ids = log_kernel_ids(log)
    return {
        kernel_ids[uid - 1]: (c, live.measured[trace_id][kernel_ids[uid - 1]]) for uid, c in cycles.items()
    }


def test_the_loop_brings_back_rows_equal_to_the_real_log_and_the_uploaded_times(live):
    done = live.simulate("gemm", "--config", "SM86_RTX3070", "--name", "standin-gemm", log="gemm")
    assert done.returncode == 0, done.stdout + done.stderr
    # An A100 run suggests SM80_A100, which this 73f9fac-era tree lacks: its nearest is named.
    assert (
        f"cascade: note: the trace suggests config SM80_A100 (the config of its GPU), which {Path(live.root).resolve()} "
        "lacks; its nearest config is SM86_RTX3070"
    ) in done.stderr.splitlines()
    rows, simulation = accuracy_rows(live, "gemm", "standin-gemm")
    assert rows == expected_rows(live, "gemm")
    assert simulation["kernels_compared"] == 8 and simulation["config"] == "SM86_RTX3070"
    # Progress came from the simulator's own output: each kernel as it finished, of those listed.
    assert [line.split()[1] for line in done.stderr.splitlines() if " finished: " in line] == [
        f"{n}/8" for n in range(1, 9)
    ]
    # The summary a person reads, with the pairs and metrics Cascade computed.
    metrics = simulation["metrics"]
    assert "pairs: 8 compared of 8 simulated" in done.stdout
    assert f"MAPE {metrics['mape']:.2f} %" in done.stdout
    assert "worst kernels" in done.stdout
    # The log in the bucket is what the simulator printed, byte for byte, uploaded in parts into
    # the folder's staging area, moved into place by /complete: nothing staged is left behind.
    key = f"{PREFIX}gemm/simulations/standin-gemm/sim.log.xz"
    assert (
        lzma.decompress(live.bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        == live.logs["gemm"].read_bytes()
    )
    folder = live.bucket.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}gemm/simulations/standin-gemm/")
    names = {item["Key"].rsplit("/", 1)[1] for item in folder["Contents"]}
    assert "cascade-owner.json" in names and not any(
        "/.staging/" in item["Key"] for item in folder["Contents"]
    )
    # simulation.json as uploaded: the builds read from the log's own lines.
    marker = json.loads((live.tmp / "gemm/simulations/standin-gemm/simulation.json").read_text())
    text = live.logs["gemm"].read_text()
    assert marker["accel_sim_build"] == re.search(r"Accel-Sim \[build ([^\]]*)\]", text).group(1)
    assert marker["gpgpu_sim_build"] == re.search(
        r"GPGPU-Sim Simulator Version \S+\s+\[build ([^\]]*)\]", text
    ).group(1)
    assert marker["status"] == "ok" and marker["exit_status"] == 0 and marker["selection"] is None
    assert (
        marker["config"] == "SM86_RTX3070" and marker["host"] and marker["started_at"] <= marker["ended_at"]
    )


def test_raw_traces_are_post_processed_waited_for_and_their_memcpy_lines_cut(live):
    done = live.simulate("raw", "--config", "SM75_RTX2060", "--name", "standin-raw", log="raw")
    assert done.returncode == 0, done.stdout + done.stderr
    rows, _ = accuracy_rows(live, "raw", "standin-raw")
    assert rows == expected_rows(live, "raw")
    traces = live.tmp / "raw/traces"
    with lzma.open(traces / f"kernel-1-ctx_{RAW_CTX}.traceg.xz") as f:  # whole: the wait was long enough
        assert b"#BEGIN_TB" in f.read()
    listed = (traces / "kernelslist.g").read_text().splitlines()
    memcpy = [line for line in listed if line.startswith("Memcpy")]
    assert len(memcpy) == 3 and all(len(line.split(",")) == 3 for line in memcpy)
    assert not listed[-1].startswith("Memcpy")  # the simulator aborts on memcpy lines after the last kernel
    assert [line for line in listed if not line.startswith("Memcpy")] == [f"kernel-1-ctx_{RAW_CTX}.traceg.xz"]
    # The run has `kernelslist` and `kernelslist_ctx_..`, the same lines: the pull's list for the
    # post-processor names the launch once too, its memcpy lines the context list's, cut to 3 fields.
    context = [line for line in (traces / f"kernelslist_ctx_{RAW_CTX}").read_text().splitlines() if line]
    assert (traces / "kernelslist").read_text().splitlines() == context
    assert (traces / "kernelslist.cascade").read_text().splitlines() == [
        ",".join(line.split(",")[:3]) for line in context
    ]


def test_a_config_the_tree_lacks_is_refused_naming_those_it_has(live):
    done = live.simulate("gemm", "--config", "SM90_H100", log="gemm")
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "SM90_H100 is not in" in line and line.endswith("it has: SM75_RTX2060, SM86_RTX3070")


def test_a_sass_version_the_config_cannot_run_is_refused_unless_forced(live):
    done = live.simulate("gemm", "--config", "SM75_RTX2060", "--workdir", "wrong-sass", log="gemm")
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "config SM75_RTX2060 runs SASS 75, the trace is SASS 80 (its trace_gpu_arch is sm_80)" in line
    assert "SM86_RTX3070 (80/86)" in line
    assert not (live.tmp / "wrong-sass").exists()  # refused before the pull
    # The raw run's API says no arch: its trace headers say 75, read after the pull.
    done = live.simulate("raw", "--config", "SM86_RTX3070", "--workdir", "raw-wrong", log="raw")
    assert done.returncode == 1 and "the trace is SASS 75" in done.stderr.strip().splitlines()[-1]


def test_a_kernel_list_naming_files_the_pull_lacks_is_refused(live):
    done = live.simulate("lacking", "--config", "SM86_RTX3070", log="gemm")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert (
        "names 1 of 8 trace files the pull does not have (kernel-8.traceg.xz)" in last and "--force" in last
    )
    assert not (live.tmp / "lacking/simulations").exists()


def test_a_simulator_past_its_timeout_is_killed_and_what_it_finished_still_compared(live):
    log = live.logs["gemm"]
    text = log.read_text(errors="replace").splitlines(keepends=True)
    # Stall once the third kernel's stat block is whole (just before the fourth is loaded):
    # three finished, the fourth never does.
    printed = [i for i, line in enumerate(text) if line.startswith("Header info loaded")][3]
    done = live.simulate(
        "gemm",
        "--config",
        "SM86_RTX3070",
        "--name",
        "standin-killed",
        "--timeout",
        "5",
        "--workdir",
        "killed",
        log="gemm",
        stall_after_lines=printed,
    )
    marker = json.loads((live.tmp / "killed/simulations/standin-killed/simulation.json").read_text())
    assert marker["status"] == "ok" and marker["exit_status"] == 128 + 9  # SIGKILL, as a shell says it
    assert "stopped after --timeout 5 s" in done.stderr
    assert [line.split()[1] for line in done.stderr.splitlines() if " finished: " in line] == [
        "1/8",
        "2/8",
        "3/8",
    ]
    rows, simulation = accuracy_rows(live, "gemm", "standin-killed")
    expected = expected_rows(live, "gemm")
    assert {k: v for k, v in rows.items() if v[0] is not None} == {
        k: expected[k] for k in sorted(expected)[:3]
    }
    assert simulation["stopped"] == "killed"
    assert done.returncode == 0, done.stdout + done.stderr  # ready, three kernels compared


def test_a_post_processor_that_wrote_nothing_is_caught_though_it_exits_0(live):
    done = live.simulate(
        "raw", "--config", "SM75_RTX2060", "--workdir", "pp-fails", log="raw", postprocess_fails=1
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert f"post-processing wrote no whole kernel-1-ctx_{RAW_CTX}.traceg.xz" in last
    assert "Unable to open file" in last and "its exit status 0 tells nothing" in last
    assert not (live.tmp / "pp-fails/simulations").exists()


def test_a_second_simulation_in_the_same_folder_reuses_the_pull(live):
    first = live.simulate("gemm", "--config", "SM86_RTX3070", "--name", "standin-again-1", log="gemm")
    again = live.simulate("gemm", "--config", "SM86_RTX3070", "--name", "standin-again-2", log="gemm")
    assert first.returncode == 0 and again.returncode == 0, again.stdout + again.stderr
    assert "downloaded traces/" not in again.stderr  # every file already there and whole
    assert accuracy_rows(live, "gemm", "standin-again-2")[0] == expected_rows(live, "gemm")


def test_a_list_an_older_pull_wrote_twice_over_is_fixed_before_the_simulator_starts(tmp_path):
    """An older pull of a run with both `kernelslist` and `kernelslist_ctx_..` concatenated them:
    every line twice, memcpy lines after the last kernel (the real simulator aborted,
    accel-sim.cc:144). prepare() rewrites it as the simulator accepts it: the real list's lines."""
    import io

    from cascade_client import simulate

    real = shared_fixture("real-simulatable", "romnn+microgpusim__vectoradd-100-32-sm61", "traces")
    lines = [line for line in (real / "kernelslist.g").read_text().splitlines() if line]
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "kernel-1.traceg").write_bytes((real / "kernel-1.traceg").read_bytes())
    (traces / "kernelslist.g").write_text(
        "".join(f"{line},x.bin\n" if line.startswith("Memcpy") else line + "\n" for line in lines * 2)
    )
    out = io.StringIO()
    listing = simulate.prepare(
        tmp_path / "no-tree", traces, config="SM6_TITANX", jobs=1, force=False, out=out
    )
    assert listing.read_text().splitlines() == lines
    assert "dropped 4 line(s) of kernelslist.g repeated or after its last kernel" in out.getvalue()
    assert "cut MemcpyHtoD lines to 3 fields" in out.getvalue()


@pytest.mark.parametrize("name", [".", "..", "CON", "nul.txt", "com1", "a.", "a/b", "ok\n", "x" * 101])
def test_a_name_the_servers_rule_refuses_is_refused_before_any_request(name, tmp_path):
    from cascade_client import simulate
    from cascade_client.accel_sim import SimulateError

    class NoRequests:
        def __getattr__(self, attribute):
            raise AssertionError(f"a request was about to be made ({attribute})")

    (tmp_path / "simulation.json").write_text("{}")
    with pytest.raises(SimulateError, match="--name"):
        simulate.upload(NoRequests(), "demo", name, {"simulation.json": tmp_path / "simulation.json"})
