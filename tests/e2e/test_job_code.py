"""code.imports, model.architecture and packages.tags over the real sshd, from an inventory with
stages: a script in a `cd DIR` that imports a missing module, a vLLM 0.11.0 (its real registry)
serving Kimi K2.6, and a wheel built for the next Python in the venv."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.engine_registries import registry_files
from tests.kimi_fixture import build_kimi

pytestmark = pytest.mark.e2e

NEXT = f"{sys.version_info[0]}{sys.version_info[1] + 1}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, venv_factory, sshd) -> dict:
    root = tmp_path_factory.mktemp("job-code")
    venv = venv_factory("job code venv")
    site = next(venv.glob("lib/python3*/site-packages"))
    for name, version in (("transformers", "4.57.6"), ("vllm", "0.11.0")):
        for entry in registry_files(name, version).iterdir():
            if not entry.name.startswith("."):
                shutil.copytree(entry, site / entry.name, dirs_exist_ok=True)
    download = root / "dl"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "--disable-pip-version-check", "--platform", "manylinux2014_x86_64", "--python-version", NEXT,
                    "-d", str(download), "markupsafe==3.0.2"], check=True)
    with zipfile.ZipFile(next(download.glob("*.whl"))) as archive:
        archive.extractall(site)
    model = build_kimi(root / "Kimi-K2.6", mark=root / "MARK", named_only=True, ranks=False)
    job = root / "job dir"
    job.mkdir()
    (job / "train.py").write_text("import json\n\nimport nosuch_trainer_dep\n")
    stages = {"serve": "{python} -m vllm.entrypoints.openai.api_server --model {model}",
              "train": f"cd '{job}' && {{python}} train.py"}
    lines = ["[hosts.trainer]", 'ssh = "ct200"', f"venv = {json.dumps(str(venv))}", f"models = [{json.dumps(str(model))}]"]
    for name, command in stages.items():
        lines += [f"[stages.{name}]", 'host = "trainer"', f"command = {json.dumps(command)}"]
    inventory = root / "envdoctor.toml"
    inventory.write_text("\n".join(lines) + "\n")
    return {"venv": venv, "model": model, "job": job, "inventory": inventory}


def results(run_cli, sshd, setup) -> dict:
    res = run_cli("check", "trainer", "--config", str(setup["inventory"]), "--ssh-config", str(sshd.ssh_config),
                  "--only", "code.imports", "--only", "model.architecture", "--only", "packages.tags",
                  "--format", "json")
    assert res.exit_status == 1, res.stderr
    return {r["id"]: r for r in json.loads(res.stdout)["hosts"][0]["results"]}


def test_over_ssh_the_three_checks_fail_with_what_stops_the_job(run_cli, sshd, setup):
    """The stage's missing import (file:line), the engine that does not know Kimi K2.6 (with the
    release that does) and the wheel for another Python (its WHEEL file and tag)."""
    found = results(run_cli, sshd, setup)
    imports, arch, tags = found["code.imports"], found["model.architecture"], found["packages.tags"]
    assert imports["status"] == "fail"
    assert f"{setup['job']}/train.py:3 imports nosuch_trainer_dep" in imports["message"]
    assert arch["status"] == "fail"
    assert "vLLM 0.11.0: does not register KimiK25ForConditionalGeneration" in arch["message"]
    assert "vLLM >= 0.15.0 registers KimiK25ForConditionalGeneration" in arch["message"]
    assert arch["details"]["architecture"]["vllm"]["supported"] is False
    assert tags["status"] == "fail"
    assert "MarkupSafe-3.0.2.dist-info/WHEEL" in tags["message"] and f"cp{NEXT}-cp{NEXT}" in tags["message"]


def test_facts_carry_each_engines_answer_for_the_model(run_cli, sshd, setup):
    """`envdoctor facts` gains architecture_support: per engine, supported, as which class, via which path."""
    res = run_cli("facts", "trainer", "--config", str(setup["inventory"]), "--ssh-config", str(sshd.ssh_config),
                  "--format", "json")
    assert res.exit_status in (0, 1), res.stderr
    doc = json.loads(res.stdout)  # one host: its document
    assert doc["architecture"] == "KimiK25ForConditionalGeneration"  # the {architecture} placeholder, unchanged
    support = doc["architecture_support"]
    assert support["vllm"]["supported"] is False and "0.15.0" in support["vllm"]["known_in"]
    assert support["transformers"]["needs_trust_remote_code"] is True
