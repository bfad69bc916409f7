"""Kernel names demangled once, at ingest, within a budget, and as binutils'
`c++filt` reads them: the real tracers' names, the outside truth."""

import itertools
import re

import pytest

from tests.helpers import shared_fixture, store_kernels
from tests.traces.support import cxx_filt, hostile, launch
from traces import demangle
from traces.models import KernelName

# An Itanium symbol as a tracer writes it in a stats file: `_Z` and the ABI's characters, up to
# the field's separator (a comma, a space, the line's end).
SYMBOL = re.compile(r"_Z[A-Za-z0-9_$.]+")


def real_names() -> list[str]:
    """Every symbol in the real tracers' files (`real-tracer/`, `real-tracer-2/`)."""
    names: dict[str, None] = {}
    for folder in ("real-tracer", "real-tracer-2"):
        for path in sorted(shared_fixture(folder).iterdir()):
            names.update(dict.fromkeys(SYMBOL.findall(path.read_text(errors="replace"))))
    return list(names)


@pytest.fixture
def cold(monkeypatch):
    """A process that has demangled nothing yet: a new worker."""
    monkeypatch.setattr(demangle, "cache", demangle.ByteBoundedCache(demangle.DEMANGLE_CACHE_BYTES))


def test_every_real_name_cxx_filt_demangles_is_shown_as_it_demangles_it(api, make_trace, cold):
    names = real_names()
    truth = dict(zip(names, cxx_filt(names), strict=True))
    readable = {name: text for name, text in truth.items() if text != name}
    assert len(readable) >= 30, (
        "the real files hold dozens of symbols (CUTLASS, cute::, vLLM, FlashAttention)"
    )
    assert sum("cutlass::" in text for text in readable.values()) >= 2, "CUTLASS's 1,500-character symbols"
    make_trace("real", state="ready", kernel_count=len(names))
    store_kernels("real", [launch(n, name, 100) for n, name in enumerate(names, 1)])

    shown = {
        kernel["name"]: kernel["demangled"]
        for kernel in api.get("/api/traces/real/summary").json()["kernels"]
    }
    assert {name: shown[name] for name in readable} == readable
    stored = dict(KernelName.objects.filter(name__in=names).values_list("name", "demangled"))
    assert {name: stored[name] for name in readable} == readable
    # The names c++filt leaves as they are (not symbols, or truncated by a tracer) stay as they are.
    assert all(shown[name] == name for name in truth.keys() - readable.keys())


# What one look at the budget's clock costs (`ticking`): a budget of B seconds runs out after
# B / TICK looks, however fast the machine is.
TICK = 0.25


@pytest.fixture
def ticking(monkeypatch):
    """Every budget's clock moves TICK seconds each time it is read, never with the machine."""
    ticks = itertools.count()
    monkeypatch.setattr(demangle.Budget, "clock", staticmethod(lambda: next(ticks) * TICK))


@pytest.fixture
def children(monkeypatch):
    """The names handed to each child process demangling started, in order."""
    started: list[list[str]] = []
    run_child = demangle.run_child

    def counted(names, budget):
        started.append(list(names))
        return run_child(names, budget)

    monkeypatch.setattr(demangle, "run_child", counted)
    return started


def most_children(budget_seconds: float) -> int:
    """A child costs its budget at least one look at the clock before it answers or stops."""
    return int(budget_seconds / TICK) + 1


@pytest.fixture
def thousand_hostile_names(make_trace, ticking, children):
    """A trace of 1,000 distinct names, each of which doubles when demangled at each of its 30 levels."""
    names = [hostile(30, f"f{n}") for n in range(1000)]
    make_trace("hostile", state="ready", kernel_count=len(names))
    store_kernels("hostile", [launch(n, name, 100 * n) for n, name in enumerate(names, 1)])
    at_ingest = list(children)
    children.clear()
    return names, at_ingest


def test_demangling_costs_a_trace_its_budget_at_ingest_not_a_second_a_name(thousand_hostile_names, cold):
    names, at_ingest = thousand_hostile_names
    # Each hostile name stops its child (its CPU limit): the budget, not the names, ends the work.
    assert 1 <= len(at_ingest) <= most_children(demangle.INGEST_BUDGET_SECONDS) < len(names)
    rows = KernelName.objects.filter(name__in=names)
    assert rows.count() == 1000
    # Every one hit a limit or found the budget spent: kept mangled, and marked so.
    assert set(rows.values_list("demangle_limited", flat=True)) == {True}
    assert all(row.demangled == row.name for row in rows)


@pytest.mark.parametrize("names_stored", ["at ingest", "before names were demangled"])
def test_a_trace_of_1000_hostile_names_answers_its_summary_within_a_requests_budget(
    api, thousand_hostile_names, children, monkeypatch, names_stored
):
    names, _ = thousand_hostile_names
    if (
        names_stored != "at ingest"
    ):  # as the migration may leave them: a read demangles them, within its budget
        KernelName.objects.filter(name__in=names).update(demangled=None, demangle_limited=False)
    for warmth in ("cold", "warm"):
        if warmth == "cold":
            monkeypatch.setattr(demangle, "cache", demangle.ByteBoundedCache(demangle.DEMANGLE_CACHE_BYTES))
        children.clear()
        response = api.get("/api/traces/hostile/summary", HTTP_CACHE_CONTROL="no-cache")
        assert response.status_code == 200
        assert len(response.json()["kernels"]) == 1000
        if names_stored == "at ingest":
            assert children == [], f"{warmth}: the stored texts are read, nothing demangled"
        else:
            assert len(children) <= most_children(demangle.REQUEST_BUDGET_SECONDS), warmth


def test_the_budget_counts_only_time_spent_demangling():
    now = [100.0]  # a clock the test moves: a loaded machine's sleeps never make it flaky
    budget = demangle.Budget(0.2, clock=lambda: now[0])
    now[0] += 0.25
    assert budget.left() == 0.2
    with budget.spending():
        now[0] += 0.05
        assert budget.left() == pytest.approx(0.15)
    now[0] += 10
    assert budget.left() == pytest.approx(0.15)


def test_a_name_that_hits_its_limit_is_marked_and_the_names_after_it_are_read(cold, monkeypatch):
    monkeypatch.setattr(demangle, "IN_PROCESS_BOUND", 0)  # every name through the children
    names = [hostile(30, "g"), "_Z9vectorAddPKfS0_Pfi", hostile(30, "h"), "_Z3fooi"]
    answers = demangle.demangle_names(names, demangle.Budget(5))
    assert answers == {
        names[0]: None,
        "_Z9vectorAddPKfS0_Pfi": "vectorAdd(float const*, float const*, float*, int)",
        names[2]: None,
        "_Z3fooi": "foo(int)",
    }


def test_names_past_the_budget_are_marked_untried(cold, monkeypatch):
    monkeypatch.setattr(demangle, "IN_PROCESS_BOUND", 0)
    answers = demangle.demangle_names(["_Z3fooi", "_Z3bari"], demangle.Budget(0))
    assert answers == {"_Z3fooi": None, "_Z3bari": None}
    assert demangle.cache.get("_Z3fooi") is None, "untried, so a later budget may read it"


@pytest.mark.parametrize("names_stored", ["at ingest", "before names were demangled"])
def test_the_admin_pages_of_1000_hostile_names_demangle_within_a_bound(
    staff_client, thousand_hostile_names, children, monkeypatch, names_stored
):
    """The trace page (mix, charts) and the kernel list: a request's demangling is bounded by
    its budget, not by the names it shows."""
    names, _ = thousand_hostile_names
    if names_stored != "at ingest":
        KernelName.objects.filter(name__in=names).update(demangled=None, demangle_limited=False)
    monkeypatch.setattr(demangle, "cache", demangle.ByteBoundedCache(demangle.DEMANGLE_CACHE_BYTES))
    for url in ("/admin/traces/trace/hostile/change/", "/admin/traces/kernel/?trace=hostile"):
        children.clear()
        response = staff_client.get(url)
        assert response.status_code == 200
        if names_stored == "at ingest":
            assert children == [], f"{url}: the stored texts are read, nothing demangled"
        else:
            assert len(children) <= most_children(demangle.REQUEST_BUDGET_SECONDS), url
