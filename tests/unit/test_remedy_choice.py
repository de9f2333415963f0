"""fix's own remedies: installs only into a chosen interpreter, python.venv names the venv to choose, pip-path follows shims."""

from __future__ import annotations

from envdoctor.engine.facts import ProgramOnPath
from envdoctor.engine.graph import load_checks
from envdoctor.inventory import HostSpec
from envdoctor.install.pip_remedy import is_pip_install
from envdoctor.engine.results import Status
from tests.unit.fakes import dist, env, facts

GRAPH = load_checks()


def evaluate(spec: HostSpec, host_facts):
    return {r.id: r for r in GRAPH.evaluate(spec, host_facts)}


def test_install_into_a_chosen_venv_is_automatic_and_carries_what_pip_plans_against():
    """--venv given: the install runs (after pip's plan), and the remedy carries the installed set."""
    venv = env("/v", dist("pip", "24.0"), dist("requests", "2.32.3", "urllib3<3,>=1.21.1"))
    required = evaluate(HostSpec("h", None, venv="/v", requires=("tiktoken",)), facts(venv))["packages.required"]
    assert required.remedy.automatic and is_pip_install(required.remedy)
    payload = required.remedy.payload["pip_install"]
    assert payload["prefix"] == "/v" and payload["pip_version"] == "24.0"
    assert {p.name for p in payload["installed"]} == {"pip", "requests"}


def test_install_into_the_default_interpreter_is_shown_only():
    """No venv chosen: the install into the default python3 is by hand, and says how to choose."""
    default = env("/usr", dist("pip", "23.0"), executable="/usr/bin/python3")
    spec = HostSpec("h", None, requires=("tiktoken",))
    required = evaluate(spec, facts(default=default))["packages.required"]
    assert required.status is Status.FAIL
    assert required.remedy.argv[0] == "/usr/bin/python3"
    assert required.remedy.automatic is False and "--venv" in required.remedy.summary


def test_without_a_chosen_venv_python_venv_names_the_best_discovered_one():
    """The default lacks the required stack, a discovered venv has it: fail naming it with versions and gaps."""
    default = env("/usr", executable="/usr/bin/python3")
    good = env("/root/venv_sglang211", dist("transformers", "5.24.0"), dist("sglang", "0.5.2"))
    other = env("/root/venv_old", dist("torch", "2.1.0"))
    spec = HostSpec("h", None, requires=("transformers>=5", "tiktoken"))
    result = evaluate(spec, facts(other, good, default=default))["python.venv"]
    assert result.status is Status.FAIL
    assert "pass --venv /root/venv_sglang211 (it has transformers 5.24.0, sglang 0.5.2; lacks tiktoken)" in result.message
    assert result.remedy.automatic is False
    assert evaluate(spec, facts(other, good, default=default))["packages.required"].status is Status.BLOCKED


def test_pip_path_does_not_warn_when_the_shims_run_the_jobs_interpreter():
    """pyenv shims that run the default interpreter are the job's: pass, naming what they run."""
    prefix = "/root/.pyenv/versions/3.11.7"
    default = env(prefix, executable=f"{prefix}/bin/python3")
    on_path = {
        "python3": ProgramOnPath("/root/.pyenv/shims/python3", "/root/.pyenv/shims/python3", None,
                                 f"{prefix}/bin/python3", ("pyenv 3.11.7 (set by /root/.pyenv/version)",)),
        "pip": ProgramOnPath("/root/.pyenv/shims/pip", "/root/.pyenv/shims/pip", f"{prefix}/bin/python3.11",
                             f"{prefix}/bin/pip", ("pyenv 3.11.7 (set by /root/.pyenv/version)",)),
    }
    result = evaluate(HostSpec("h", None), facts(default=default, on_path=on_path))["python.pip-path"]
    assert result.status is Status.PASS, result.message
    assert f"/root/.pyenv/shims/python3 -> {prefix}/bin/python3" in result.message
    venv = env("/v")
    warned = evaluate(HostSpec("h", None, venv="/v"), facts(venv, on_path=on_path))["python.pip-path"]
    assert warned.status is Status.WARN
    assert f"runs {prefix}/bin/python3" in warned.message and f"installs for {prefix}/bin/python3.11" in warned.message
