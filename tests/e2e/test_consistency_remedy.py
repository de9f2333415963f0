"""packages.consistent's remedy, shown for a person to type, is held to the standard of one fix
runs: pip's own plan (`--dry-run --report`, real pip, real PyPI) first, and no command whose plan
breaks an installed requirement. alpha wants six<1.16 while six 1.17.0 is installed; beta, when
present, wants six>=1.16 (no pin, so only the plan can tell); gamma pins six==1.17.0 (then the
check itself knows, without pip)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_venv

pytestmark = pytest.mark.e2e


def plant(venv: Path, name: str, requirement: str) -> None:
    site = next(venv.glob("lib/python3*/site-packages"))
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: {requirement}\n")


@pytest.fixture
def venv(tmp_path) -> Path:
    made = make_venv(tmp_path / "six venv", ["six==1.17.0"])
    plant(made, "alpha", "six<1.16")
    return made


def consistent(run_cli, command: str, venv: Path) -> dict:
    res = run_cli(command, "local", "--venv", str(venv), "--only", "packages.consistent", "--format", "json",
                  *(["--dry-run"] if command == "fix" else []))
    assert res.exit_status == 1, res.stdout + res.stderr
    host = json.loads(res.stdout)["hosts"][0]
    return next(r for r in host["results"] if r["id"] == "packages.consistent")


def freeze(venv: Path) -> str:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all"], capture_output=True,
                          text=True, check=True).stdout


def test_a_remedy_whose_plan_breaks_an_installed_requirement_is_not_shown(run_cli, venv):
    """With beta beside it, pip's plan downgrades six to 1.15.0 and breaks beta: fix says so and
    shows no command; check (which runs no pip) shows none either, naming fix --dry-run; nothing
    was installed."""
    plant(venv, "beta", "six>=1.16")
    before = freeze(venv)
    result = consistent(run_cli, "fix", venv)
    lines = result["message"].split("\n")
    assert any(line.startswith("no safe remedy: pip's plan for it (six 1.17.0 -> 1.15.0 (downgrade)) would break "
                               "beta 1.0 requires six>=1.16") for line in lines), result["message"]
    assert "remedy" not in result and "fix" not in result
    checked = consistent(run_cli, "check", venv)["remedy"]  # check runs no pip: it names fix --dry-run
    assert "argv" not in checked and "`envdoctor fix local --dry-run` asks pip for its plan" in checked["summary"]
    assert freeze(venv) == before


def test_a_remedy_whose_plan_breaks_nothing_is_shown_with_its_plan(run_cli, venv):
    """Without beta the same plan breaks nothing installed: the command is shown, after its plan."""
    result = consistent(run_cli, "fix", venv)
    assert "pip's plan for the remedy: six 1.17.0 -> 1.15.0 (downgrade); it breaks nothing installed" in \
        result["message"].split("\n"), result["message"]
    assert result["remedy"]["argv"][1:] == ["-m", "pip", "install", "six<1.16"]
    assert not result["remedy"]["automatic"]


def test_a_pin_of_an_installed_distribution_is_known_without_pip(run_cli, venv):
    """gamma pins six==1.17.0: the check itself says there is no safe remedy, in check and fix alike."""
    plant(venv, "gamma", "six==1.17.0")
    for command in ("check", "fix"):
        result = consistent(run_cli, command, venv)
        assert "no safe remedy: six<1.16 cannot hold beside gamma 1.0's six==1.17.0" in result["message"].split("\n")
        assert "remedy" not in result
