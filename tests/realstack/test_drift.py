"""code.api-drift and code.imports on the real stacks, against the venv's own import system: no
error names a module that the venv's `importlib.util.find_spec` finds, and both sections finish
(cold, then warm from the host's cache)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

#: What the venv's interpreter says of each dotted name: found as a module, or not.
_FIND = """
import importlib.util, json, sys, warnings
warnings.simplefilter("ignore")
found = {}
for name in json.loads(sys.stdin.read()):
    try:
        found[name] = importlib.util.find_spec(name) is not None
    except BaseException:  # a parent that fails to import, a name inside a module
        found[name] = False
print(json.dumps(found))
"""


def find_specs(venv: Path, names: set[str]) -> dict[str, bool]:
    done = subprocess.run([str(venv / "bin" / "python"), "-c", _FIND], input=json.dumps(sorted(names)),
                          capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def named_module(why: str) -> str:
    """The dotted name an API-drift error says is missing ("X cannot be imported: ...")."""
    for marker in (" cannot be imported", " does not exist"):
        if marker in why:
            return why.split(marker)[0].strip()
    return ""


def results(run_cli, venv: Path, home: Path) -> tuple[dict, float]:
    started = time.monotonic()
    # A HOME of its own: the host caches of other runs (other checkouts' code) neither answer
    # the cold run nor replace this run's answer before the warm one.
    res = run_cli("check", "local", "--venv", str(venv), "--only", "code.api-drift", "--only", "code.imports",
                  "--format", "json", env={"HOME": str(home)}, timeout=1800)
    seconds = time.monotonic() - started
    assert res.exit_status in (0, 1), res.stderr[-2000:]
    doc = json.loads(res.stdout)
    return {r["id"]: r for r in doc["hosts"][0]["results"]}, seconds


@pytest.mark.parametrize("stack", ["vllm_stack", "sglang_stack"])
def test_no_drift_or_import_error_names_a_module_the_venv_finds(stack: str, request, run_cli, tmp_path: Path) -> None:
    """Every API-drift error and every failing import names something the venv's find_spec does not find."""
    venv = request.getfixturevalue(stack)
    home = tmp_path / "home"
    home.mkdir()
    found, cold = results(run_cli, venv, home)
    for check_id in ("code.api-drift", "code.imports"):
        assert found[check_id]["status"] in ("pass", "warn", "fail"), found[check_id]["message"]
    names: set[str] = set()
    drift_errors = [f for pair in found["code.api-drift"]["details"]["pairs"] for f in pair["findings"]
                    if f["severity"] == "error"]
    for finding in drift_errors:
        if named_module(finding["why"]):
            names.add(named_module(finding["why"]))
    import_errors = [m for m in found["code.imports"]["details"]["missing"] if m["severity"] == "fail"]
    names.update(str(m["missing"]) for m in import_errors)
    if names:
        wrongly = sorted(n for n, there in find_specs(venv, names).items() if there)
        assert wrongly == [], f"errors name modules the venv finds: {wrongly}"
    again, warm = results(run_cli, venv, home)
    caches = {check_id: again[check_id]["details"]["cache"] for check_id in ("code.api-drift", "code.imports")}
    assert caches == {"code.api-drift": "hit", "code.imports": "hit"}, (caches, cold, warm)
    assert warm < cold
