"""Installs into a venv without pip: uv's plan read and judged, the remedy given to the host's uv."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from envdoctor.engine.facts import ProgramOnPath
from envdoctor.engine.results import CheckResult, Remedy, Status
from envdoctor.install.index_credentials import wrapped_command
from envdoctor.install.pip_plan import PackageState, PlanError, evaluate
from envdoctor.install.pip_remedy import apply_pip_install, install_payload
from envdoctor.install.uv_plan import dry_run_argv, parse_plan, uv_install_argv, uv_target_python
from envdoctor.install.uv_remedy import with_host_installer
from envdoctor.probe.host.env.machine import describe_uv
from envdoctor.transport.interface import CommandResult
from tests.unit.fakes import MARKERS

UV = "/home/u/.local/bin/uv"
PYTHON = "/v/bin/python"
REQUESTS = PackageState("requests", "2.32.3", ("urllib3<3,>=1.21.1", "idna<4,>=2.5"))
INSTALLED = [REQUESTS, PackageState("urllib3", "2.2.3"), PackageState("idna", "3.10")]

#: What uv 0.13.10 printed (stderr) for a `uv venv` venv holding requests 2.32.3 and urllib3 2.2.3.
NEW = """Using Python 3.11.7 environment at: uv made
Resolved 7 packages in 665ms
Would install 2 packages
 + regex==2026.12.2
 + tiktoken==0.14.0
"""
DOWNGRADE = """Using Python 3.11.7 environment at: uv made
Resolved 1 package in 204ms
Would download 1 package
Would uninstall 1 package
Would install 1 package
 - urllib3==2.2.3
 + urllib3==1.20
"""
NOTHING = """Using Python 3.11.7 environment at: uv made
Checked 1 package in 4ms
Would make no changes
"""


def test_uvs_plan_text_is_read_as_the_distributions_it_installs():
    """`+` lines are installs (a `-` line only names the version replaced); no changes is an empty plan."""
    assert [(p.name, p.version) for p in parse_plan(NEW.encode()).installs] == [("regex", "2026.12.2"),
                                                                              ("tiktoken", "0.14.0")]
    assert [(p.name, p.version) for p in parse_plan(DOWNGRADE).installs] == [("urllib3", "1.20")]
    assert parse_plan(NOTHING).installs == ()
    assert [p.version for p in parse_plan("Would install 1 package\n + pkg @ file:///w/pkg.whl\n").installs] == [
        "file:///w/pkg.whl"]


@pytest.mark.parametrize("text", ["", "error: No solution found when resolving dependencies\n",
                                  "Would install 1 package\n", "x" * (5 * 1024 * 1024)])
def test_an_answer_that_is_not_a_plan_is_a_plan_error(text):
    """No plan line, or a plan that names nothing it would install, or too much text: PlanError."""
    with pytest.raises(PlanError):
        parse_plan(text)


def test_a_downgrade_uv_plans_is_judged_as_pips_plan_is():
    """uv's downgrade of urllib3 below what requests requires is the same break pip's plan would be."""
    verdict = evaluate(parse_plan(DOWNGRADE), INSTALLED, MARKERS)
    assert verdict.breaks == ("requests 2.32.3 requires urllib3<3,>=1.21.1; the plan installs 1.20",)
    assert evaluate(parse_plan(NEW), INSTALLED, MARKERS).safe


def test_the_uv_command_takes_the_pip_commands_interpreter_and_options():
    """`<python> -m pip install OPTS REQS` -> `<uv> pip install --python <python> OPTS REQS`; its
    plan adds --dry-run (no colours) after `install`."""
    argv = uv_install_argv(UV, (PYTHON, "-m", "pip", "install", "--index-url", "http://m/simple", "tiktoken"))
    assert argv == (UV, "pip", "install", "--python", PYTHON, "--index-url", "http://m/simple", "tiktoken")
    assert dry_run_argv(argv) == (UV, "pip", "install", "--dry-run", "--color", "never", "--python", PYTHON,
                                  "--index-url", "http://m/simple", "tiktoken")
    assert uv_target_python(argv) == PYTHON and uv_target_python((UV, "pip", "install", f"--python={PYTHON}")) == PYTHON
    with pytest.raises(PlanError):
        uv_install_argv(UV, (PYTHON, "-m", "pip", "uninstall", "x"))


def test_index_urls_reach_uv_through_its_environment():
    """An index URL's password never sits on uv's argv: UV_* variables over stdin, find-links comma-separated."""
    argv, stdin = wrapped_command((UV, "pip", "install", "--python", PYTHON, "-i", "http://u:pw@m/simple",
                                   "--extra-index-url", "http://a", "--extra-index-url=http://b",
                                   "-f", "/w1", "--find-links=/w2", "tiktoken"))
    assert "http://u:pw@m/simple" not in " ".join(argv) and argv[-6:] == [UV, "pip", "install", "--python", PYTHON,
                                                                          "tiktoken"]
    assert stdin == b"UV_INDEX_URL=http://u:pw@m/simple\nUV_EXTRA_INDEX_URL=http://a http://b\nUV_FIND_LINKS=/w1,/w2\n\n"


def remedy(*reqs: str, pip_version: str | None = None, automatic: bool = True) -> Remedy:
    return Remedy("install tiktoken with the environment's own pip", argv=(PYTHON, "-m", "pip", "install", *reqs),
                  automatic=automatic, payload=install_payload("/v", pip_version, INSTALLED, MARKERS))


def result(r: Remedy) -> CheckResult:
    return CheckResult("packages.required", Status.FAIL, "tiktoken is missing", remedy=r)


def test_a_venv_without_pip_is_given_to_the_hosts_uv_with_the_same_consent():
    """No pip and a uv on the host: the remedy runs that uv by its absolute path; automatic stays as it was."""
    uv = ProgramOnPath("/root/.pyenv/shims/uv", "/root/.pyenv/shims/uv", resolved="/root/.pyenv/versions/3.11/bin/uv")
    (given,) = with_host_installer([result(remedy("tiktoken"))], uv)
    assert given.remedy.argv == ("/root/.pyenv/versions/3.11/bin/uv", "pip", "install", "--python", PYTHON, "tiktoken")
    assert given.remedy.automatic and "with the host's uv" in given.remedy.summary
    (shown,) = with_host_installer([result(remedy("tiktoken", automatic=False))], uv)
    assert shown.remedy.automatic is False
    with_pip = result(remedy("tiktoken", pip_version="25.0"))
    assert with_host_installer([with_pip], uv) == [with_pip]


def test_neither_pip_nor_uv_is_by_hand_and_names_both_ways():
    """No pip and no uv: by hand, with ensurepip and the uv command both named."""
    (shown,) = with_host_installer([result(remedy("tiktoken"))], None)
    assert shown.remedy.automatic is False and shown.remedy.argv == ()
    summary = shown.remedy.summary
    assert summary.startswith("install tiktoken: /v has no pip, and the host has no uv")
    assert f"{PYTHON} -m ensurepip && {PYTHON} -m pip install tiktoken" in summary
    assert f"uv pip install --python {PYTHON} tiktoken" in summary


def runner(answers: dict[str, str], ran: list[tuple[str, ...]]):
    async def run(argv):
        ran.append(tuple(argv))
        if "--dry-run" in argv:
            return CommandResult(tuple(argv), 0, b"", answers[argv[-1]].encode())
        return CommandResult(tuple(argv), 0, b"", b"Installed 1 package")

    return run


def test_fix_installs_with_uv_only_after_its_plan_is_judged():
    """uv's plan runs first; a safe one is installed, a breaking one and --dry-run install nothing."""
    uv = ProgramOnPath(UV, UV)
    ran: list[tuple[str, ...]] = []
    answers = {"tiktoken": NEW, "urllib3<1.21": DOWNGRADE, "idna": NOTHING}

    def apply(req: str, dry_run: bool = False):
        (given,) = with_host_installer([result(remedy(req))], uv)
        return asyncio.run(apply_pip_install(runner(answers, ran), given.remedy, dry_run=dry_run, installed={}))

    planned = apply("tiktoken", dry_run=True)
    assert planned.exit_status is None and not planned.refused and "tiktoken 0.14.0 (new)" in planned.plan
    assert ran == [(UV, "pip", "install", "--dry-run", "--color", "never", "--python", PYTHON, "tiktoken")]
    installed = apply("tiktoken")
    assert installed.exit_status == 0 and ran[-1] == (UV, "pip", "install", "--python", PYTHON, "tiktoken")
    refused = apply("urllib3<1.21")
    assert refused.exit_status is None and "requests 2.32.3 requires urllib3" in refused.refused
    assert "--dry-run" in ran[-1]
    met = apply("idna")
    assert met.exit_status == 0 and "uv plans no change" in met.output and "--dry-run" in ran[-1]


def test_uv_is_found_on_path_else_where_its_installer_puts_it(tmp_path, monkeypatch):
    """The probe's uv: the session's PATH first, then ~/.local/bin, then ~/.cargo/bin; read, never run."""
    home, path_dir = tmp_path / "home", tmp_path / "bin"
    for folder in (home / ".local" / "bin", home / ".cargo" / "bin", path_dir):
        folder.mkdir(parents=True)
    monkeypatch.setenv("ENVDOCTOR_PATH", str(path_dir))
    assert describe_uv(str(home)) is None

    def plant(folder: Path) -> str:
        (folder / "uv").write_bytes(b"\x7fELF not run")
        os.chmod(folder / "uv", 0o755)
        return str(folder / "uv")

    cargo = plant(home / ".cargo" / "bin")
    assert (describe_uv(str(home))["resolved"], describe_uv(str(home))["found_in"]) == (cargo, "~/.cargo/bin")
    local = plant(home / ".local" / "bin")
    assert (describe_uv(str(home))["resolved"], describe_uv(str(home))["found_in"]) == (local, "~/.local/bin")
    on_path = plant(path_dir)
    assert (describe_uv(str(home))["resolved"], describe_uv(str(home))["found_in"]) == (on_path, "PATH")
    os.chmod(on_path, 0o644)  # not executable: not a uv to run
    assert describe_uv(str(home))["found_in"] == "~/.local/bin"


def test_the_text_report_names_the_installer_whose_plan_it_shows():
    """A plan shown under a uv command is uv's (its path quoted or not); under a pip command, pip's."""
    from envdoctor.report.text import _plan_lines

    plan = ("tiktoken 0.14.0 (new)",)
    assert [t.plain for t in _plan_lines(plan, f"{UV} pip install --python {PYTHON} tiktoken")] == [
        "      uv's plan: tiktoken 0.14.0 (new)"]
    assert _plan_lines(plan, "'/home/a b/.local/bin/uv' pip install tiktoken")[0].plain.strip().startswith("uv's")
    assert _plan_lines(plan, f"{PYTHON} -m pip install tiktoken")[0].plain.strip().startswith("pip's")
