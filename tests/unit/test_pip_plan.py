"""pip's install plan: parsing its --report JSON and judging what the plan would break."""

from __future__ import annotations

import json

import pytest

from envdoctor.install.pip_plan import (
    PackageState,
    PlanError,
    dry_run_argv,
    evaluate,
    parse_report,
    supports_report,
)
from tests.unit.fakes import MARKERS


def report(*items: tuple[str, str, list[str]], environment: dict[str, str] | None = None) -> str:
    return json.dumps({
        "version": "1", "pip_version": "24.0",
        "install": [{"metadata": {"name": n, "version": v, "requires_dist": r}, "requested": True} for n, v, r in items],
        "environment": MARKERS if environment is None else environment,
    })


REQUESTS = PackageState("requests", "2.32.3", ("urllib3<3,>=1.21.1", "idna<4,>=2.5", 'PySocks!=1.5.7,>=1.5.6; extra == "socks"'))
INSTALLED = [REQUESTS, PackageState("urllib3", "2.2.3"), PackageState("idna", "3.10")]


def test_downgrade_below_what_an_installed_package_requires_is_a_break():
    """The plan installs urllib3 1.20: requests' requirement is named with the planned version."""
    verdict = evaluate(parse_report(report(("urllib3", "1.20", []))), INSTALLED)
    assert not verdict.safe
    assert verdict.breaks == ("requests 2.32.3 requires urllib3<3,>=1.21.1; the plan installs 1.20",)
    assert [c.describe() for c in verdict.changes] == ["urllib3 2.2.3 -> 1.20 (downgrade)"]


def test_new_package_and_allowed_upgrade_are_safe():
    """A new distribution and an upgrade within every installed requirement break nothing."""
    plan = parse_report(report(("tiktoken", "0.8.0", ["regex>=2022.1.18", "requests>=2.26.0"]),
                               ("regex", "2024.11.6", []), ("urllib3", "2.3.0", [])))
    verdict = evaluate(plan, INSTALLED)
    assert verdict.safe
    assert [c.kind for c in verdict.changes] == ["new", "new", "upgrade"]


def test_conflict_already_there_is_not_the_plans_doing():
    """A conflict pip check reports before the install does not refuse a plan that keeps it."""
    broken = [REQUESTS, PackageState("urllib3", "3.1.0"), PackageState("idna", "3.10")]
    verdict = evaluate(parse_report(report(("tiktoken", "0.8.0", []))), broken)
    assert verdict.safe


def test_planned_package_requiring_an_installed_version_it_does_not_get_is_a_break():
    """A planned distribution whose own requirement the installed set does not meet is named."""
    verdict = evaluate(parse_report(report(("newlib", "1.0", ["idna>=4"]))), INSTALLED)
    assert verdict.breaks == ("newlib 1.0 requires idna>=4; idna 3.10 stays installed",)


def test_markers_are_evaluated_with_pips_environment_and_extras_ignored():
    """A requirement whose marker is false on the host, or that needs an extra, constrains nothing."""
    installed = [PackageState("lib", "1.0", ('dep<2; python_version < "3.8"', 'dep<2; extra == "old"')), PackageState("dep", "1.5")]
    assert evaluate(parse_report(report(("dep", "2.5", []))), installed).safe
    old_python = {**MARKERS, "python_version": "3.7", "python_full_version": "3.7.9"}
    assert not evaluate(parse_report(report(("dep", "2.5", []), environment=old_python)), installed).safe


def test_names_compare_as_pep_503_normalizes_them():
    """Requires-Dist spelled Foo_Bar matches the planned foo-bar."""
    installed = [PackageState("app", "1", ("Foo_Bar>=2",)), PackageState("foo-bar", "2.1")]
    verdict = evaluate(parse_report(report(("FOO.bar", "1.9", []))), installed)
    assert verdict.breaks == ("app 1 requires Foo_Bar>=2; the plan installs 1.9",)


def test_pip_version_gate_and_dry_run_argv():
    """pip >= 22.2 shows a plan; the dry-run flags go right after `install`, the rest is kept."""
    assert supports_report("22.2") and supports_report("24.0")
    assert not supports_report("22.1.2") and not supports_report(None) and not supports_report("junk")
    argv = ("/v/bin/python", "-m", "pip", "install", "--index-url", "http://i/simple", "tiktoken")
    assert dry_run_argv(argv) == ("/v/bin/python", "-m", "pip", "install", "--dry-run", "--report", "-", "--quiet",
                                  "--index-url", "http://i/simple", "tiktoken")


@pytest.mark.parametrize("text", ["", "[]", '{"install": 3}', '{"install": [{"metadata": {}}]}',
                                  '{"install": [{"metadata": {"name": "a", "version": "1", "requires_dist": "x"}}]}'])
def test_malformed_report_is_a_plan_error(text):
    """Anything but a report with named, versioned install items is refused, never guessed at."""
    with pytest.raises(PlanError):
        parse_report(text)


def _remedy(*reqs: str, pip_version: str = "24.0"):
    from envdoctor.install.pip_remedy import install_payload
    from envdoctor.engine.results import Remedy

    return Remedy("install", argv=("/v/bin/python", "-m", "pip", "install", *reqs),
                  payload=install_payload("/v", pip_version, INSTALLED, MARKERS))


def _runner(answers: dict[str, str], ran: list[tuple[str, ...]]):
    from envdoctor.transport.interface import CommandResult

    async def run(argv):
        ran.append(tuple(argv))
        if "--dry-run" in argv:
            return CommandResult(tuple(argv), 0, answers[argv[-1]].encode(), b"")
        return CommandResult(tuple(argv), 0, b"Successfully installed", b"")

    return run


def test_an_install_is_judged_against_what_earlier_installs_of_the_run_changed():
    """After one remedy installs urllib3 2.3.0, the next plan is judged against 2.3.0, not the probe's 2.2.3."""
    import asyncio

    from envdoctor.install.pip_remedy import apply_pip_install

    ran: list[tuple[str, ...]] = []
    answers = {"urllib3>=2.3": report(("urllib3", "2.3.0", [])),
               "newlib": report(("newlib", "1.0", ["urllib3>=2.3"]))}
    state: dict = {}
    first = asyncio.run(apply_pip_install(_runner(answers, ran), _remedy("urllib3>=2.3"), dry_run=False, installed=state))
    second = asyncio.run(apply_pip_install(_runner(answers, ran), _remedy("newlib"), dry_run=False, installed=state))
    assert (first.exit_status, first.refused) == (0, "") and (second.exit_status, second.refused) == (0, "")
    assert state["/v"]["urllib3"].version == "2.3.0"
    assert [a[-1] for a in ran] == ["urllib3>=2.3", "urllib3>=2.3", "newlib", "newlib"]


def test_refused_plan_and_old_pip_run_nothing():
    """A breaking plan and a pip without --report end as 'by hand' with only the dry run started."""
    import asyncio

    from envdoctor.install.pip_remedy import apply_pip_install

    ran: list[tuple[str, ...]] = []
    answers = {"urllib3<1.21": report(("urllib3", "1.20", []))}
    refused = asyncio.run(apply_pip_install(_runner(answers, ran), _remedy("urllib3<1.21"), dry_run=False, installed={}))
    assert refused.exit_status is None and "requests 2.32.3 requires urllib3<3,>=1.21.1" in refused.refused
    assert refused.plan == ("urllib3 2.2.3 -> 1.20 (downgrade)",)
    old = asyncio.run(apply_pip_install(_runner(answers, ran), _remedy("six", pip_version="21.3"), dry_run=False, installed={}))
    assert old.exit_status is None and "pip 21.3" in old.refused
    assert all("--dry-run" in argv for argv in ran) and len(ran) == 1
