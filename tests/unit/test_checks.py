"""The shipped checks as pure functions over in-memory facts."""

from __future__ import annotations

from envdoctor.engine.facts import Problem, ProgramOnPath
from envdoctor.engine.graph import RemedySettings, load_checks
from envdoctor.inventory import HostSpec
from envdoctor.engine.results import Status
from envdoctor.install.pip_remedy import plan_first_install
from tests.unit.fakes import dist, env, facts

GRAPH = load_checks()


def evaluate(spec: HostSpec, host_facts, settings: RemedySettings = RemedySettings()):
    return {r.id: r for r in GRAPH.evaluate(spec, host_facts, settings)}


def test_missing_package_remedy_uses_absolute_pip_and_index_options():
    """A missing requirement fails with the venv's absolute pip and passes --index-url/--find-links through."""
    venv = env("/root/venv a", dist("transformers", "4.57.0"))
    spec = HostSpec("h", None, venv="/root/venv a", requires=("tiktoken", "transformers>=4.50"))
    results = evaluate(spec, facts(venv), RemedySettings(index_url="http://mirror/simple", find_links=("/wheels",)))
    required = results["packages.required"]
    assert required.status is Status.FAIL
    assert required.remedy.argv == (
        "/root/venv a/bin/python", "-m", "pip", "install",
        "--index-url", "http://mirror/simple", "--find-links", "/wheels", "tiktoken",
    )
    assert "'/root/venv a/bin/python'" in required.remedy.display


def test_wrong_version_is_reported_with_the_specifier():
    """An installed version outside the specifier fails and names both."""
    venv = env("/v", dist("transformers", "5.23.0"))
    results = evaluate(HostSpec("h", None, venv="/v", requires=("transformers<5.16",)), facts(venv))
    assert results["packages.required"].status is Status.FAIL
    assert "transformers 5.23.0 does not satisfy <5.16" in results["packages.required"].message


def test_requirement_with_false_marker_is_not_needed():
    """A requirement whose marker does not hold on the host is ignored."""
    venv = env("/v")
    spec = HostSpec("h", None, venv="/v", requires=("pywin32; sys_platform == 'win32'",))
    assert evaluate(spec, facts(venv))["packages.required"].status is Status.PASS


def test_pip_check_on_controller_finds_conflict_and_missing():
    """Declared requirements are checked like pip check; the remedy is shown, never run by fix on its own."""
    venv = env("/v", dist("speculators", "0.3.0", "transformers<5.16", "pydantic>=2"), dist("transformers", "5.23.0"))
    result = evaluate(HostSpec("h", None, venv="/v"), facts(venv))["packages.consistent"]
    assert result.status is Status.FAIL
    assert "speculators 0.3.0 has requirement transformers<5.16, but you have transformers 5.23.0." in result.message
    assert "pydantic" in result.message
    assert not result.remedy.automatic
    # The command is shown only once fix has judged pip's plan for it: check names fix --dry-run.
    assert result.remedy.argv == () and "`envdoctor fix h --dry-run` asks pip for its plan" in result.remedy.summary
    assert plan_first_install(result.remedy).argv[-2:] == ("pydantic>=2", "transformers<5.16")

    only_conflict = env("/v", dist("speculators", "0.3.0", "transformers<5.16"), dist("transformers", "5.23.0"))
    result = evaluate(HostSpec("h", None, venv="/v"), facts(only_conflict))["packages.consistent"]
    assert not result.remedy.automatic
    assert plan_first_install(result.remedy).argv[-1] == "transformers<5.16"


def test_extras_and_markers_in_requires_dist_are_respected():
    """Requirements behind an extra or a false marker are not demanded."""
    venv = env("/v", dist("lib", "1.0", "torch; extra == 'gpu'", "colorama; sys_platform == 'win32'"))
    assert evaluate(HostSpec("h", None, venv="/v"), facts(venv))["packages.consistent"].status is Status.PASS


def test_default_interpreter_lacking_packages_points_to_a_venv_that_has_them():
    """Without --venv, a default python3 lacking the packages names the discovered venv that has them."""
    default = env("/usr", executable="/usr/bin/python3")
    good = env("/root/venv_sglang", dist("tiktoken", "0.9.0"))
    host_facts = facts(good, default=default)
    host_facts = type(host_facts)(**{**host_facts.__dict__, "configured_envs": ()})
    result = evaluate(HostSpec("h", None, requires=("tiktoken",)), host_facts)["python.venv"]
    assert result.status is Status.FAIL
    assert "/root/venv_sglang" in result.message
    assert "--venv /root/venv_sglang" in result.remedy.summary


def test_pip_trap_warns_when_pip_belongs_to_another_interpreter():
    """`pip` on PATH that belongs to the system python is a warning with the absolute-pip advice."""
    venv = env("/root/venv", dist("pip", "25.0", site="/root/venv/lib/python3.11/site-packages"))
    on_path = {
        "python3": ProgramOnPath("/usr/bin/python3", "/usr/bin/python3.10"),
        "pip": ProgramOnPath("/usr/bin/pip", "/usr/bin/pip", "/usr/bin/python3"),
    }
    result = evaluate(HostSpec("h", None, venv="/root/venv"), facts(venv, on_path=on_path))["python.pip-path"]
    assert result.status is Status.WARN
    assert "/usr/bin/pip" in result.message
    assert result.remedy.summary.startswith("call /root/venv/bin/python -m pip, never a bare `pip`")
    # A venv without pip of its own (uv makes them so): that advice alone would fail.
    bare = evaluate(HostSpec("h", None, venv="/root/venv"), facts(env("/root/venv"), on_path=on_path))["python.pip-path"]
    assert bare.remedy.summary.startswith("/root/venv has no pip of its own: add it (/root/venv/bin/python -m ensurepip)")
    assert "uv pip install --python /root/venv/bin/python" in bare.remedy.summary

    inside = {
        "python3": ProgramOnPath("/root/venv/bin/python3", "/usr/bin/python3.10"),
        "pip": ProgramOnPath("/root/venv/bin/pip", "/root/venv/bin/pip", "/root/venv/bin/python"),
    }
    assert evaluate(HostSpec("h", None, venv="/root/venv"), facts(venv, on_path=inside))["python.pip-path"].status is Status.PASS


def test_unreachable_host_blocks_everything_with_the_cause():
    """A connection problem is an error on host.reachable and every other check is blocked, naming its prerequisite."""
    from envdoctor.engine.facts import HostFacts

    results = evaluate(HostSpec("h", None), HostFacts.unavailable(Problem("auth", "refused", "load the key")))
    assert results["host.reachable"].status is Status.ERROR
    assert results["host.reachable"].message.startswith("authentication failed")
    assert results["python.venv"].status is Status.BLOCKED
    assert results["python.venv"].blocked_by == "host.python"
    assert results["packages.required"].blocked_by == "python.venv"


def test_advice_quotes_paths_a_person_would_paste_into_a_shell():
    """A venv path with a space or a `;` is quoted in the advice: pasted as shown it makes that
    venv, calls that pip, and runs nothing else."""
    venv_path = "/srv/job venv;rm -rf x"
    missing = evaluate(HostSpec("h", None, venv=venv_path), facts())["python.venv"]
    assert missing.status is Status.FAIL
    assert "python3 -m venv '/srv/job venv;rm -rf x')" in missing.remedy.summary

    venv = env(venv_path, dist("pip", "25.0", site=f"{venv_path}/lib/python3.11/site-packages"))
    on_path = {"pip": ProgramOnPath("/usr/bin/pip", "/usr/bin/pip", "/usr/bin/python3")}
    warned = evaluate(HostSpec("h", None, venv=venv_path), facts(venv, on_path=on_path))["python.pip-path"]
    assert warned.remedy.summary.startswith("call '/srv/job venv;rm -rf x/bin/python' -m pip")
    bare = evaluate(HostSpec("h", None, venv=venv_path), facts(env(venv_path), on_path=on_path))["python.pip-path"]
    assert "('/srv/job venv;rm -rf x/bin/python' -m ensurepip)" in bare.remedy.summary
