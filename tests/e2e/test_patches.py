"""Patches on the real speculators 0.3.0 wheel, in a real venv, through the real sshd."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from envdoctor.patching.ledger import applied_patches, ledger_path, parse_ledger, unfinished
from envdoctor.patching.host import KILL_AFTER_INTENT_ENV
from tests.conftest import make_venv

pytestmark = pytest.mark.e2e

TOKENIZER = "speculators-tokenizer-trust-remote-code"
WORKER = "speculators-multimodal-decoder-layers"
GENERATOR_REL = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER_REL = "speculators/data_generation/custom_worker.py"
#: Files fix changes in 0.3.0: the two dedicated patches, and two loader calls the scanner finds.
GENERIC_RELS = ("speculators/model.py", "speculators/models/eagle3/core.py")
ONLY = ["--only", f"patch.{TOKENIZER}", "--only", f"patch.{WORKER}", "--only", "code.trust-remote-code"]


@pytest.fixture(scope="session")
def speculators_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real speculators 0.3.0 wheel from PyPI, downloaded once."""
    folder = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                    "speculators==0.3.0", "-d", str(folder)], check=True)
    return next(folder.glob("speculators-0.3.0-*.whl"))


@pytest.fixture(scope="module")
def spec_venv(tmp_path_factory: pytest.TempPathFactory, speculators_wheel: Path) -> Path:
    """A venv (path with a space) holding speculators 0.3.0 without its dependencies."""
    return make_venv(tmp_path_factory.mktemp("patch venvs") / "spec venv", [str(speculators_wheel)],
                     pip_args=["--no-deps", "--no-index"])


class Host:
    """The venv as the tests see it, plus the CLI arguments that reach it over SSH."""

    def __init__(self, venv: Path, wheel: Path, ssh_config: Path, run_cli) -> None:
        self.venv = venv
        self.wheel = wheel
        self.site = next(venv.glob("lib/python3*/site-packages"))
        self.args = ["--ssh-config", str(ssh_config), "--venv", str(venv), "--format", "json", *ONLY]
        self.run_cli = run_cli

    def reinstall(self) -> None:
        subprocess.run([str(self.venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--force-reinstall", "--no-deps", "--no-index", str(self.wheel)], check=True)

    def original(self, rel: str) -> bytes:
        with zipfile.ZipFile(self.wheel) as wheel:
            return wheel.read(rel)

    def file(self, rel: str) -> Path:
        return self.site / rel

    def ledger(self):
        path = Path(ledger_path(str(self.venv)))
        return parse_ledger(path.read_bytes().splitlines()) if path.exists() else []

    def cli(self, command: str, *extra: str, env: dict[str, str] | None = None):
        res = self.run_cli(command, "ct200", *extra, *self.args, env=env)
        return res, (json.loads(res.stdout) if res.stdout.startswith("{") else None)


@pytest.fixture
def host(spec_venv: Path, speculators_wheel: Path, sshd, run_cli) -> Host:
    """The venv with the wheel's own files and no ledger, for each test."""
    state = Host(spec_venv, speculators_wheel, sshd.ssh_config, run_cli)
    # Writing back the wheel's bytes is what a reinstall does to these files, in no time;
    # the reinstall test runs pip itself.
    for rel in (GENERATOR_REL, WORKER_REL, *GENERIC_RELS):
        state.file(rel).write_bytes(state.original(rel))
    shutil.rmtree(spec_venv / ".envdoctor", ignore_errors=True)
    return state


def results_by_id(results: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in results}


def done_applies(entries) -> list[tuple[str, str]]:
    return sorted((e.patch, e.file) for e in entries if e.op == "apply" and e.phase == "done")


def test_dry_run_shows_diffs_and_changes_nothing(host):
    """fix --dry-run shows each patch's unified diff and leaves every file and the ledger alone."""
    res, data = host.cli("fix", "--dry-run", "--trust-remote-code")
    assert res.exit_status == 1, res.stderr
    diffs = "".join(a.get("diff", "") for a in data["hosts"][0]["actions"])
    assert "+        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)" in diffs
    assert '+        if hasattr(model, "language_model"):' in diffs
    for rel in (GENERATOR_REL, WORKER_REL, *GENERIC_RELS):
        assert host.file(rel).read_bytes() == host.original(rel)
    assert not (host.venv / ".envdoctor").exists()


def test_fix_patches_records_compiles_and_second_fix_does_nothing(host):
    """fix patches all gaps, records each in the ledger, the files compile; a second fix does nothing."""
    res, data = host.cli("fix", "--trust-remote-code")
    assert res.exit_status == 0, res.stdout + res.stderr
    results = results_by_id(data["hosts"][0]["results"])
    assert results[f"patch.{TOKENIZER}"]["details"]["state"] == "applied"
    assert results[f"patch.{WORKER}"]["status"] == "pass"
    assert results["code.trust-remote-code"]["status"] == "pass"
    entries = host.ledger()
    expected = {(TOKENIZER, GENERATOR_REL), (WORKER, WORKER_REL)} | {("trust-remote-code", r) for r in GENERIC_RELS}
    assert done_applies(entries) == sorted((p, str(host.file(r))) for p, r in expected)
    assert unfinished(entries) == []
    for _, rel in expected:
        subprocess.run([str(host.venv / "bin" / "python"), "-m", "py_compile", str(host.file(rel))], check=True)
    generator = host.file(GENERATOR_REL).read_text()
    assert "        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)\n" in generator
    worker = host.file(WORKER_REL).read_text()
    assert ('        if hasattr(model, "language_model"):\n'
            "            base_model = model.language_model.model\n"
            "        else:\n"
            "            base_model = model.model  # type: ignore[attr-defined]\n") in worker

    again, data = host.cli("fix", "--trust-remote-code")
    assert again.exit_status == 0
    assert data["hosts"][0]["actions"] == []
    assert len(host.ledger()) == len(entries)


def test_without_consent_fix_leaves_loader_calls_alone(host):
    """Without --trust-remote-code fix applies the layer patch only; loader calls stay as shipped."""
    res, data = host.cli("fix")
    assert res.exit_status == 0, res.stdout + res.stderr
    results = results_by_id(data["hosts"][0]["results"])
    assert results[f"patch.{TOKENIZER}"]["status"] == "warn"
    assert results[f"patch.{TOKENIZER}"]["remedy"]["automatic"] is False
    assert host.file(GENERATOR_REL).read_bytes() == host.original(GENERATOR_REL)
    assert done_applies(host.ledger()) == [(WORKER, str(host.file(WORKER_REL)))]


def test_reinstall_brings_the_gap_back_and_check_notices(host):
    """After pip --force-reinstall the patch is pending again, though the ledger still lists it."""
    assert host.cli("fix", "--trust-remote-code")[0].exit_status == 0
    host.reinstall()
    res, data = host.cli("check", "--trust-remote-code")
    assert res.exit_status == 1
    results = results_by_id(data["hosts"][0]["results"])
    assert results[f"patch.{TOKENIZER}"]["details"]["state"] == "pending"
    assert results[f"patch.{WORKER}"]["status"] == "fail"
    assert results["code.trust-remote-code"]["status"] == "fail"
    assert applied_patches(host.ledger())  # the record is there; the file no longer matches it


def test_two_concurrent_fixes_leave_one_clean_patch(host, run_cli, test_env):
    """Two fix runs at once: each file is patched once, recorded once, and reads right."""
    argv = [sys.executable, "-m", "envdoctor", "fix", "ct200", "--trust-remote-code", *host.args]
    procs = [subprocess.Popen(argv, env=test_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    entries = host.ledger()
    applies = done_applies(entries)
    assert len(applies) == len(set(applies)) == 2 + len(GENERIC_RELS)
    assert unfinished(entries) == []
    assert "from_pretrained(model_path, trust_remote_code=True)" in host.file(GENERATOR_REL).read_text()
    assert host.file(GENERATOR_REL).read_text().count("trust_remote_code=True") == 3


def test_killed_fix_is_completed_by_the_next(host):
    """A fix killed after its intent lines leaves originals; the next fix finishes, each file once."""
    res, data = host.cli("fix", "--trust-remote-code", env={KILL_AFTER_INTENT_ENV: "1"})
    assert res.exit_status == 1
    assert not any(a["exit_status"] == 0 for a in data["hosts"][0]["actions"])
    assert len(unfinished(host.ledger())) >= 1
    assert host.file(GENERATOR_REL).read_bytes() == host.original(GENERATOR_REL)

    res, _ = host.cli("fix", "--trust-remote-code")
    assert res.exit_status == 0, res.stdout + res.stderr
    entries = host.ledger()
    assert unfinished(entries) == []
    assert len(done_applies(entries)) == 2 + len(GENERIC_RELS)


def test_revert_restores_the_original_bytes(host, sshd, run_cli):
    """revert HOST PATCH puts back the wheel's bytes of that patch's file only, and records it."""
    assert host.cli("fix", "--trust-remote-code")[0].exit_status == 0
    base = ["--ssh-config", str(sshd.ssh_config), "--venv", str(host.venv)]
    res = run_cli("revert", "ct200", TOKENIZER, *base, "--format", "json")
    assert res.exit_status == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["hosts"][0]["files"][0]["result"] == "reverted"
    assert host.file(GENERATOR_REL).read_bytes() == host.original(GENERATOR_REL)
    assert host.file(WORKER_REL).read_bytes() != host.original(WORKER_REL)  # other patches stay
    entries = host.ledger()
    assert (TOKENIZER, str(host.file(GENERATOR_REL))) not in applied_patches(entries)
    assert [(e.op, e.phase) for e in entries[-2:]] == [("revert", "intent"), ("revert", "done")]


def test_file_edited_by_hand_is_a_conflict_fix_does_not_touch(host):
    """A file changed by someone else is reported as a conflict and fix leaves it as it is."""
    edited = host.original(GENERATOR_REL) + b"# local hotfix\n"
    host.file(GENERATOR_REL).write_bytes(edited)
    res, data = host.cli("fix", "--trust-remote-code")
    assert res.exit_status == 1
    result = results_by_id(data["hosts"][0]["results"])[f"patch.{TOKENIZER}"]
    assert result["details"]["state"] == "conflict"
    assert result["remedy"]["automatic"] is False and "--force-reinstall" in result["remedy"]["argv"]
    assert host.file(GENERATOR_REL).read_bytes() == edited
