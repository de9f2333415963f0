"""packages.consistent and packages.tags on the real serving stacks, against their authorities:
`uv pip check` (uv's own verdict on requirements and wheel tags) and the newest `pip check`
(run from a venv of its own with `pip --python STACK/bin/python`, as the stacks have no pip).
Both stacks are consistent as uv installs them; envdoctor must say so, with no "extras in use"
line for extras nobody asks for (flashinfer-python [b12x], cuda-toolkit [nvcc]), and `fix`
must offer nothing. The one case both miss, the seed story's speculators [datagen] beside a
vllm there for no other reason, is found on the real graph (an overlay venv; the stack is
never changed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.conftest import make_venv, uv_executable
from tests.e2e.test_consistency_vs_pip import envdoctor_findings, pip_findings
from tests.real_stacks import STACKS as STACKS_PINS

pytestmark = pytest.mark.realstack

STACKS = ("vllm_stack", "sglang_stack")


@pytest.fixture(scope="module")
def pip_oracle(tmp_path_factory: pytest.TempPathFactory):
    """The newest pip, in a venv of its own, run against a stack with `--python`."""
    pip_venv = make_venv(tmp_path_factory.mktemp("pip-oracle") / "pip", ["--upgrade", "pip"])

    def check(stack: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(pip_venv / "bin" / "python"), "-m", "pip", "--python", str(stack / "bin" / "python"),
                               "--disable-pip-version-check", "check"],
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)

    return check


def uv_check(stack: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([uv_executable(), "pip", "check", "--python", str(stack / "bin" / "python")],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def uv_count(done: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"Checked (\d+) packages?", done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return int(found[1])


def uv_tag_findings(done: subprocess.CompletedProcess[str]) -> set[tuple[str, str]]:
    """(distribution, tag | requires-python) for each wheel `uv pip check` says does not fit."""
    text = done.stdout + done.stderr
    found = {(canonicalize_name(n), "tag") for n in re.findall(r"The package `([^`]+)` was built for a different", text)}
    found |= {(canonicalize_name(n), "requires-python")
              for n in re.findall(r"The package `([^`]+)` requires Python", text)}
    return found


@pytest.fixture(scope="module")
def checked(request, run_cli) -> dict[str, dict[str, dict]]:
    """One `check local --venv STACK` per stack, of the two checks only, as JSON."""
    results = {}
    for name in STACKS:
        stack = request.getfixturevalue(name)
        res = run_cli("check", "local", "--venv", str(stack), "--only", "packages.consistent",
                      "--only", "packages.tags", "--format", "json", timeout=900)
        assert res.exit_status in (0, 1), res.stderr
        host = json.loads(res.stdout)["hosts"][0]
        results[name] = {r["id"]: r for r in host["results"]}
    return results


@pytest.mark.parametrize("name", STACKS)
def test_packages_consistent_equals_uv_pip_check_and_pip_check(name, request, checked, pip_oracle):
    """The verdict, each pip check finding, and the distributions counted equal the authorities'."""
    stack = request.getfixturevalue(name)
    uv, pip = uv_check(stack), pip_oracle(stack)
    result = checked[name]["packages.consistent"]
    details = result["details"]
    assert (result["status"] == "pass") == (uv.returncode == 0), (result["message"], uv.stdout, uv.stderr)
    assert details["pip_check"]["ok"] == (pip.returncode == 0), (result["message"], pip.stdout)
    assert envdoctor_findings(details["pip_check"]) == pip_findings(pip), (result["message"], pip.stdout)
    assert f"in {uv_count(uv)} distributions" in result["message"].split("\n")[0]
    if uv.returncode == 0:  # as uv installs them: no line beyond pip check's
        assert details["extras"] == [] and details["duplicates"] == [], result["message"]
        assert "remedy" not in result or result["remedy"] is None


@pytest.mark.parametrize("name", STACKS)
def test_packages_tags_equals_uv_pip_check(name, request, checked):
    """Every wheel fits the interpreter as uv judges it; the same distributions are judged."""
    stack = request.getfixturevalue(name)
    uv = uv_check(stack)
    result = checked[name]["packages.tags"]
    expected = uv_tag_findings(uv)
    assert (result["status"] == "pass") == (not expected), (result["message"], uv.stdout, uv.stderr)
    details = result["details"]
    assert details["checked"] == uv_count(uv), details
    assert {(canonicalize_name(m["name"]), m["kind"]) for m in details["mismatches"]} == expected, result["message"]


@pytest.mark.parametrize("name", STACKS)
def test_fix_offers_nothing_for_the_packages_of_a_consistent_stack(name, request, run_cli):
    """`fix --dry-run` of the two checks on a stack uv calls compatible has nothing to do."""
    stack = request.getfixturevalue(name)
    assert uv_check(stack).returncode == 0
    res = run_cli("fix", "local", "--venv", str(stack), "--only", "packages.consistent", "--only", "packages.tags",
                  "--dry-run", "--format", "json", timeout=900)
    assert res.exit_status == 0, res.stdout + res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    assert host.get("actions", []) == [], host
    assert all(r["status"] == "pass" for r in host["results"] if r["id"].startswith("packages.")), host


@pytest.fixture(scope="module")
def seed_overlay(vllm_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed story on the real vLLM stack, which stays untouched: a venv of the stack's own
    interpreter holding speculators 0.3.0 (whose `datagen` extra pins vllm==0.11.0; --no-deps,
    from uv's cache) and a .pth naming the stack's site-packages, so that its vllm is there for
    no other reason and the other 200-odd distributions make up the rest of the graph."""
    venv = tmp_path_factory.mktemp("seed") / "overlay"
    uv = uv_executable()
    subprocess.run([uv, "venv", "-q", "-p", os.path.realpath(vllm_stack / "bin" / "python"), str(venv)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--no-deps",
                    "speculators==0.3.0"], check=True)
    stack_site = next(vllm_stack.glob("lib/python3*/site-packages"))
    (next(venv.glob("lib/python3*/site-packages")) / "zz-stack.pth").write_text(f"{stack_site}\n")
    return venv


def test_the_seed_story_extra_is_found_on_the_real_graph(seed_overlay, run_cli, pip_oracle):
    """speculators 0.3.0 [datagen] beside the stack's vllm, which nothing else in its graph
    requires: the one line beyond pip check, with the vllm the venv's Python finds; pip check's
    own findings (speculators' dependencies left out by --no-deps) equal pip's."""
    vllm = next(r.split("==")[1] for r in STACKS_PINS["vllm"] if r.startswith("vllm=="))
    found = subprocess.run([str(seed_overlay / "bin" / "python"), "-c",
                            "import importlib.metadata as m; print(m.version('vllm'), m.version('speculators'))"],
                           capture_output=True, text=True, check=True, cwd="/").stdout.split()
    assert found == [vllm, "0.3.0"]
    res = run_cli("check", "local", "--venv", str(seed_overlay), "--only", "packages.consistent", "--format", "json",
                  timeout=900)
    assert res.exit_status == 1, res.stderr
    result = next(r for r in json.loads(res.stdout)["hosts"][0]["results"] if r["id"] == "packages.consistent")
    assert result["details"]["extras"] == [{"distribution": "speculators", "version": "0.3.0", "extra": "datagen",
                                            "requirement": "vllm==0.11.0", "name": "vllm", "installed": vllm}]
    assert f"extras in use: speculators 0.3.0 [datagen] requires vllm==0.11.0; {vllm} is installed" in \
        result["message"].split("\n")
    assert envdoctor_findings(result["details"]["pip_check"]) == pip_findings(pip_oracle(seed_overlay))
    assert "argv" not in (result.get("remedy") or {})  # no command before pip's plan (check runs no pip)
