"""packages.consistent and packages.tags on the real serving stacks, against their authorities:
`uv pip check` (uv's own verdict on requirements and wheel tags) and the newest `pip check`
(run from a venv of its own with `pip --python STACK/bin/python`, as the stacks have no pip).
Both stacks are consistent as uv installs them; envdoctor must say so, with no "extras in use"
line for extras nobody asks for (flashinfer-python [b12x], cuda-toolkit [nvcc]), and `fix`
must offer nothing."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.conftest import make_venv, uv_executable
from tests.e2e.test_consistency_vs_pip import envdoctor_findings, pip_findings

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
