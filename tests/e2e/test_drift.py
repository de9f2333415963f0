"""code.api-drift and `envdoctor drift` on real code: speculators 0.3.0 against vLLM 0.16.0 and 0.11.0.

speculators is installed from its wheel with --no-deps; vLLM's .py files come from its sdist
(see tests/drift_sources.py). The drift section runs on the host through the real sshd.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import venv as venv_module
from pathlib import Path

import pytest

from tests import host_roots
from tests.conftest import make_venv
from tests.drift_sources import (
    download_sdist,
    download_wheel,
    install_sdist_sources,
    install_wheel_sources,
    site_packages,
)

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
#: The venvs where speculators is installed by pip itself (--no-deps); the others are laid out.
PIP_INSTALLED = ("0.16.0", "0.11.0")
#: Venvs of two wheels each, laid out from the wheels' .py files and dist-info.
WHEEL_PAIRS = {"sglang": ("sglang==0.5.3", "flashinfer-python==0.7.4"), "trl": ("trl==0.21.0", "transformers==5.24.0")}
#: The findings the issue names, checked by hand against vLLM 0.16.0's source:
#: kv_cache_utils.py:1069 dropped kv_cache_specs, sched/scheduler.py:64 added block_size,
#: config/scheduler.py:35 made is_encoder_decoder an InitVar without a default.
EXPECTED_0_16 = {
    (GENERATOR, 136): ("get_kv_cache_config_from_groups", "kv_cache_specs", "vllm/v1/core/kv_cache_utils.py:1069"),
    (GENERATOR, 148): ("Scheduler", "block_size", "vllm/v1/core/sched/scheduler.py:64"),
    (GENERATOR, 194): ("SchedulerConfig", "is_encoder_decoder", "vllm/config/scheduler.py:26"),
}


@pytest.fixture(scope="session")
def drift_venv(tmp_path_factory: pytest.TempPathFactory):
    """venv(key) -> a real venv, built once per session: "0.16.0", "0.11.0", "0.33.0" hold
    speculators 0.3.0 (--no-deps) beside that vLLM's sources; "sglang" and "trl" hold the
    .py files and dist-info of the wheels WHEEL_PAIRS names (sglang's pair is about 100 MB
    of downloads, unpacked without their compiled parts)."""
    downloads = tmp_path_factory.mktemp("drift-downloads")
    root = tmp_path_factory.mktemp("drift-venvs")
    built: dict[str, Path] = {}

    def get(key: str) -> Path:
        if key in built:
            return built[key]
        if key in PIP_INSTALLED:
            venv = make_venv(root / key)
            wheel = download_wheel("speculators==0.3.0", downloads)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                            "--disable-pip-version-check", str(wheel)], check=True)
        else:  # no pip needed: the wheels are unpacked as pip would lay them out (seconds, not a minute)
            venv = root / key
            venv_module.EnvBuilder(with_pip=False, clear=True).create(venv)
        if key in WHEEL_PAIRS:
            for requirement in WHEEL_PAIRS[key]:
                install_wheel_sources(download_wheel(requirement, downloads), site_packages(venv))
        else:
            if key not in PIP_INSTALLED:
                install_wheel_sources(download_wheel("speculators==0.3.0", downloads), site_packages(venv))
            install_sdist_sources(download_sdist("vllm", key, downloads), site_packages(venv), "vllm", key)
        built[key] = venv
        return venv

    return get


@pytest.fixture(scope="session")
def drift_venvs(drift_venv) -> dict[str, Path]:
    """speculators 0.3.0 beside vLLM 0.16.0 and beside vLLM 0.11.0."""
    return {"0.16.0": drift_venv("0.16.0"), "0.11.0": drift_venv("0.11.0")}


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
    """The second run reads the owner-only cache in ~/.cache/envdoctor (nothing is written inside
    the venv); a touched file invalidates it."""
    venv = drift_venvs["0.16.0"]
    first = drift_json(run_cli, "local", "--venv", str(venv))[1]
    second = drift_json(run_cli, "local", "--venv", str(venv))[1]
    assert second["hosts"][0]["stats"]["cache"] == "hit"
    assert first["pairs"][0]["findings"] == second["pairs"][0]["findings"]
    from envdoctor.probe.host.drift import section as probe_drift

    cache = Path(probe_drift.drift_cache_folder(str(venv))) / probe_drift.DRIFT_CACHE_NAME
    assert cache.stat().st_mode & 0o077 == 0
    assert not (venv / ".envdoctor").exists()
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
    """--entry with --stage, an unknown stage, or a relative --baseline is exit 2 with a one-line error."""
    venv = str(drift_venvs["0.16.0"])
    res = run_cli("drift", "local", "--venv", venv, "--entry", "x", "--stage", "gen")
    assert res.exit_status == 2 and "Traceback" not in res.stderr
    res = run_cli("drift", "local", "--venv", venv, "--stage", "nope")
    assert res.exit_status == 2 and "no stage named" in res.stderr
    res = run_cli("drift", "local", "--venv", venv, "--baseline", "venv_old")
    assert res.exit_status == 2 and "--baseline 'venv_old' is not an absolute path" in res.stderr


def errors_of(doc: dict, provider: str) -> dict[tuple[str, int], dict]:
    pair = next(p for p in doc["pairs"] if p["provider"] == provider)
    return {(f["path"], f["line"]): f for f in pair["findings"] if f["severity"] == "error"}


def test_vllm_033_drops_three_kv_cache_names_and_request_eos_token_id(run_cli, drift_venv):
    """Against vLLM 0.33.0: the three kv_cache_utils imports are gone and Request(eos_token_id=) is unknown."""
    _, doc = drift_json(run_cli, "local", "--venv", str(drift_venv("0.33.0")), "--no-cache")
    errors = errors_of(doc, "vllm")
    pair = next(p for p in doc["pairs"] if p["provider"] == "vllm")
    imports = sorted(f["use"] for f in pair["findings"] if f["severity"] == "error" and f["line"] == 15)
    assert imports == [f"from vllm.v1.core.kv_cache_utils import {n}" for n in
                       ("_get_kv_cache_groups_uniform_spec", "get_kv_cache_config_from_groups", "unify_hybrid_kv_cache_specs")]
    assert "eos_token_id" in errors[(GENERATOR, 234)]["why"]


def test_sglang_053_against_flashinfer_074(run_cli, drift_venv):
    """The removed tile_tokens_dim keyword (fp4 and fp8 MoE) and the removed permute-indices helper."""
    _, doc = drift_json(run_cli, "local", "--venv", str(drift_venv("sglang")), "--provider", "flashinfer-python")
    errors = errors_of(doc, "flashinfer-python")
    assert "tile_tokens_dim" in errors[("sglang/srt/layers/moe/fused_moe_triton/layer.py", 1035)]["why"]
    assert "tile_tokens_dim" in errors[("sglang/srt/layers/quantization/fp8.py", 1144)]["why"]
    gone = errors[("sglang/srt/layers/quantization/modelopt_quant.py", 1082)]
    assert gone["use"].endswith("import _maybe_get_cached_w2_permute_indices")


def test_stage_entry_scopes_the_check_to_what_the_stage_runs(run_cli, drift_venvs, tmp_path):
    """--stage reads the stage's `-m module` and checks only what it imports, on the stage's host."""
    venv = drift_venvs["0.16.0"]
    config = tmp_path / "envdoctor.toml"
    config.write_text(f"""
[hosts.node]
ssh = "local"
venv = {json.dumps(str(venv))}

[stages.convert]
host = "node"
command = "{{python}} -m speculators.config --help"

[stages.gen]
host = "node"
command = "{{python}} -m speculators.data_generation --model {{model}}"
""", encoding="utf-8")
    config.chmod(0o600)
    res = run_cli("drift", "--config", str(config), "--stage", "convert", "--format", "json", "--no-cache")
    doc = json.loads(res.stdout)
    assert res.exit_status == 0, res.stderr
    assert doc["hosts"][0]["host"] == "node" and doc["hosts"][0]["stats"]["entry"] == "speculators.config"
    res = run_cli("drift", "--config", str(config), "--stage", "gen", "--format", "json", "--no-cache")
    assert res.exit_status == 1 and sum(p["errors"] for p in json.loads(res.stdout)["pairs"]) == 3


def test_trl_021_imports_a_mapping_transformers_524_no_longer_has(run_cli, drift_venv):
    """trl 0.21.0's DPO trainer imports MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES, gone from transformers 5.24.0."""
    _, doc = drift_json(run_cli, "local", "--venv", str(drift_venv("trl")), "--provider", "transformers")
    errors = errors_of(doc, "transformers")
    assert errors[("trl/trainer/dpo_trainer.py", 52)]["use"].endswith("import MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES")


def stage_inventory(path: Path, venv: Path, hosts: dict[str, dict[str, tuple[list[str], str]]]) -> Path:
    """An inventory of hosts reached through the sshd alias ct200, each with the stages given."""
    lines: list[str] = []
    for host, stages in hosts.items():
        lines += [f"[hosts.{host}]", 'ssh = "ct200"', f"venv = {json.dumps(str(venv))}"]
        for name, (requires, command) in stages.items():
            lines += [f"[stages.{name}]", f"host = {json.dumps(host)}", f"requires = {json.dumps(requires)}",
                      f"command = {json.dumps(command)}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def test_check_follows_the_entry_of_the_hosts_stage_over_ssh(run_cli, sshd, drift_venvs, tmp_path):
    """Over the real sshd: a host whose stage runs speculators.config passes and says so; the same
    venv on a host with no stage reports the generator's three errors."""
    config = stage_inventory(tmp_path / "envdoctor.toml", drift_venvs["0.16.0"], {
        "scoped": {"convert": ([], "{python} -m speculators.config --help")}, "whole": {}})
    res = run_cli("check", "scoped", "whole", "--config", str(config), "--ssh-config", str(sshd.ssh_config),
                  "--only", "code.api-drift", "--format", "json")
    assert res.exit_status == 1, res.stderr
    results = {h["host"]: next(r for r in h["results"] if r["id"] == "code.api-drift")
               for h in json.loads(res.stdout)["hosts"]}
    assert results["scoped"]["status"] == "pass"
    assert "scoped to the host's stage entry speculators.config" in results["scoped"]["message"]
    assert results["scoped"]["details"]["scope"]["entries"] == ["speculators.config"]
    assert results["whole"]["status"] == "fail"
    assert "speculators 0.3.0 → vllm 0.16.0: 3 errors" in results["whole"]["message"]
    assert "scoped" not in results["whole"]["message"]


def test_run_follows_only_the_stage_it_starts(run_cli, sshd, drift_venvs, tmp_path):
    """`run` checks the entry of the stage it starts, not its host's other stages: a script that
    never reaches the generator runs; the generator's stage is refused on code.api-drift."""
    script = tmp_path / "job.py"
    script.write_text("import sys\nif len(sys.argv) > 9:\n    import speculators.config\nprint('job ran')\n",
                      encoding="utf-8")
    config = stage_inventory(tmp_path / "envdoctor.toml", drift_venvs["0.16.0"], {"node": {
        "job": (["code.api-drift"], f"{{python}} {script}"),
        "gen": (["code.api-drift"], "{python} -m speculators.data_generation --model {model}")}})
    res = run_cli("run", "node", "job", "--config", str(config), "--ssh-config", str(sshd.ssh_config))
    assert res.exit_status == 0 and "job ran" in res.stdout, res.stderr
    res = run_cli("run", "node", "gen", "--config", str(config), "--ssh-config", str(sshd.ssh_config))
    assert res.exit_status == 1 and "failing checks: code.api-drift" in res.stderr


@pytest.fixture()
def discovered_old_vllm(drift_venvs) -> Path:
    """/opt/<unique>/venv, a discovery root, pointing at the venv of vLLM 0.11.0 (only for one test)."""
    with host_roots.exclusive():
        root = host_roots.plant_folder("drift")
        root.mkdir()
        (root / "venv").symlink_to(drift_venvs["0.11.0"])
        yield root / "venv"
        shutil.rmtree(root)


def test_the_pinned_vllm_in_another_venv_confirms_the_three_breaks(run_cli, sshd, drift_venvs, discovered_old_vllm):
    """speculators pins vllm==0.11.0 [datagen]: with 0.11.0 in another venv of the host (named, or
    discovered) the three 0.16.0 errors stay errors, each marked as resolving against 0.11.0."""
    status, doc = drift_json(run_cli, "ct200", "--ssh-config", str(sshd.ssh_config), "--venv",
                             str(drift_venvs["0.16.0"]), "--baseline", str(drift_venvs["0.11.0"]), "--no-cache")
    pair = next(p for p in doc["pairs"] if p["consumer"] == "speculators" and p["provider"] == "vllm")
    assert status == 1 and pair["known_good"]["version"] == "0.11.0"
    assert pair["known_good"]["prefix"] == str(drift_venvs["0.11.0"]) and pair["known_good"]["extra"] == "datagen"
    errors = {(f["path"], f["line"]): f for f in pair["findings"] if f["severity"] == "error"}
    assert set(errors) == set(EXPECTED_0_16)
    for finding in errors.values():
        assert finding["why"].endswith("resolves against vllm 0.11.0 (pinned by speculators [datagen]); "
                                       "breaks against 0.16.0")
    res = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(drift_venvs["0.16.0"]),
                  "--only", "code.api-drift", "--format", "json")
    result = next(r for r in json.loads(res.stdout)["hosts"][0]["results"] if r["id"] == "code.api-drift")
    assert result["status"] == "fail" and "speculators 0.3.0 → vllm 0.16.0: 3 errors" in result["message"]
    pair = next(p for p in result["details"]["pairs"] if p["provider"] == "vllm")
    assert pair["known_good"]["prefix"] == str(discovered_old_vllm) and pair["errors"] == 3
    assert "resolves against vllm 0.11.0" in result["message"]


def test_names_a_module_sets_on_itself_at_import_are_not_missing(run_cli, tmp_path):
    """numpy.dtypes gets its DType classes from setattr at import time: a consumer naming them
    runs (the interpreter is the oracle) and drift finds no error in it."""
    venv = make_venv(tmp_path / "np venv", ["numpy>=1.25"])
    site = site_packages(venv)
    (site / "cons").mkdir()
    (site / "cons" / "__init__.py").write_text(
        "import numpy as np\nSAFE = [np.dtypes.UInt32DType, np.dtypes.Float64DType]\n")
    info = site / "cons-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cons\nVersion: 0.1\nRequires-Dist: numpy\n")
    (info / "RECORD").write_text("cons/__init__.py,,\ncons-0.1.dist-info/METADATA,,\ncons-0.1.dist-info/RECORD,,\n")
    subprocess.run([str(venv / "bin" / "python"), "-c", "import cons"], check=True)  # the oracle
    status, doc = drift_json(run_cli, "local", "--venv", str(venv), "--drift", "cons", "--provider", "numpy",
                             "--no-cache")
    pair = next(p for p in doc["pairs"] if p["consumer"] == "cons" and p["provider"] == "numpy")
    assert [f for f in pair["findings"] if f["severity"] == "error"] == [], pair
    assert status == 0
