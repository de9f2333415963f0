"""The check graph: order, blocking, skipping, crashes."""

from __future__ import annotations

import pytest

from envdoctor.errors import ConfigError
from envdoctor.engine.facts import HostFacts
from envdoctor.engine.graph import Check, CheckGraph
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import ProbeOutput
from envdoctor.engine.results import Status, failed, passed, skipped


def make(id: str, result, *requires: str) -> Check:
    return Check(id, id.title(), lambda ctx: result, tuple(requires))


SPEC = HostSpec("h", None)
FACTS = HostFacts(probe=ProbeOutput())


def test_order_is_topological_and_deterministic():
    """Checks run after what they require; ties are broken by name."""
    graph = CheckGraph([make("c", passed("x"), "a"), make("b", passed("x")), make("a", passed("x"))])
    assert graph.order == ["a", "b", "c"]


def test_failed_prerequisite_blocks_dependents_transitively():
    """A failure turns dependents into blocked naming the direct prerequisite."""
    graph = CheckGraph([make("a", failed("no")), make("b", passed("x"), "a"), make("c", passed("x"), "b")])
    results = {r.id: r for r in graph.evaluate(SPEC, FACTS)}
    assert results["b"].status is Status.BLOCKED and results["b"].blocked_by == "a"
    assert results["c"].status is Status.BLOCKED and results["c"].blocked_by == "b"


def test_skipped_prerequisite_skips_dependents():
    """A skipped prerequisite skips its dependents rather than blocking them."""
    graph = CheckGraph([make("a", skipped("n/a")), make("b", passed("x"), "a")])
    results = {r.id: r for r in graph.evaluate(SPEC, FACTS)}
    assert results["b"].status is Status.SKIPPED


def test_a_crashing_check_is_an_error_result():
    """A check that raises becomes an error result; the others still run."""

    def boom(ctx):
        raise RuntimeError("bug")

    graph = CheckGraph([Check("a", "A", boom), make("b", passed("x"))])
    results = {r.id: r for r in graph.evaluate(SPEC, FACTS)}
    assert results["a"].status is Status.ERROR and "bug" in results["a"].message
    assert results["b"].status is Status.PASS


def test_cycles_unknown_requirements_and_duplicates_are_config_errors():
    """A malformed graph is refused with a clear error."""
    with pytest.raises(ConfigError, match="cycle"):
        CheckGraph([make("a", passed("x"), "b"), make("b", passed("x"), "a")])
    with pytest.raises(ConfigError, match="which no check defines"):
        CheckGraph([make("a", passed("x"), "zzz")])
    with pytest.raises(ConfigError, match="two checks"):
        CheckGraph([make("a", passed("x")), make("a", passed("x"))])


def test_only_selects_prerequisites_too():
    """--only runs the named check and everything it requires, nothing else."""
    graph = CheckGraph([make("a", passed("x")), make("b", passed("x"), "a"), make("c", passed("x"))])
    assert [r.id for r in graph.evaluate(SPEC, FACTS, only=["b"])] == ["a", "b"]


def test_only_gathers_the_sections_the_chosen_checks_and_prerequisites_read():
    """--only asks the probe for the base sections plus what the closure declares; an undeclared check gets all."""
    base = Check("base", "Base", lambda ctx: passed("x"), (), "", ())
    models = Check("models", "Models", lambda ctx: passed("x"), ("base",), "", ("models",))
    scan = Check("scan", "Scan", lambda ctx: passed("x"), ("models",), "", ("sources",))
    mine = Check("mine", "Mine", lambda ctx: passed("x"), ("base",))  # a user's check: says nothing
    graph = CheckGraph([base, models, scan, mine])
    assert graph.sections_for(["base"]) == ["host", "venvs"]
    assert graph.sections_for(["scan"]) == ["host", "models", "sources", "venvs"]
    assert graph.sections_for(["mine"]) is None
    assert graph.sections_for(None) is None


def test_shipped_checks_declare_what_they_read():
    """Every shipped check names its probe sections, and each named section exists."""
    from envdoctor.operations.gather import PROBE_SECTIONS
    from envdoctor.engine.graph import load_checks

    graph = load_checks()
    undeclared = [c.id for c in graph.checks.values() if c.facts is None]
    assert undeclared == []
    assert {f for c in graph.checks.values() for f in c.facts} <= set(PROBE_SECTIONS)
    assert graph.sections_for(["packages.required"]) == ["host", "venvs"]


def test_fleet_check_with_only_asks_the_probe_for_those_sections_alone(monkeypatch):
    """check --only runs the real probe on this machine with just the sections the closure reads."""
    import asyncio

    from envdoctor.operations import gather
    from envdoctor.engine.executor import FleetSettings
    from envdoctor.operations.fleet import run_fleet
    from envdoctor.engine.graph import load_checks

    asked: list[list[str]] = []
    real = gather.run_probe

    async def spy(transport, request, **kwargs):
        asked.append(sorted(request))
        return await real(transport, request, **kwargs)

    monkeypatch.setattr(gather, "run_probe", spy)
    spec = HostSpec("local", None)
    report = asyncio.run(run_fleet([spec], load_checks(), FleetSettings(only=("packages.required",))))
    assert asked == [["host", "venvs"]]
    assert {r.id for r in report.hosts[0].results} == {"host.reachable", "host.python", "python.venv",
                                                       "packages.required"}
    asyncio.run(run_fleet([spec], load_checks(), FleetSettings()))
    assert asked[-1] == sorted(gather.default_sections())
    assert {"system", "digests"} <= set(gather.PROBE_SECTIONS) - set(gather.default_sections())  # on demand only
    assert "model-search" not in asked[-1] and "model-search" in gather.PROBE_SECTIONS


def test_checks_not_started_by_the_hosts_deadline_are_not_judged():
    """Once the host's budget has run out, a check that has not started is an error marked
    `deadline` (envdoctor's own time, not the host's fault), and the ones before it stand."""
    import itertools
    import time

    clock = itertools.count()
    calls = []

    def slow(ctx):
        calls.append(next(clock))
        time.sleep(0.05)
        return passed("x")

    graph = CheckGraph([Check("a", "A", slow), Check("b", "B", slow), Check("c", "C", slow)])
    results = {r.id: r for r in graph.evaluate(SPEC, FACTS, until=time.monotonic() + 0.02)}
    assert results["a"].status is Status.PASS and len(calls) == 1
    for late in ("b", "c"):
        assert results[late].status is Status.ERROR and results[late].details == {"deadline": True}
        assert "--timeout" in results[late].message
