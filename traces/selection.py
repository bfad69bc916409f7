"""A trace's launches grouped by the work they do, each group with a representative launch:
what `GET /api/traces/{trace_id}/selection` serves (Principal Kernel Analysis's idea, MICRO
2021: simulate a few representative kernels, weight each by how many launches it stands for).

The rule (docs/api.md#representative-kernels-selection says why this tolerance):

- Launches are the same work when they share the kernel name, grid and block, and their
  instruction counts are close: within one name and shape, counts are taken in ascending
  order and a group starts at its smallest count `first`; every following count up to
  `first * (1 + TOLERANCE)` joins it, the next one above starts the next group. Launches
  without counts (captured into a CUDA graph) of one name and shape form one group of their
  own. The groups depend on the counts alone, never on the order rows come in.
- A group's representative is a launch the tracer traced (its trace file exists) when the group
  has one, else any of its launches: the one whose count is nearest the group's median count
  (the lower median, a count the group holds), ties to the first in the trace's order
  (ctx, device, kernel_id).
- Shares are of the run's (or the step's) measured time when its launches have one, else of
  its instructions, else of its launch count (`basis`); groups are sorted by share, the
  largest first, and cut at `cover`: the fewest first groups whose shares add up to it.

A million-launch trace costs one GROUP BY in the database (by name, shape, count, traced
and context: a real run repeats a few hundred shapes with few distinct counts) streamed
through a server-side cursor; Python holds one name and shape's rows at a time and the groups.
Members are then streamed in the groups' order from a second query, never held.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import orjson

from traces import params
from traces.models import NO_DEVICE, KernelContext, KernelName, Step, Trace
from traces.params import shown
from traces.snapshots import Snapshot, snapshot, streamed_rows

BY_UNIQUE = "unique"
BY_STEP = "step"
SELECT_BY = (BY_UNIQUE, BY_STEP)

# Launches of one name and shape are one group while their counts stay within 20% above the
# group's smallest: docs/api.md gives the data behind this value.
TOLERANCE = Fraction(1, 5)

BASIS_TIME, BASIS_INSTS, BASIS_LAUNCHES = "time", "insts", "launches"

# Rows a round trip of the server-side cursors.
FETCH_ROWS = 5000
# Members per chunk of the streamed answer.
MEMBER_CHUNK = 5000


class SelectionError(ValueError):
    """A parameter the selection cannot use: the API's 400, its message the detail."""


@dataclass(frozen=True)
class Launch:
    ctx: str | None
    kernel_id: int
    device: int
    trace_file: str
    traced: bool


@dataclass
class Group:
    """Launches of one name and shape whose counts lie in [low, high] (both None: no counts)."""

    name_id: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    low: int | None
    high: int | None
    count: int
    total_insts: int | None
    duration_ns: int | None
    # (context, kernel_id) of the representative; its launch is read once the groups are cut.
    representative_key: tuple[int, int]
    name: str = ""
    share: float = 0.0
    weight: int = 0  # the group's amount of the basis (ns, instructions or launches)
    representative: Launch | None = None


@dataclass
class Selection:
    trace_id: str
    by: str
    step: str | None
    cover: Fraction
    launches: int
    basis: str
    covered: float
    groups: list[Group]
    # Each returned group's members in the groups' order: (group position, context, kernel_id).
    members: Iterator[tuple[int, int, int]] | None = None
    contexts: dict[int, tuple[str | None, int]] = field(default_factory=dict)


# --- parameters ----------------------------------------------------------------------------------


def parse_cover(value: str | None) -> Fraction:
    """`cover` as an exact fraction in (0, 1]: `0.9` is 9/10, so that the cut is exact. Its text
    is bounded before it is a Fraction (`traces.params`): `1e-10000000` is refused at once."""
    return params.fraction(
        value, "cover", low=Fraction(0), high=Fraction(1), low_open=True, default=Fraction(1)
    )


def parse_members(value: str | None) -> bool:
    return params.boolean(value, "members", default=True)


def parse_by(by: str | None, step: str | None) -> tuple[str, str | None]:
    by = BY_UNIQUE if by is None else by
    if by not in SELECT_BY:
        raise SelectionError(f"by accepts one of {', '.join(SELECT_BY)}; got {shown(by)}.")
    if by == BY_STEP and not step:
        raise SelectionError("step accepts the name of one of the trace's steps, and by=step needs it.")
    if by == BY_UNIQUE and step:
        raise SelectionError("step is read with by=step only; got by=unique.")
    return by, step or None


# --- the groups ----------------------------------------------------------------------------------


def joins(first: int | None, insts: int | None, tolerance: Fraction = TOLERANCE) -> bool:
    """Whether a count joins the group whose smallest count is `first` (exact arithmetic)."""
    if first is None or insts is None:
        return first is None and insts is None
    return insts * tolerance.denominator <= first * (tolerance.denominator + tolerance.numerator)


def _where(trace_key: int, steps: list[int] | None) -> tuple[str, list]:
    sql, params = "k.trace_key = %s", [trace_key]
    if steps is not None:
        sql += f" AND k.step IN ({', '.join(['%s'] * len(steps))})"
        params += steps
    return sql, params


SHAPE = "k.name_id, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z"


def _count_rows(trace_key: int, steps: list[int] | None) -> Iterator[tuple]:
    """(name_id, 6 shape numbers, insts, traced, context, launches, first kernel_id, summed
    time), ordered by shape then count (no counts last), through a server-side cursor."""
    where, params = _where(trace_key, steps)
    sql = (
        f"SELECT {SHAPE}, k.total_insts, k.traced, k.context, COUNT(*), MIN(k.kernel_id), "
        "CAST(SUM(k.duration_ns) AS BIGINT) "
        f"FROM traces_kernel k WHERE {where} "
        f"GROUP BY {SHAPE}, k.total_insts, k.traced, k.context "
        f"ORDER BY {SHAPE}, k.total_insts IS NULL, k.total_insts, k.context"
    )
    return streamed_rows(sql, params, FETCH_ROWS)


def _group(shape: tuple, rows: list[tuple]) -> Group:
    """One group from its rows (insts, traced, context, launches, first kernel_id, time)."""
    count = sum(row[3] for row in rows)
    counted = rows[0][0] is not None
    # The lower median: the count at position (count - 1) // 2 in ascending order.
    position, median = (count - 1) // 2, None
    if counted:
        seen = 0
        for insts, _traced, _context, launches, _first, _time in rows:
            seen += launches
            if seen > position:
                median = insts
                break
    candidates = [row for row in rows if row[1]] or rows
    insts, _traced, context, _launches, kernel_id, _time = min(
        candidates, key=lambda row: (abs(row[0] - median) if counted else 0, row[2], row[4])
    )
    times = [row[5] for row in rows if row[5] is not None]
    return Group(
        name_id=shape[0],
        grid=tuple(shape[1:4]),
        block=tuple(shape[4:7]),
        low=rows[0][0],
        high=rows[-1][0],
        count=count,
        total_insts=sum(row[0] * row[3] for row in rows) if counted else None,
        duration_ns=sum(times) if times else None,
        representative_key=(context, kernel_id),
    )


def group_launches(rows: Iterable[tuple], tolerance: Fraction = TOLERANCE) -> Iterator[Group]:
    """`_count_rows`' rows into groups, streaming: one group's rows held at a time."""
    shape, first, held = None, None, []
    for row in rows:
        row_shape, rest = row[:7], row[7:]
        if held and (row_shape != shape or not joins(first, rest[0], tolerance)):
            yield _group(shape, held)
            held = []
        if not held:
            shape, first = row_shape, rest[0]
        held.append(rest)
    if held:
        yield _group(shape, held)


def _rank(groups: list[Group], launches: int) -> tuple[str, int]:
    """Each group's weight and share of the basis; the basis and its total."""
    total_time = sum(group.duration_ns or 0 for group in groups)
    total_insts = sum(group.total_insts or 0 for group in groups)
    if any(group.duration_ns is not None for group in groups) and total_time > 0:
        basis, total = BASIS_TIME, total_time
    elif total_insts > 0:
        basis, total = BASIS_INSTS, total_insts
    else:
        basis, total = BASIS_LAUNCHES, launches
    for group in groups:
        group.weight = {
            BASIS_TIME: group.duration_ns or 0,
            BASIS_INSTS: group.total_insts or 0,
            BASIS_LAUNCHES: group.count,
        }[basis]
        group.share = group.weight / total if total else 0.0
    return basis, total


def cut(groups: list[Group], cover: Fraction, total: int) -> list[Group]:
    """The fewest first groups whose weights reach `cover` of `total`; every group at 1."""
    if cover >= 1:
        return groups
    kept, reached = [], 0
    for group in groups:
        if reached * cover.denominator >= cover.numerator * total and kept:
            break
        kept.append(group)
        reached += group.weight
    return kept


def _step_indexes(trace_id: str, step: str) -> list[int]:
    indexes = list(Step.objects.filter(trace_id=trace_id, name=step).values_list("index", flat=True))
    if not indexes:
        names = list(Step.objects.filter(trace_id=trace_id).order_by("index").values_list("name", flat=True))
        known = (
            ", ".join(shown(name) for name in names[:10]) if names else "none: the run has no timeline.json"
        )
        raise SelectionError(
            f"step accepts the name of one of the trace's steps ({known}); got {shown(step)}."
        )
    return indexes


def _representatives(trace_key: int, groups: list[Group], contexts: dict) -> None:
    """Each group's representative launch: its ctx, device and trace file (primary-key lookups)."""
    from django.db.models import Q

    from traces.models import Kernel

    keys = [group.representative_key for group in groups]
    found = {}
    for start in range(0, len(keys), 500):
        condition = Q()
        for context, kernel_id in keys[start : start + 500]:
            condition |= Q(context=context, kernel_id=kernel_id)
        for context, kernel_id, trace_file, traced in (
            Kernel.objects.filter(trace=trace_key)
            .filter(condition)
            .values_list("context", "kernel_id", "trace_file", "traced")
        ):
            found[(context, kernel_id)] = (trace_file, traced)
    for group in groups:
        context, kernel_id = group.representative_key
        ctx, device = contexts[context]
        trace_file, traced = found[group.representative_key]
        group.representative = Launch(
            ctx=ctx, kernel_id=kernel_id, device=device, trace_file=trace_file, traced=traced
        )


def _member_rows(
    reads: Snapshot, trace_key: int, steps: list[int] | None, groups: list[Group]
) -> Iterator[tuple]:
    """Every launch of `groups` as (group position, context, kernel_id), in the groups' order and
    within a group in the trace's order: the groups' bounds joined in the database (literal
    integers, which the groups hold), on the snapshot's held cursor (read as the answer streams)."""
    values = ", ".join(
        f"({position}, {group.name_id}, {group.grid[0]}, {group.grid[1]}, {group.grid[2]}, "
        f"{group.block[0]}, {group.block[1]}, {group.block[2]}, "
        f"{'NULL' if group.low is None else group.low}, {'NULL' if group.high is None else group.high})"
        for position, group in enumerate(groups)
    )
    where, params = _where(trace_key, steps)
    # Typed on both sides: PostgreSQL's unsigned columns are `oid`, the literals integers.
    big = "CAST({} AS BIGINT)".format
    shape = " AND ".join(
        f"{big('k.' + column)} = g.{column}"
        for column in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
    )
    sql = (
        "WITH g(position, name_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, low, high) "
        f"AS (VALUES {values}) "
        "SELECT g.position, k.context, k.kernel_id FROM traces_kernel k "
        f"JOIN g ON k.name_id = g.name_id AND {shape} AND ("
        f"({big('k.total_insts')} >= {big('g.low')} AND {big('k.total_insts')} <= {big('g.high')}) "
        "OR (k.total_insts IS NULL AND g.low IS NULL)) "
        f"WHERE {where} ORDER BY g.position, k.context, k.kernel_id"
    )
    return reads.held_rows(sql, params, FETCH_ROWS)


def select(
    trace_id: str,
    *,
    by: str = BY_UNIQUE,
    step: str | None = None,
    cover: Fraction = Fraction(1),
    members: bool = True,
    check=None,
) -> Selection:
    """The trace's (or a step's) launches grouped, ranked and cut, from one snapshot.

    `check()` runs first inside the snapshot (the view's 404 and 409). With `members`, the
    groups' launches come as an iterator over a cursor declared in that snapshot and held past
    it (PostgreSQL), as the detail's kernels are, so a parse committing meanwhile changes
    nothing of the answer.
    """
    with snapshot(held=members) as reads:
        if check is not None:
            check()
        trace_key = Trace.objects.values_list("key", flat=True).get(pk=trace_id)
        steps = _step_indexes(trace_id, step) if by == BY_STEP else None
        groups = list(group_launches(_count_rows(trace_key, steps)))
        launches = sum(group.count for group in groups)
        names = dict(
            KernelName.objects.filter(id__in={group.name_id for group in groups}).values_list("id", "name")
        )
        for group in groups:
            group.name = names[group.name_id]
        basis, total = _rank(groups, launches)
        groups.sort(key=lambda g: (-g.weight, g.name, g.grid, g.block, g.low is None, g.low or 0))
        kept = cut(groups, cover, total)
        contexts = {
            index: (ctx, device)
            for index, ctx, device in KernelContext.objects.filter(trace=trace_key).values_list(
                "index", "ctx", "device"
            )
        }
        _representatives(trace_key, kept, contexts)
        rows = _member_rows(reads, trace_key, steps, kept) if members and kept else None
    reached = sum(group.weight for group in kept)
    return Selection(
        trace_id=trace_id,
        by=by,
        step=step,
        cover=cover,
        launches=launches,
        basis=basis,
        covered=reached / total if total else 0.0,
        groups=kept,
        members=iter(()) if members and rows is None else rows,
        contexts=contexts,
    )


# --- the answer ----------------------------------------------------------------------------------


def _launch_key(ctx: str | None, kernel_id: int, device: int) -> dict:
    key = {"ctx": ctx, "kernel_id": kernel_id}
    if device != NO_DEVICE:
        key["device_id"] = device
    return key


def group_dict(group: Group) -> dict:
    launch = group.representative
    return {
        "name": group.name,
        "grid": list(group.grid),
        "block": list(group.block),
        "count": group.count,
        "total_insts": group.total_insts,
        "duration_ns": group.duration_ns,
        "share": group.share,
        "representative": {
            **_launch_key(launch.ctx, launch.kernel_id, launch.device),
            "trace_file": launch.trace_file,
            "traced": launch.traced,
        },
    }


def head_dict(selection: Selection) -> dict:
    return {
        "trace_id": selection.trace_id,
        "by": selection.by,
        "step": selection.step,
        "cover": float(selection.cover),
        "tolerance": float(TOLERANCE),
        "launches": selection.launches,
        "basis": selection.basis,
        "covered": selection.covered,
    }


def encode_selection(selection: Selection) -> Iterator[bytes]:
    """The answer's JSON in chunks: the head, then each group with its members as they stream."""
    head = orjson.dumps(head_dict(selection))
    yield head[:-1] + b',"groups":['
    # Each context's member prefix, encoded once: `{"ctx":"0x..","kernel_id":`.
    prefixes = {
        index: orjson.dumps({"ctx": ctx})[:-1] + b',"kernel_id":'
        for index, (ctx, _) in selection.contexts.items()
    }
    suffixes = {
        index: b"}" if device == NO_DEVICE else b',"device_id":' + str(device).encode() + b"}"
        for index, (_, device) in selection.contexts.items()
    }
    members = selection.members
    pending = next(members, None) if members is not None else None
    for position, group in enumerate(selection.groups):
        body = orjson.dumps(group_dict(group))
        if members is None:
            yield (b"," if position else b"") + body
            continue
        yield (b"," if position else b"") + body[:-1] + b',"members":['
        chunk, first = [], True
        while pending is not None and pending[0] == position:
            _, context, kernel_id = pending
            chunk.append(prefixes[context] + str(kernel_id).encode() + suffixes[context])
            if len(chunk) >= MEMBER_CHUNK:
                yield (b"" if first else b",") + b",".join(chunk)
                chunk, first = [], False
            pending = next(members, None)
        yield (b"" if first or not chunk else b",") + b",".join(chunk) + b"]}"
    yield b"]}"
