"""A community's registry in PostgreSQL, fast: 100,000 traces and 50M launches.

    python -m bench.community.data DATABASE_URL [--scale tiny|small|full]

(and `copy_trace`: a trace copied whole, for the delete figure's two traces alike.)

`seed()` fills an empty, migrated database the way ingestion would have left it, with
set-based SQL run by the server (`INSERT ... SELECT generate_series`; no row goes through
Python): registered traces (three in four ready, the rest uploading, `INSERT_SQL`, which the
list bench uses alone), and for each ready trace its launches, contexts and steps as
`traces/kernel_store.py`'s writer stores them: names shared through KernelName, (ctx,
device) numbered through KernelContext in (ctx, device) order, trace files left NULL where
the context's scheme gives them, `kernel_count` and `kernels_without_totals` the true counts.

Launch counts are skewed as a community's are: a log-normal spread (most traces a few dozen
launches, a few past 100,000), scaled so that the launches add up to exactly `launches`, and
one trace of exactly `big_trace_launches` (4 contexts, steps, measured times). Every
launch has a measured time (`has_real_timing`); one trace in eight has steps; one in
sixteen has launches without totals (graph-captured: every seventh); one in five traced
every tenth launch only, the others every launch (the tracer's default).

The kernel table is loaded as PostgreSQL's documentation advises for a bulk load (Populating
a Database): its indexes (the primary key is its only one) dropped while it is empty, the rows
inserted in primary-key order in batches of about `BATCH_LAUNCHES`, the indexes built again
with a large `maintenance_work_mem`, then `VACUUM ANALYZE` (the planner's statistics, and
what an estimated count reads; this server may run without autovacuum). Progress on stderr.
"""

import argparse
import sys
import time

from bench import common, harness
from bench.common import log

SCALES = {
    # traces, launches in all, the big trace's launches
    "tiny": (2_000, 200_000, 50_000),
    "small": (10_000, 5_000_000, 1_000_000),
    "full": (100_000, 50_000_000, 1_000_000),
}
# Launches a statement of the load inserts (a few seconds each: progress, and a failure
# loses one batch's work).
BATCH_LAUNCHES = 2_500_000
# Distinct kernel names in the registry, shared by every trace (a lab's models launch a few
# hundred kernels between them).
NAMES = 400
# The spread of launch counts: log-normal with this sigma (the median is about mean / 23).
SIGMA = 2.5
BIG_CONTEXTS = 4
# Consecutive kernel ids of a step, at least; a trace has at most MAX_STEPS steps.
STEP_KERNELS = 40
MAX_STEPS = 2_000

# Registered traces, `n` from 1 to %s (the list bench inserts these alone): three in four
# ready, every fourth uploading, created 37 s apart. `kernel_count` here is a placeholder;
# seed() sets the true counts of the launches it stores.
# Every column of a trace row, as the INSERTs here and in watch.py's idle pass fill them.
TRACE_COLUMNS = """
    id, key, state, error, created_at, updated_at, model, layers, source_gpu, trace_gpu_arch,
    suggested_sim_config, kernel_count, bytes, has_real_timing, has_step_timeline, sample,
    parser_version, timing_error, kernels_without_totals, metadata_json, files, files_changed_at,
    parsed_fingerprint, waiting_for, recheck_after, recheck_seconds, parse_attempts
"""
INSERT_SQL = f"""
INSERT INTO traces_trace ({TRACE_COLUMNS})
SELECT
    'community-' || lpad(n::text, 7, '0') || '__' || (ARRAY['opt-125m', 'llama-8b', 'qwen-7b'])[n %% 3 + 1],
    nextval('traces_trace_key_seq'),
    CASE WHEN n %% 4 = 0 THEN 'uploading' ELSE 'ready' END,
    NULL,
    timestamptz '2026-01-01' + n * interval '37 seconds',
    timestamptz '2026-01-01' + n * interval '37 seconds' + interval '90 seconds',
    CASE WHEN n %% 4 = 0 THEN NULL ELSE (ARRAY['facebook/opt-125m', 'meta-llama/Llama-3.1-8B', 'Qwen/Qwen2-7B'])[n %% 3 + 1] END,
    CASE WHEN n %% 4 = 0 THEN '[]'::jsonb ELSE '["prefill", "decode"]'::jsonb END,
    CASE WHEN n %% 4 = 0 THEN NULL ELSE 'NVIDIA H100 80GB HBM3' END,
    CASE WHEN n %% 4 = 0 THEN NULL ELSE 'sm_90' END,
    CASE WHEN n %% 4 = 0 THEN NULL ELSE 'SM90_H100' END,
    CASE WHEN n %% 4 = 0 THEN 0 ELSE (n * 7919) %% 500000 END,
    (n * 104729) %% 100000000,
    n %% 4 <> 0, n %% 8 = 1, n %% 100 = 0,
    CASE WHEN n %% 4 = 0 THEN NULL ELSE 5 END, NULL, 0, NULL, '[]'::jsonb, NULL, '', '[]'::jsonb, NULL, 0, 0
FROM generate_series(1::bigint, %s) AS n
"""

# A ready trace's plan: its launch count (see the module's docstring), contexts and steps.
# `n` is the trace's number in INSERT_SQL. Parameters: the big trace's n and launches, the
# launches of the others, SIGMA.
PLAN_SQL = """
CREATE TEMP TABLE seed_plan AS
WITH ready AS (
    SELECT key, id, split_part(split_part(id, '-', 2), '__', 1)::bigint AS n
    FROM traces_trace WHERE state = 'ready'
), weighted AS (
    -- Box-Muller over two hashed uniforms in (0, 1): a normal z, weight exp(sigma z).
    SELECT key, id, n, exp(%(sigma)s * sqrt(-2 * ln((hashint8(n)::float8 + 2147483649) / 4294967297))
                       * cos(2 * pi() * (hashint8(n + 1000000000)::float8 + 2147483649) / 4294967297)) AS w
    FROM ready WHERE n <> %(big_n)s
), counted AS (
    SELECT key, id, n, w,
           LEAST(%(cap)s, 1 + floor(w / sum(w) OVER () * (%(others)s - count(*) OVER ())))::bigint AS launches
    FROM weighted
), grown AS (
    -- What the cap and rounding left over, spread over the traces under the cap by weight
    -- (evenly, it would lift every tiny trace).
    SELECT key, id, n, w, launches < %(cap)s AS open,
           launches + CASE WHEN launches < %(cap)s
                      THEN floor((%(others)s - sum(launches) OVER ()) * w
                                 / sum(w) FILTER (WHERE launches < %(cap)s) OVER ()) ELSE 0 END AS launches
    FROM counted
), exact AS (
    -- The last launches rounding lost: one more for each of the heaviest open traces.
    SELECT key, id, n, launches
           + CASE WHEN open AND row_number() OVER (ORDER BY open DESC, w DESC, n)
                                <= %(others)s - sum(launches) OVER () THEN 1 ELSE 0 END AS launches
    FROM grown
), planned AS (
    SELECT key, id, n, launches::bigint, CASE WHEN n %% 50 = 0 THEN 8 WHEN n %% 10 = 0 THEN 4 ELSE 1 END AS contexts
    FROM exact
    UNION ALL
    SELECT key, id, n, %(big)s, %(big_contexts)s FROM ready WHERE n = %(big_n)s
)
SELECT key, id, n, launches, per_ctx,
       ceil(launches::numeric / per_ctx)::int AS contexts,
       n %% 8 = 1 AS has_steps,
       GREATEST(%(step_kernels)s, ceil(per_ctx::numeric / %(max_steps)s))::bigint AS step_kernels,
       CASE WHEN n %% 16 = 3 THEN launches / 7 ELSE 0 END AS without_totals,
       n %% 5 <> 2 AS every_launch_traced,
       12 + key %% 37 AS period
FROM (SELECT *, ceil(launches::numeric / contexts)::bigint AS per_ctx FROM planned) p
"""

# The launches of the planned traces with keys in [%(first)s, %(last)s], in primary-key
# order. A launch's name cycles through `period` names of the shared pool (a decode step's
# kernels, over and over); its shape follows its name, its instructions its shape.
KERNELS_SQL = """
INSERT INTO traces_kernel (
    trace_key, context, kernel_id, name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z,
    blocks, threads, total_insts, total_reported_insts, traced, step, duration_ns, stream, trace_file
)
SELECT key, context, kernel_id, names[1 + slot], grid_x, grid_y, 1, block_x, 1, 1,
       grid_x * grid_y, grid_x * grid_y * block_x,
       CASE WHEN no_totals THEN NULL ELSE insts END, CASE WHEN no_totals THEN NULL ELSE insts END,
       traced, step, 2000 + insts / 40 + i %% 311, NULL, NULL
FROM (
    SELECT *, grid_x * grid_y * block_x * (20 + slot %% 50) + i %% 977 AS insts
    FROM (
        SELECT *, 1 + slot * 37 %% 1024 AS grid_x, 1 + slot %% 4 AS grid_y, 32 * (1 + slot %% 8) AS block_x
        FROM (
            SELECT p.key, (i / p.per_ctx)::smallint AS context, i %% p.per_ctx + 1 AS kernel_id, i,
                   ((p.key * 13 + i %% p.per_ctx %% p.period) %% %(names_count)s)::int AS slot,
                   p.without_totals > 0 AND i %% 7 = 6 AS no_totals,
                   p.every_launch_traced OR i %% p.per_ctx %% 10 = 0 AS traced,
                   CASE WHEN p.has_steps THEN (i %% p.per_ctx / p.step_kernels)::smallint END AS step
            FROM (SELECT * FROM seed_plan WHERE key BETWEEN %(first)s AND %(last)s ORDER BY key) p
            CROSS JOIN LATERAL generate_series(0::bigint, p.launches - 1) AS i
        ) launch
    ) shaped
) measured, (SELECT %(names)s::int[] AS names) pool
"""

KERNEL_FAMILIES = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{n}x128_32x3_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{n}x128_32x3_tn_align8::Params)",
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, {n}, 64, 4, false, false, cutlass::bfloat16_t>,"
    " false, true, false, false, true, true, false>(Flash_fwd_params)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, "
    "at::detail::Array<char*, {n}>>(int, at::native::BinaryFunctor, at::detail::Array<char*, 3>)",
    "void vllm::rms_norm_kernel<c10::BFloat16, {n}>(c10::BFloat16*, c10::BFloat16 const*, "
    "c10::BFloat16 const*, float, int, int)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{n}x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "_ZN4vllm25paged_attention_v2_kernelIttLi{n}ELi16ELi128ELNS_18Fp8KVCacheDataTypeE0ELb0ELi512EEEvPT_PfS4_PKS3_PKT0_SA_ifPKiSC_iPKfiiiSE_SE_iiiii",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
    "unsigned int, long, {n}>>(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>)",
    "triton_poi_fused_add_mul_silu_{n}",
)


def kernel_names(count: int = NAMES) -> list[str]:
    """`count` distinct kernel names, as mangled or demangled as the tracer records them."""
    return [
        KERNEL_FAMILIES[i % len(KERNEL_FAMILIES)].format(n=16 * (1 + i // len(KERNEL_FAMILIES)))
        for i in range(count)
    ]


def seed(
    database_url: str,
    *,
    traces: int,
    launches: int,
    big_trace_launches: int = 1_000_000,
) -> dict:
    """Fill the empty, migrated database at `database_url` with `traces` registered traces and
    `launches` launches in all, one trace of exactly `big_trace_launches`; then VACUUM ANALYZE.

    Returns the interesting traces' ids (`big`: the big trace; `tiny`: a ready trace of the
    fewest launches, at least 2; `multi_context`: the largest other trace of several contexts), the counts (traces, ready,
    uploading, launches, names, contexts, steps), and the seconds each stage took.
    """
    import psycopg

    ready_traces = traces - traces // 4
    if ready_traces < 2:
        raise ValueError("seed needs at least 3 traces: the big one and others")
    others = launches - big_trace_launches
    if others < ready_traces - 1:
        raise ValueError(
            f"{launches:,} launches leave fewer than one for each of the other {ready_traces - 1:,} ready traces"
        )
    # The big trace: ready, with steps (n % 8 == 1), half way through the list.
    big_n = max(1, (traces // 2) // 8 * 8 + 1)
    if big_n > traces:
        big_n = 1
    seconds: dict[str, float] = {}
    started = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal started
        now = time.perf_counter()
        seconds[name] = now - started
        log(f"  {name}: {seconds[name]:.1f} s")
        started = now

    with psycopg.connect(database_url, autocommit=True) as conn:
        if conn.execute("SELECT EXISTS (SELECT 1 FROM traces_kernel)").fetchone()[0]:
            raise ValueError("seed fills an empty database: traces_kernel holds launches")
        # A bulk load: commits need not wait for the WAL's flush (a crash loses the last
        # batches of a scratch database, never its consistency).
        conn.execute("SET synchronous_commit = off")
        log(f"seeding {traces:,} traces, {launches:,} launches (one of {big_trace_launches:,})")
        name_ids = _insert_names(conn)
        conn.execute(INSERT_SQL, (traces,))
        stage("traces")
        _plan(conn, launches, big_n=big_n, big=big_trace_launches, others=others)
        _describe_traces(conn)
        _contexts_and_steps(conn)
        stage("plan, trace rows, contexts, steps")
        _load_kernels(conn, name_ids, launches, stage)
        for table in ("trace", "kernelcontext", "step", "kernelname", "kernel"):
            conn.execute(f"VACUUM ANALYZE traces_{table}")
        stage("VACUUM ANALYZE")
        found = _found(conn, big_n)
        conn.execute("DROP TABLE seed_plan")
    return found | {
        "launches": launches,
        "big_trace_launches": big_trace_launches,
        "names": len(name_ids),
        "seconds": seconds,
    }


def _insert_names(conn) -> list[int]:
    """The registry's kernel names stored (KernelName); their ids in kernel_names()'s order."""
    names = kernel_names()
    conn.execute(
        "INSERT INTO traces_kernelname (digest, name) "
        "SELECT sha256(convert_to(name, 'UTF8')), name FROM unnest(%s::text[]) AS name "
        "ON CONFLICT (digest) DO NOTHING",
        (names,),
    )
    return [
        row[0]
        for row in conn.execute(
            "SELECT k.id FROM unnest(%s::text[]) WITH ORDINALITY AS given(name, position) "
            "JOIN traces_kernelname k ON k.digest = sha256(convert_to(given.name, 'UTF8')) "
            "ORDER BY given.position",
            (names,),
        )
    ]


def _plan(conn, launches: int, *, big_n: int, big: int, others: int) -> None:
    """seed_plan: each trace's launches, contexts and steps (PLAN_SQL), checked to add up."""
    parameters = {
        "sigma": SIGMA,
        "big_n": big_n,
        "big": big,
        "big_contexts": BIG_CONTEXTS,
        "others": others,
        "cap": max(1, big - 1),
        "step_kernels": STEP_KERNELS,
        "max_steps": MAX_STEPS,
    }
    with conn.transaction():
        conn.execute(PLAN_SQL, parameters)
        conn.execute("CREATE UNIQUE INDEX ON seed_plan (key)")
        conn.execute("ANALYZE seed_plan")
    planned = conn.execute("SELECT COALESCE(SUM(launches), 0)::bigint FROM seed_plan").fetchone()[0]
    if planned != launches:
        raise RuntimeError(f"planned {planned:,} launches, not {launches:,}")


FOUND = {
    "big": "(SELECT id FROM seed_plan WHERE n = %(big_n)s)",
    "tiny": "(SELECT id FROM seed_plan WHERE launches >= 2 AND contexts = 1 ORDER BY launches, n LIMIT 1)",
    "multi_context": "(SELECT id FROM seed_plan WHERE contexts > 1 AND n <> %(big_n)s ORDER BY launches DESC, n LIMIT 1)",
    "traces": "(SELECT count(*) FROM traces_trace)",
    "ready": "(SELECT count(*) FROM traces_trace WHERE state = 'ready')",
    "uploading": "(SELECT count(*) FROM traces_trace WHERE state = 'uploading')",
    "traces_past_100k_launches": "(SELECT count(*) FROM seed_plan WHERE launches >= 100000)",
    "contexts": "(SELECT count(*) FROM traces_kernelcontext)",
    "steps": "(SELECT count(*) FROM traces_step)",
    "median_launches": "(SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY launches) FROM seed_plan)",
    "kernel_table_bytes": "pg_total_relation_size('traces_kernel')",
}


def _found(conn, big_n: int) -> dict:
    """The interesting traces' ids and the counts, read back from what was stored."""
    row = conn.execute(f"SELECT {', '.join(FOUND.values())}", {"big_n": big_n}).fetchone()
    return dict(zip(FOUND, row, strict=True))


def _describe_traces(conn) -> None:
    """The ready traces' true counts, and the metadata.json and file listing ingestion keeps."""
    conn.execute(
        """
        UPDATE traces_trace t SET
            kernel_count = p.launches,
            kernels_without_totals = p.without_totals,
            metadata_json = json_build_object(
                'model', t.model, 'source_gpu', t.source_gpu, 'trace_gpu_arch', t.trace_gpu_arch,
                'suggested_sim_config', t.suggested_sim_config, 'layers', t.layers
            )::text,
            files = (
                SELECT jsonb_agg(jsonb_build_object('key', t.id || '/' || file, 'bytes', 100 + p.launches * 120,
                                                    'etag', md5(t.id || file)))
                FROM unnest(ARRAY['metadata.json', 'kernelslist.g', 'timing.csv']
                            || (SELECT array_agg('stats_ctx_' || c) FROM generate_series(0, p.contexts - 1) c)
                            || CASE WHEN p.has_steps THEN ARRAY['timeline.json'] ELSE ARRAY[]::text[] END) AS file
            ),
            has_step_timeline = p.has_steps
        FROM seed_plan p WHERE t.key = p.key
        """
    )


def _contexts_and_steps(conn) -> None:
    """Each ready trace's contexts, numbered in (ctx, device) order, and its steps (ctx NULL:
    every context's launches of those kernel ids)."""
    conn.execute(
        """
        INSERT INTO traces_kernelcontext (trace_key, index, ctx, device, trace_file_suffix)
        SELECT p.key, c, '0x' || to_hex(1048576 + c), -1, '-ctx_0x' || to_hex(1048576 + c) || '.trace.xz'
        FROM seed_plan p CROSS JOIN LATERAL generate_series(0, p.contexts - 1) AS c
        """
    )
    conn.execute(
        """
        INSERT INTO traces_step (trace_id, index, name, phase, ctx, first_kernel_id, last_kernel_id, start_ns, end_ns)
        SELECT p.id, s, CASE WHEN s = 0 THEN 'prefill' ELSE 'decode_' || s END,
               CASE WHEN s = 0 THEN 'prefill' ELSE 'decode' END, NULL,
               s * p.step_kernels + 1, LEAST((s + 1) * p.step_kernels, p.per_ctx),
               s * p.step_kernels * 50000, LEAST((s + 1) * p.step_kernels, p.per_ctx) * 50000
        FROM seed_plan p CROSS JOIN LATERAL generate_series(0, ceil(p.per_ctx::numeric / p.step_kernels)::int - 1) AS s
        WHERE p.has_steps
        """
    )


def _load_kernels(conn, name_ids: list[int], launches: int, stage) -> None:
    """The launches, in batches of about BATCH_LAUNCHES, the table's indexes dropped around
    the load and built again after it."""
    indexes = conn.execute(
        """
        SELECT i.relname, pg_get_indexdef(i.oid), c.conname, c.contype
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid
        WHERE x.indrelid = 'traces_kernel'::regclass
        """
    ).fetchall()
    for name, _definition, constraint, _kind in indexes:
        if constraint:
            conn.execute(f'ALTER TABLE traces_kernel DROP CONSTRAINT "{constraint}"')
        else:
            conn.execute(f'DROP INDEX "{name}"')
    batches = conn.execute(
        """
        SELECT min(key), max(key), sum(launches)::bigint FROM (
            SELECT key, launches, floor((sum(launches) OVER (ORDER BY key) - launches) / %s) AS batch FROM seed_plan
        ) b GROUP BY batch ORDER BY batch
        """,
        (BATCH_LAUNCHES,),
    ).fetchall()
    loaded, began = 0, time.perf_counter()
    for first, last, count in batches:
        conn.execute(
            KERNELS_SQL,
            {"first": first, "last": last, "names": name_ids, "names_count": len(name_ids)},
        )
        loaded += count
        elapsed = time.perf_counter() - began
        log(f"  {loaded:,} of {launches:,} launches ({loaded / elapsed:,.0f} a second)")
    stage("launches")
    conn.execute("SET maintenance_work_mem = '1GB'")
    for name, definition, constraint, kind in indexes:
        conn.execute(definition)
        if constraint:
            what = "PRIMARY KEY" if kind == "p" else "UNIQUE"
            conn.execute(
                f'ALTER TABLE traces_kernel ADD CONSTRAINT "{constraint}" {what} USING INDEX "{name}"'
            )
    conn.execute("RESET maintenance_work_mem")
    stage("primary key built")


def copy_trace(db: str, source: str, new_id: str) -> None:
    """A copy of trace `source` named `new_id`: its row and every row keyed by its trace_key."""
    import psycopg

    trace_columns = [c for c in harness.loaded_columns(db, "traces_trace") if c not in ("id", "key")]
    keyed = [
        table
        for (table,) in common.query(
            db,
            "SELECT table_name::text FROM information_schema.columns WHERE table_schema = 'public'"
            " AND column_name = 'trace_key' AND table_name NOT IN ('traces_trace', 'traces_kernelpurge')",
        )
    ]
    with psycopg.connect(db) as conn:
        listed = ", ".join(trace_columns)
        (key,) = conn.execute(
            f"INSERT INTO traces_trace (id, key, {listed}) SELECT %s, nextval('traces_trace_key_seq'), "
            f"{listed} FROM traces_trace WHERE id = %s RETURNING key",
            (new_id, source),
        ).fetchone()
        for table in keyed:
            others = ", ".join(c for c in harness.loaded_columns(db, table) if c != "trace_key")
            conn.execute(
                f"INSERT INTO {table} (trace_key, {others}) SELECT %s, {others} FROM {table}"
                " WHERE trace_key = (SELECT key FROM traces_trace WHERE id = %s)",
                (key, source),
            )
    log(f"{new_id}: a copy of {source} ({', '.join(keyed)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database_url", help="an empty, migrated database")
    parser.add_argument("--scale", choices=SCALES, default="small")
    args = parser.parse_args(argv)
    traces, launches, big = SCALES[args.scale]
    result = seed(args.database_url, traces=traces, launches=launches, big_trace_launches=big)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
