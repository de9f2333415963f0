"""`envdoctor patches list|show`, run in-process with click's runner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from envdoctor.cli.main import cli
from envdoctor.operations.fleet import Action, FleetReport, HostReport
from envdoctor.inventory import HostSpec
from envdoctor.report import render

TOKENIZER = "speculators-tokenizer-trust-remote-code"
WORKER = "speculators-multimodal-decoder-layers"


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_list_names_each_shipped_patch_with_its_versions():
    """patches list shows each patch with its distribution and versions, lower bound first."""
    res = run("patches", "list")
    assert res.exit_code == 0
    assert f"{TOKENIZER}  speculators>=0.3.0,<0.5" in res.output
    assert f"{WORKER}    speculators>=0.3.0,<0.4" in res.output


def test_show_prints_every_field():
    """patches show ID prints summary, why, distribution, versions, files and fixed_in."""
    res = run("patches", "show", WORKER)
    assert res.exit_code == 0
    for expected in ("summary:", "why:", "distribution: speculators", "versions:     >=0.3.0,<0.4",
                     "files:        speculators/data_generation/custom_worker.py", "fixed_in:     0.4.0"):
        assert expected in res.output


def test_show_unknown_id_is_a_usage_error(tmp_path):
    """An unknown patch id, or a --patches file that does not exist, exits 2 with one line."""
    res = run("patches", "show", "nope")
    assert res.exit_code == 2 and "no patch named 'nope'" in res.output
    missing = run("patches", "list", "--patches", str(tmp_path / "absent.py"))
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert "Traceback" not in res.output + missing.output


def test_user_patch_file_is_listed(tmp_path):
    """A patch from --patches FILE is listed beside the shipped ones."""
    mine = tmp_path / "mine.py"
    mine.write_text(
        "from packaging.specifiers import SpecifierSet\n"
        "from envdoctor.patching.engine import Patch\n"
        "MINE = Patch(id='my-fix', summary='my summary', why='w', distribution='x',\n"
        "             specifier=SpecifierSet('<2'), files=('x/a.py',), transform=lambda module: module)\n"
    )
    res = run("patches", "list", "--patches", str(mine))
    assert res.exit_code == 0 and "my-fix" in res.output and "my summary" in res.output


def test_dry_run_report_shows_the_diff_in_text_and_json():
    """A dry-run patch action carries its unified diff into the text and JSON reports."""
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-f(p)\n+f(p, trust_remote_code=True)\n"
    action = Action("patch.demo", "apply patch demo to x.py", "apply patch demo to x.py", None, diff=diff)
    report = FleetReport("fix", [HostReport(HostSpec("local", None), [], before=[], actions=[action])])
    text = render(report, "text")
    assert "would run: apply patch demo to x.py" in text
    assert "      +f(p, trust_remote_code=True)" in text
    assert json.loads(render(report, "json"))["hosts"][0]["actions"][0]["diff"] == diff
