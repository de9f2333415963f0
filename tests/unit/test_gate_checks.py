"""Waivers, drafter purpose, GPU expectations, disk filesystems and pip-check consistency, as
pure functions over in-memory facts (the real-tool comparisons are in tests/e2e/test_gates.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from envdoctor.install.consistency import check_environment
from envdoctor.errors import ConfigError
from envdoctor.engine.facts import Distribution
from envdoctor.engine.graph import load_checks
from envdoctor.inventory import HostSpec, Stage, load_inventory, stage_trains_drafter
from envdoctor.engine.results import Status
from tests.unit.fakes import dist, env, facts

GRAPH = load_checks()
SITE = "/v/lib/python3.11/site-packages"


def evaluate(spec: HostSpec, host_facts):
    return {r.id: r for r in GRAPH.evaluate(spec, host_facts)}


def test_waived_failure_reports_waived_with_reason_and_dependents_still_run():
    """A waived failing check is `waived` with the reason and what it found; checks after it still run."""
    venv = env("/v", dist("lib", "1.0", "missingdep"))
    spec = HostSpec("h", None, venv="/v", requires=("lib",), skip=(("python.venv", "testing"),
                                                                   ("packages.consistent", "no-deps on purpose")))
    results = evaluate(spec, facts(venv))
    consistent = results["packages.consistent"]
    assert consistent.status is Status.WAIVED
    assert consistent.message.startswith("waived (no-deps on purpose): fail:")
    assert consistent.details["waived_status"] == "fail" and consistent.remedy is None
    assert not consistent.status.is_problem
    assert results["python.venv"].status is Status.WAIVED
    assert results["packages.required"].status is Status.PASS  # depends on the waived python.venv: still ran


def test_inventory_skip_accepts_ids_and_tables_and_rejects_bad_shapes(tmp_path):
    """skip = ["ID", {id, reason}] per host and stage; a waiver of another shape is a one-line ConfigError."""
    path = tmp_path / "envdoctor.toml"
    path.write_text('[hosts.a]\nskip = ["host.gpu", {id = "model.mask-token", reason = "serving only"}]\ngpus = 8\n'
                    '[stages.gen]\ncommand = "{python} -V"\nskip = ["packages.consistent"]\n')
    inv = load_inventory(path)
    assert inv.hosts["a"].skip == (("host.gpu", f"waived in {path}"), ("model.mask-token", "serving only"))
    assert inv.hosts["a"].gpus == 8
    assert inv.stages["gen"].skip == (("packages.consistent", f"waived for stage gen in {path}"),)
    for bad in ('skip = [{reason = "x"}]', "skip = [3]", 'skip = [{id = "a", why = "b"}]', "gpus = true",
                'gpus = "8"', "gpus = -1", "skip = \"host.gpu\""):
        path.write_text(f"[hosts.a]\n{bad}\n")
        with pytest.raises(ConfigError) as info:
            load_inventory(path)
        assert "\n" not in str(info.value) and "hosts.a" in str(info.value)


def test_stage_asks_for_drafter_facts_by_check_or_placeholder():
    """A stage trains a drafter when it requires model.mask-token or uses a mask/DFlash placeholder."""
    assert stage_trains_drafter(Stage("t", "", ("model.mask-token",), "{python} train.py"))
    assert stage_trains_drafter(Stage("t", "", (), "{python} train.py --mask {mask_token_id}"))
    assert stage_trains_drafter(Stage("t", "", (), "{python} t.py --layers {dflash_target_layer_ids}"))
    assert not stage_trains_drafter(Stage("s", "", ("packages.required",), "{python} -m sglang.launch_server {model}"))


def gpu_facts(**gpu):
    host_facts = facts(env("/v"))
    return replace(host_facts, **gpu)


@pytest.mark.parametrize(("gpu", "expected", "status"), [
    ({}, None, Status.SKIPPED),
    ({}, 8, Status.FAIL),
    ({"nvidia_smi": "/usr/bin/nvidia-smi", "gpu_error": "Failed to initialize NVML: Driver/library version mismatch"},
     None, Status.WARN),
    ({"nvidia_smi": "/usr/bin/nvidia-smi", "gpu_error": "NVML mismatch"}, 2, Status.FAIL),
    ({"nvidia_smi": "/usr/bin/nvidia-smi", "gpus": ("GPU 0: H100 (UUID: a)",)}, 2, Status.FAIL),
    ({"nvidia_smi": "/usr/bin/nvidia-smi", "gpus": ("GPU 0: H100 (UUID: a)", "GPU 1: H100 (UUID: b)")}, 2, Status.PASS),
    ({"nvidia_smi": "/usr/bin/nvidia-smi", "gpus": ("GPU 0: H100 (UUID: a)",)}, None, Status.PASS),
])
def test_gpu_check_fails_only_against_an_expectation(gpu, expected, status):
    """host.gpu informs without `gpus`; with it, no driver, a failing nvidia-smi or too few GPUs fail."""
    result = evaluate(HostSpec("h", None, venv="/v", gpus=expected), gpu_facts(**gpu))["host.gpu"]
    assert result.status is status, result.message
    if status is Status.FAIL and expected:
        assert f"{expected} GPU(s) expected" in result.message


def test_disk_names_the_filesystem_of_the_venv_and_each_model():
    """host.disk groups the paths by filesystem and says which holds the venv and which the models."""
    gib = 1024**3
    host_facts = replace(facts(env("/v")), disk={
        "/root": {"free": 50 * gib, "total": 100 * gib, "mount": "/"},
        "/v": {"free": 50 * gib, "total": 100 * gib, "mount": "/"},
        "/data/K": {"free": gib // 2, "total": 1000 * gib, "mount": "/data"},
    })
    result = evaluate(HostSpec("h", None, venv="/v", models=("/data/K",)), host_facts)["host.disk"]
    assert result.status is Status.FAIL
    assert "/ (home, venv /v): 50.0 GiB free" in result.message
    assert "/data (model /data/K): 0.5 GiB free" in result.message
    assert "/data" in result.remedy.summary


def test_mask_token_informs_unless_a_drafter_is_trained(monkeypatch):
    """A tokenizer with no usable mask candidate fails model.mask-token only with --draft; else it informs."""
    import envdoctor.checks.models as models_checks
    import envdoctor.modelfacts.model as models
    from envdoctor.engine.graph import CheckContext
    from envdoctor.modelfacts.model import MaskChoice

    class NoMask:
        error = None
        path = "/m"
        json_files = {"tokenizer_config.json": {}}

        def architecture(self):
            return {"vocab_size": 4}

        def tokenizer(self):
            return None

    monkeypatch.setattr(models_checks, "per_model", lambda ctx, judge: judge(NoMask()))
    monkeypatch.setattr(models, "choose_mask_token",  # the check imports it when it judges
                        lambda tok, vocab: MaskChoice(None, None, "none", "no reserved id: the vocabulary must grow"))
    serving = models_checks.mask_token(CheckContext(HostSpec("h", None), facts()))
    drafting = models_checks.mask_token(CheckContext(HostSpec("h", None, draft=True), facts()))
    assert serving.status is Status.PASS and "drafter training" in serving.message
    assert drafting.status is Status.FAIL and "vocabulary must grow" in drafting.message


def _consistency(*dists: Distribution):
    return check_environment(env("/v", *dists))


def test_malformed_requires_dist_is_a_parse_error_naming_distribution_and_line():
    """A Requires-Dist pip cannot parse is pip's 'Error parsing dependencies', with the line; what
    requires that distribution then reads as not installed, as in pip."""
    found = _consistency(dist("bad", "1.0", "requests >>= 2"), dist("user", "1.0", "bad"))
    assert [e.name for e in found.parse_errors] == ["bad"]
    assert "Requires-Dist: requests >>= 2" in found.parse_errors[0].pip_line()
    assert [u.pip_line() for u in found.missing] == ["user 1.0 requires bad, which is not installed."]
    bad_version = _consistency(dist("odd", "banana"))
    assert "Version: banana" in bad_version.parse_errors[0].pip_line()


def test_duplicate_metadata_in_one_folder_names_both_and_uses_the_first_listed():
    """Two metadata folders of one distribution in one site folder: a finding naming both; the
    first in directory order is the version checked (as importlib.metadata returns it)."""
    first = Distribution("urllib3", "1.20", (), f"{SITE}/urllib3-1.20.dist-info", SITE)
    second = Distribution("urllib3", "2.2.0", (), f"{SITE}/urllib3-2.2.0.dist-info", SITE, active=False)
    found = _consistency(dist("requests", "2.32.0", "urllib3>=1.21.1"), first, second)
    assert [d.used.path for d in found.duplicates] == [first.path]
    assert first.path in found.duplicates[0].line() and second.path in found.duplicates[0].line()
    assert [u.pip_line() for u in found.conflicts] == [
        "requests 2.32.0 has requirement urllib3>=1.21.1, but you have urllib3 1.20."]
    other_site = replace(second, site="/u/site-packages", path="/u/site-packages/urllib3-2.2.0.dist-info")
    assert not _consistency(first, other_site).duplicates  # shadowing across sys.path is not a duplicate


def test_extra_in_use_must_be_satisfied_and_stays_apart_from_pip_check():
    """speculators [datagen] pins vllm==0.11.0: with vllm 0.16.0 installed it fails naming the extra,
    while pip check's own verdict (which ignores extras) stays clean."""
    spec = dist("speculators", "0.3.0", "pydantic", 'vllm==0.11.0; extra == "datagen"',
                'torch; extra == "dev"', 'pytest; extra == "dev"')
    found = _consistency(spec, dist("pydantic", "2.0"), dist("vllm", "0.16.0"), dist("torch", "2.0"))
    assert found.pip_ok and not found.ok
    assert [u.extra_line() for u in found.extras] == [
        "speculators 0.3.0 [datagen] requires vllm==0.11.0; 0.16.0 is installed"]
    assert not _consistency(spec, dist("pydantic", "2.0"), dist("vllm", "0.11.0")).extras
    assert not _consistency(spec, dist("pydantic", "2.0")).extras  # extra not in use: nothing installed
    result = evaluate(HostSpec("h", None, venv="/v"),
                      facts(env("/v", spec, dist("pydantic", "2.0"), dist("vllm", "0.16.0"))))["packages.consistent"]
    assert result.status is Status.FAIL
    assert result.message.split("\n") == [
        "pip check: no broken requirements in 3 distributions",
        "extras in use: speculators 0.3.0 [datagen] requires vllm==0.11.0; 0.16.0 is installed"]
    assert result.details["pip_check"]["ok"] is True


def test_extra_whose_packages_other_distributions_need_shows_no_use():
    """setuptools 47 pins certifi==2016.9.26 under its `certs` extra; the certifi requests needs
    is no sign of that extra in use. Asked for by name (`setuptools[certs]`) it is in use."""
    setuptools = dist("setuptools", "47.1.0", 'certifi==2016.9.26; extra == "certs"',
                      'wincertstore==0.2; sys_platform == "win32" and extra == "ssl"')
    requests = dist("requests", "2.32.0", "certifi>=2017.4.17")
    certifi = dist("certifi", "2026.10.19")
    assert _consistency(setuptools, requests, certifi).ok
    asking = dist("tool", "1.0", "setuptools[certs]")
    assert [u.extra_line() for u in _consistency(setuptools, requests, certifi, asking).extras] == [
        "setuptools 47.1.0 [certs] requires certifi==2016.9.26; 2026.10.19 is installed"]
    # speculators' datagen extra: vllm beside it for no other reason is its use; vllm that
    # another installed distribution needs is not.
    spec = dist("speculators", "0.3.0", 'vllm==0.11.0; extra == "datagen"')
    assert _consistency(spec, dist("vllm", "0.16.0")).extras
    assert not _consistency(spec, dist("vllm", "0.16.0"), dist("server", "1.0", "vllm>=0.15")).extras


def test_json_envelope_comes_first_and_cannot_be_overridden():
    """Every command's JSON starts with schema, envdoctor, command, exit_status; a body setting one fails loudly."""
    import json as json_module

    from envdoctor.report.envelope import dump_json, json_envelope

    data = json_envelope("drift", 1, {"pairs": []})
    assert list(data)[:4] == ["schema", "envdoctor", "command", "exit_status"]
    assert (data["schema"], data["command"], data["exit_status"], data["pairs"]) == (1, "drift", 1, [])
    assert list(json_module.loads(dump_json("facts", 0, {"b": 1, "a": 2}, sort_keys=True)))[4:] == ["a", "b"]
    with pytest.raises(ValueError):
        json_envelope("run", 0, {"command": "python -m x"})


def test_pth_paths_follow_site_rules_without_running_import_lines(tmp_path):
    """A .pth adds existing folders (absolute or relative to the site), in file-name order; comments,
    blank lines, missing folders, hidden files and `import` lines (code: never run) add nothing."""
    from envdoctor.probe.host.env.venvs import pth_paths, with_pth_paths

    site = tmp_path / "site-packages"
    site.mkdir()
    (tmp_path / "abs").mkdir()
    (site / "rel").mkdir()
    marker = tmp_path / "ran"
    (site / "b.pth").write_text(f"# comment\n\n{tmp_path / 'abs'}\nimport os; open({str(marker)!r}, 'w')\n")
    (site / "a.pth").write_text("rel\n/no/such/folder\n")
    (site / ".hidden.pth").write_text(f"{tmp_path}\n")
    assert pth_paths(str(site)) == [str(site / "rel"), str(tmp_path / "abs")]
    assert with_pth_paths([str(site)]) == [str(site), str(site / "rel"), str(tmp_path / "abs")]
    assert not marker.exists()
