"""envdoctor scan and the scan inside check, on the real speculators 0.3.0 wheel from PyPI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.scan.scanner import TrustRemoteCodeScanner
from tests.conftest import make_venv

pytestmark = pytest.mark.e2e

GENERATOR = "data_generation/vllm_hidden_states_generator.py"


@pytest.fixture(scope="session")
def speculators_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real speculators 0.3.0 and packaging wheels, downloaded once (no dependencies)."""
    folder = tmp_path_factory.mktemp("scan-wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
         "-d", str(folder), "speculators==0.3.0", "packaging"],
        check=True,
    )
    return folder


@pytest.fixture(scope="module")
def speculators_venv(tmp_path_factory: pytest.TempPathFactory, speculators_wheels: Path) -> Path:
    """A real venv (its path has a space) with speculators 0.3.0 installed --no-deps, and packaging."""
    return make_venv(
        tmp_path_factory.mktemp("scan-venvs") / "spec venv",
        ["speculators==0.3.0", "packaging"],
        pip_args=["--no-deps", "--no-index", "--find-links", str(speculators_wheels)],
    )


@pytest.fixture(scope="module")
def speculators_dir(speculators_venv: Path) -> Path:
    (found,) = speculators_venv.glob("lib/python3*/site-packages/speculators")
    return found


def test_scan_json_finds_the_tokenizer_gap_beside_the_ok_config_call(run_cli, speculators_dir):
    """scan --format json reports AutoTokenizer.from_pretrained as missing and the AutoConfig call beside it as ok."""
    res = run_cli("scan", str(speculators_dir), "--format", "json")
    assert res.exit_status == 1, res.stderr
    data = json.loads(res.stdout)
    assert {"sites", "errors"} <= set(data) and data["errors"] == []
    in_generator = [s for s in data["sites"] if s["path"] == GENERATOR]
    tokenizer = next(s for s in in_generator if s["callee"] == "transformers.AutoTokenizer.from_pretrained")
    config = next(s for s in in_generator if s["callee"] == "transformers.AutoConfig.from_pretrained")
    assert tokenizer["state"] == "missing" and config["state"] == "ok"
    assert config["line"] == tokenizer["line"] + 2
    source_lines = (speculators_dir / GENERATOR).read_text().splitlines()
    assert "AutoTokenizer.from_pretrained(model_path)" in source_lines[tokenizer["line"] - 1]
    assert all({"path", "line", "callee", "state"} <= set(s) for s in data["sites"])
    # The byte filter and the ast shortcuts find exactly what libcst finds in every whole file.
    reference = TrustRemoteCodeScanner(use_filter=False, shortcuts=False).scan([speculators_dir])
    assert data["sites"] == [s.to_json() for s in reference.sites]


def test_scan_sarif_and_text_outputs(run_cli, speculators_dir, tmp_path):
    """SARIF 2.1.0 locates each gap relative to the scanned folder; text names file:line and state."""
    out = tmp_path / "scan.sarif"
    res = run_cli("scan", str(speculators_dir), "--format", "sarif", "--output", str(out))
    assert res.exit_status == 1
    sarif = json.loads(out.read_text())
    assert sarif["version"] == "2.1.0"
    (run,) = sarif["runs"]
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == speculators_dir.resolve().as_uri() + "/"
    locations = {(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in run["results"]}
    assert ("trust-remote-code/missing", GENERATOR) in locations
    assert all(r["level"] == "error" for r in run["results"] if r["ruleId"] == "trust-remote-code/missing")

    text = run_cli("scan", str(speculators_dir))
    assert text.exit_status == 1
    assert any(line.startswith(f"{GENERATOR}:") and "missing" in line and "AutoTokenizer" in line
               for line in text.stdout.splitlines())


def test_scan_exit_status_clean_and_bad_path(run_cli, tmp_path):
    """A folder whose calls all pass the flag exits 0; a path that does not exist is a one-line error, exit 2."""
    (tmp_path / "good.py").write_text(
        "from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained('m', trust_remote_code=True)\n"
    )
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00")
    clean = run_cli("scan", str(tmp_path), "--format", "json")
    assert clean.exit_status == 0, clean.stderr
    data = json.loads(clean.stdout)
    assert [s["state"] for s in data["sites"]] == ["ok"]
    assert [e["path"] for e in data["errors"]] == ["binary.py"]

    bad = run_cli("scan", str(tmp_path / "nope"))
    assert bad.exit_status == 2
    assert bad.stderr.splitlines()[0].startswith("envdoctor: error:") and "does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr


def remote_code_result(res) -> dict:
    host = json.loads(res.stdout)["hosts"][0]
    return next(r for r in host["results"] if r["id"] == "code.trust-remote-code")


def test_check_over_ssh_warns_then_fails_with_trust_remote_code(run_cli, sshd, speculators_venv):
    """check on the sshd host warns about the gap; with --trust-remote-code it fails, naming file:line and callee."""
    args = ["check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(speculators_venv),
            "--only", "code.trust-remote-code", "--format", "json"]
    warn = run_cli(*args)
    assert warn.exit_status == 0, warn.stdout + warn.stderr
    result = remote_code_result(warn)
    assert result["status"] == "warn"
    gap = f"speculators/{GENERATOR}:84 transformers.AutoTokenizer.from_pretrained (missing)"
    assert gap in result["message"]
    (speculators,) = [d for d in result["details"]["distributions"] if d["name"] == "speculators"]
    assert speculators["reason"] == "depends on transformers, vllm (extra datagen)"
    assert 0 < speculators["matched"] < speculators["files"]  # only filtered files travelled
    ok = [s for s in result["details"]["sites"] if s["state"] == "ok" and s["path"] == f"speculators/{GENERATOR}"]
    assert ok and ok[0]["callee"] == "transformers.AutoConfig.from_pretrained"

    fail = run_cli(*args, "--trust-remote-code")
    assert fail.exit_status == 1
    assert remote_code_result(fail)["status"] == "fail"
    assert gap in remote_code_result(fail)["message"]


def test_check_scan_option_adds_a_distribution(run_cli, sshd, speculators_venv):
    """--scan DIST adds an installed distribution that does not depend on transformers."""
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(speculators_venv),
                  "--only", "code.trust-remote-code", "--scan", "packaging", "--format", "json")
    details = remote_code_result(res)["details"]
    reasons = {d["name"]: d["reason"] for d in details["distributions"]}
    assert reasons == {"packaging": "named", "speculators": "depends on transformers, vllm (extra datagen)"}


def test_check_scan_of_a_name_not_installed_is_a_usage_error(run_cli, sshd, speculators_venv):
    """--scan DIST naming nothing installed on the host checked: one-line error, exit 2, no traceback."""
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(speculators_venv),
                  "--only", "code.trust-remote-code", "--scan", "no-such-dist", "--format", "json")
    assert res.exit_status == 2, res.stdout + res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith("envdoctor: error: --scan no-such-dist: not installed on any host checked")
    assert "Traceback" not in res.stderr


def test_scan_of_a_named_file_that_cannot_be_read_as_python_is_bad_input(run_cli, tmp_path):
    """A file named on the command line that does not parse, or is not UTF-8, is a one-line
    error with exit 2; the same file inside a scanned folder is only listed among the errors."""
    (tmp_path / "broken.py").write_text("from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained('m'\n")
    (tmp_path / "latin.py").write_bytes(b"from transformers import AutoTokenizer\nx = '\xe9'\n")
    for name, says in (("broken.py", "does not parse"), ("latin.py", "not UTF-8")):
        res = run_cli("scan", str(tmp_path / name))
        assert res.exit_status == 2, res.stdout
        first = res.stderr.splitlines()[0]
        assert first.startswith("envdoctor: error:") and name in first and says in first
        assert "Traceback" not in res.stderr and res.stdout == ""
    folder = run_cli("scan", str(tmp_path), "--format", "json")
    assert folder.exit_status == 0, folder.stderr
    assert sorted(e["path"] for e in json.loads(folder.stdout)["errors"]) == ["broken.py", "latin.py"]


def test_scan_reads_a_file_as_python_does(run_cli, tmp_path):
    """A coding declaration (PEP 263) makes latin-1 bytes valid Python: the file is scanned and
    its gap reported (exit 1), as the interpreter would run it; a declaration naming a codec
    Python does not know is a one-line error (exit 2)."""
    body = b"from transformers import AutoTokenizer\nx = '\xe9'\nAutoTokenizer.from_pretrained('m')\n"
    (tmp_path / "declared.py").write_bytes(b"# -*- coding: latin-1 -*-\n" + body)
    (tmp_path / "unknown.py").write_bytes(b"# coding: no-such-codec\n" + body)
    compile((tmp_path / "declared.py").read_bytes(), "declared.py", "exec")  # Python's own verdict
    res = run_cli("scan", str(tmp_path / "declared.py"), "--format", "json")
    assert res.exit_status == 1, res.stderr
    assert [(s["line"], s["state"]) for s in json.loads(res.stdout)["sites"]] == [(4, "missing")]
    res = run_cli("scan", str(tmp_path / "unknown.py"))
    assert res.exit_status == 2 and res.stdout == ""
    assert res.stderr.splitlines()[0] == (f"envdoctor: error: {tmp_path / 'unknown.py'}: "
                                          "bad coding declaration: unknown encoding: no-such-codec")
