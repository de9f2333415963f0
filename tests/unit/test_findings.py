"""One finding per subject, each waivable alone; every held-back remedy names what would let fix
do it; the summary after fix names each check whose state changed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from envdoctor.cli.main import cli
from envdoctor.cli.selection import check_waivers
from envdoctor.engine.facts import Distribution, Environment, HostFacts
from envdoctor.engine.graph import load_checks
from envdoctor.engine.results import CheckResult, Remedy, Status
from envdoctor.inventory import HostSpec, Inventory
from envdoctor.operations.fleet import Action, FleetReport, HostReport, changes
from envdoctor.probe.host.model import files as probe
from envdoctor.probe.program import ProbeOutput
from envdoctor.report import render
from tests.kimi_fixture import build_kimi

GRAPH = load_checks()
V = "/root/venv_sglang211"
SITE = f"{V}/lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def no_code_kimi(tmp_path_factory) -> dict:
    """The probe's view of a Kimi folder whose modeling files are missing (its tokenizer imports tiktoken)."""
    root = tmp_path_factory.mktemp("findings")
    folder = build_kimi(root / "Kimi-K2.6", mark=root / "MARK", model_code=False, ranks=False)
    return probe.inspect_model(str(folder), {})


def code_results(model: dict, *, trust: bool = False, venv: str | None = V,
                 skip: tuple[tuple[str, str], ...] = ()) -> dict[str, CheckResult]:
    env = Environment(prefix=V, python=f"{V}/bin/python", exists=True, runs=True, version="3.11.7",
                      distributions=(Distribution("transformers", "4.57.1", (), f"{SITE}/transformers.dist-info", SITE),))
    facts = HostFacts(probe=ProbeOutput(sections={"models": [model]}), envs=(env,), configured_envs=(V,),
                      default_env=env if venv is None else None)
    spec = HostSpec("ct200", None, venv=venv, models=(model["path"],), trust_remote_code=trust, skip=skip)
    return {r.id: r for r in GRAPH.evaluate(spec, facts, only=["model.code-imports"])}


def test_a_missing_import_and_a_missing_file_are_separate_results(no_code_kimi):
    """tiktoken and each file auto_map names but the folder lacks are results of their own, ids CHECK:SUBJECT."""
    results = code_results(no_code_kimi)
    ids = sorted(i for i in results if i.startswith("model.code-imports"))
    assert ids == ["model.code-imports:configuration_kimi_k25.py", "model.code-imports:modeling_kimi_k25.py",
                   "model.code-imports:tiktoken"]
    tiktoken = results["model.code-imports:tiktoken"]
    assert tiktoken.status is Status.FAIL and "imports tiktoken" in tiktoken.message
    assert "modeling" not in tiktoken.message
    assert results["model.code-imports:modeling_kimi_k25.py"].remedy.argv == ()
    data = tiktoken.to_json()
    assert (data["id"], data["check"], data["subject"], data["status"]) == (
        "model.code-imports:tiktoken", "model.code-imports", "tiktoken", "fail")


def test_each_finding_is_waived_alone_or_with_its_check(no_code_kimi):
    """--skip model.code-imports:tiktoken waives tiktoken only; --skip model.code-imports waives every finding."""
    one = code_results(no_code_kimi, skip=(("model.code-imports:tiktoken", "serving only"),))
    assert one["model.code-imports:tiktoken"].status is Status.WAIVED
    assert one["model.code-imports:modeling_kimi_k25.py"].status is Status.FAIL
    every = code_results(no_code_kimi, skip=(("model.code-imports", "later"),))
    assert {r.status for i, r in every.items() if i.startswith("model.code-imports")} == {Status.WAIVED}


def test_a_finding_held_back_for_consent_names_the_flag_in_the_text_report(no_code_kimi):
    """Without --trust-remote-code the tiktoken install is by hand, and the text names `envdoctor fix ct200 --trust-remote-code`."""
    tiktoken = code_results(no_code_kimi)["model.code-imports:tiktoken"]
    assert not tiktoken.remedy.automatic and tiktoken.remedy.unlocked_by == "--trust-remote-code"
    assert tiktoken.remedy.to_json()["unlocked_by"] == "--trust-remote-code"
    text = render(FleetReport("check", [HostReport(HostSpec("ct200", None, venv=V), [tiktoken])]), "text")
    assert f"fix (by hand): {V}/bin/python -m pip install tiktoken" in text
    assert "fix does it with: envdoctor fix ct200 --trust-remote-code" in text
    consented = code_results(no_code_kimi, trust=True)["model.code-imports:tiktoken"]
    assert consented.remedy.automatic and not consented.remedy.unlocked_by


def test_without_a_venv_the_flag_that_chooses_one_is_named_too(no_code_kimi):
    """No venv chosen and no consent: fix would need both --venv and --trust-remote-code, and says so."""
    tiktoken = code_results(no_code_kimi, venv=None)["model.code-imports:tiktoken"]
    assert tiktoken.remedy.unlocked_by == "--venv PATH --trust-remote-code"


def result(check_id: str, status: Status, subject: str = "") -> CheckResult:
    return CheckResult(check_id, status, "m", subject=subject)


def test_changes_name_each_check_whose_state_fix_changed():
    """A finding resolved by fix reads 'ID:SUBJECT: fail -> pass'; unchanged checks are not listed."""
    before = [result("python.venv", Status.PASS), result("model.code-imports:tiktoken", Status.FAIL, "tiktoken"),
              result("model.tokenizer-live", Status.FAIL), result("patch.x", Status.WARN)]
    after = [result("python.venv", Status.PASS), result("model.code-imports", Status.PASS),
             result("model.tokenizer-live", Status.PASS), result("patch.x", Status.PASS)]
    assert [c.line() for c in changes(before, after)] == [
        "model.code-imports:tiktoken: fail -> pass", "model.tokenizer-live: fail -> pass", "patch.x: warn -> pass"]


def test_fix_summary_lists_the_changed_checks_in_text_and_json():
    """After fix, the text report lists each changed check and the JSON host has `changed`."""
    before = [result("model.tokenizer-live", Status.FAIL)]
    after = [result("model.tokenizer-live", Status.PASS)]
    action = Action("model.tokenizer-live", "install tiktoken", f"{V}/bin/python -m pip install tiktoken", 0)
    report = FleetReport("fix", [HostReport(HostSpec("ct200", None), after, before=before, actions=[action])])
    assert "  changed:\n    model.tokenizer-live: fail -> pass\n" in render(report, "text")
    host = json.loads(render(report, "json"))["hosts"][0]
    assert host["changed"] == [{"id": "model.tokenizer-live", "before": "fail", "after": "pass"}]


def test_a_waiver_of_a_finding_is_checked_against_the_check_ids():
    """--skip CHECK:SUBJECT is accepted for a real check, and a typo in CHECK is exit 2 naming it (before any probe)."""
    check_waivers(GRAPH, [("model.code-imports:tiktoken", "r")], Inventory())
    bad = CliRunner().invoke(cli, ["check", "local", "--skip", "model.code-import:tiktoken"])
    assert bad.exit_code == 2 and "no check named 'model.code-import'" in bad.output


def test_packages_consistent_names_the_require_that_lets_fix_install():
    """A missing dependency is by hand; its remedy names --require with the wanted specifier."""
    from tests.unit.fakes import dist, env, facts

    venv = env("/v", dist("PyGObject", "3.42.2", "pycairo>=1.16.0"))
    found = {r.id: r for r in GRAPH.evaluate(HostSpec("h", None, venv="/v"), facts(venv))}["packages.consistent"]
    assert found.remedy.unlocked_by == "--require 'pycairo>=1.16.0'"
    assert isinstance(found.remedy, Remedy) and not found.remedy.automatic
