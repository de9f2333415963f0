"""code.api-drift and `envdoctor drift` on real code: speculators 0.3.0 against vLLM 0.16.0 and 0.11.0.

speculators is installed from its wheel with --no-deps; vLLM's .py files come from its sdist
(see tests/drift_sources.py). The drift section runs on the host through the real sshd.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_venv
from tests.drift_sources import download_sdist, download_wheel, install_sdist_sources, site_packages

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
#: The findings the issue names, checked by hand against vLLM 0.16.0's source:
#: kv_cache_utils.py:1069 dropped kv_cache_specs, sched/scheduler.py:64 added block_size,
#: config/scheduler.py:35 made is_encoder_decoder an InitVar without a default.
EXPECTED_0_16 = {
    (GENERATOR, 136): ("get_kv_cache_config_from_groups", "kv_cache_specs", "vllm/v1/core/kv_cache_utils.py:1069"),
    (GENERATOR, 148): ("Scheduler", "block_size", "vllm/v1/core/sched/scheduler.py:64"),
    (GENERATOR, 194): ("SchedulerConfig", "is_encoder_decoder", "vllm/config/scheduler.py:26"),
}


@pytest.fixture(scope="session")
def drift_venvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real venvs: speculators 0.3.0 (--no-deps) beside vLLM 0.16.0's and 0.11.0's sources."""
    downloads = tmp_path_factory.mktemp("drift-downloads")
    root = tmp_path_factory.mktemp("drift-venvs")
    wheel = download_wheel("speculators==0.3.0", downloads)
    venvs = {}
    for version in ("0.16.0", "0.11.0"):
        venv = make_venv(root / f"spec-vllm-{version}")
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                        "--disable-pip-version-check", str(wheel)], check=True)
        install_sdist_sources(download_sdist("vllm", version, downloads), site_packages(venv), "vllm", version)
        venvs[version] = venv
    return venvs


def drift_json(run_cli, *args: str) -> tuple[int, dict]:
    res = run_cli("drift", *args, "--format", "json")
    assert res.exit_status in (0, 1), res.stderr
    return res.exit_status, json.loads(res.stdout)


def test_drift_over_ssh_reports_the_three_vllm_016_breaks_and_nothing_on_0110(run_cli, sshd, drift_venvs):
    """Over the real sshd: exactly the three known errors against vLLM 0.16.0, none against 0.11.0."""
    status, doc = drift_json(run_cli, "ct200", "--ssh-config", str(sshd.ssh_config), "--venv",
                             str(drift_venvs["0.16.0"]), "--no-cache")
    assert status == 1 and doc["command"] == "drift" and doc["exit_status"] == 1 and doc["schema"] == 1
    pair = next(p for p in doc["pairs"] if p["consumer"] == "speculators" and p["provider"] == "vllm")
    assert (pair["consumer_version"], pair["provider_version"]) == ("0.3.0", "0.16.0")
    errors = {(f["path"], f["line"]): f for f in pair["findings"] if f["severity"] == "error"}
    assert set(errors) == set(EXPECTED_0_16)
    for key, (callee, word, definition) in EXPECTED_0_16.items():
        assert errors[key]["use"].startswith(callee + "(") and word in errors[key]["why"]
        assert errors[key]["definition"] == definition
    assert "vllm==0.11.0" in pair["remedy"]

    status, doc = drift_json(run_cli, "ct200", "--ssh-config", str(sshd.ssh_config), "--venv",
                             str(drift_venvs["0.11.0"]), "--no-cache")
    assert status == 0 and doc["exit_status"] == 0
    pair = next(p for p in doc["pairs"] if p["provider"] == "vllm")
    assert pair["errors"] == 0 and pair["uses"] > 30


def test_recheck_of_an_unchanged_venv_is_answered_from_the_host_cache(run_cli, drift_venvs):
    """The second run reads the owner-only cache in <venv>/.envdoctor; a touched file invalidates it."""
    venv = drift_venvs["0.16.0"]
    first = drift_json(run_cli, "local", "--venv", str(venv))[1]
    second = drift_json(run_cli, "local", "--venv", str(venv))[1]
    assert second["hosts"][0]["stats"]["cache"] == "hit"
    assert first["pairs"][0]["findings"] == second["pairs"][0]["findings"]
    cache = venv / ".envdoctor" / "drift-cache"
    assert cache.stat().st_mode & 0o077 == 0
    scheduler = site_packages(venv) / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    scheduler.write_bytes(scheduler.read_bytes())  # new mtime, same content
    third = drift_json(run_cli, "local", "--venv", str(venv))[1]
    assert third["hosts"][0]["stats"]["cache"] == "miss"


def test_check_runs_code_api_drift_and_text_report_groups_by_pair(run_cli, drift_venvs):
    """`check --only code.api-drift` fails with the pair's headline; `drift` text names the pair."""
    venv = str(drift_venvs["0.16.0"])
    res = run_cli("check", "local", "--venv", venv, "--only", "code.api-drift", "--format", "json")
    result = next(r for r in json.loads(res.stdout)["hosts"][0]["results"] if r["id"] == "code.api-drift")
    assert res.exit_status == 1 and result["status"] == "fail"
    assert "speculators 0.3.0 → vllm 0.16.0: 3 errors" in result["message"]
    text = run_cli("drift", "local", "--venv", venv)
    assert text.exit_status == 1 and "speculators 0.3.0 → vllm 0.16.0: 3 errors" in text.stdout
    assert "fix (by hand)" in text.stdout


def test_entry_scope_reads_only_what_the_entry_imports(run_cli, drift_venvs):
    """--entry limits the consumer files to the entry's imports: a module that never reaches
    the generator reports nothing; the generator's package reports its errors."""
    venv = str(drift_venvs["0.16.0"])
    _, doc = drift_json(run_cli, "local", "--venv", venv, "--entry", "speculators.config", "--no-cache")
    assert not any(p["errors"] for p in doc["pairs"])
    status, doc = drift_json(run_cli, "local", "--venv", venv, "--entry", "speculators.data_generation", "--no-cache")
    assert status == 1 and sum(p["errors"] for p in doc["pairs"]) == 3


def test_bad_arguments_are_usage_errors(run_cli, drift_venvs):
    """--entry with --stage, or an unknown stage, is exit 2 with a one-line error."""
    venv = str(drift_venvs["0.16.0"])
    res = run_cli("drift", "local", "--venv", venv, "--entry", "x", "--stage", "gen")
    assert res.exit_status == 2 and "Traceback" not in res.stderr
    res = run_cli("drift", "local", "--venv", venv, "--stage", "nope")
    assert res.exit_status == 2 and "no stage named" in res.stderr
