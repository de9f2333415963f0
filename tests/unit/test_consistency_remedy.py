"""A remedy shown for a person to type is held to the standard of one fix runs: what provably
breaks an installed requirement is left out of packages.consistent's remedy ("no safe remedy"),
and fix shows an install only after pip's plan for it breaks nothing installed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from envdoctor.engine.graph import load_checks
from envdoctor.engine.results import Status
from envdoctor.install.consistency import breaking_requirements
from envdoctor.install.pip_remedy import judge_shown_install, plan_first_install
from envdoctor.inventory import HostSpec
from envdoctor.transport.interface import CommandResult
from tests.unit.fakes import MARKERS, dist, env, facts

GRAPH = load_checks()


def consistent(*dists):
    venv = env("/v", *dists, dist("pip", "24.0"))
    results = {r.id: r for r in GRAPH.evaluate(HostSpec("h", None, venv="/v"), facts(venv))}
    return results["packages.consistent"]


def vllm_stack(*more):
    """vllm's pins beside flashinfer-python, whose `b12x` extra pins the older cutlass."""
    return env("/v",
               dist("vllm", "0.33.0", "nvidia-cutlass-dsl[cu13]==4.8.0", "apache-tvm-ffi==0.1.11"),
               dist("nvidia-cutlass-dsl", "4.8.0", "nvidia-cutlass-dsl-libs-base==4.8.0",
                    "nvidia-cutlass-dsl-libs-cu13==4.8.0; extra == 'cu13'"),
               dist("nvidia-cutlass-dsl-libs-cu13", "4.8.0", "nvidia-cutlass-dsl-libs-base==4.8.0"),
               dist("nvidia-cutlass-dsl-libs-base", "4.8.0"), dist("apache-tvm-ffi", "0.1.11"),
               dist("nvidia-cuda-nvcc", "13.5.37"), *more)


def test_a_pin_the_installed_graph_holds_is_never_in_the_remedy():
    """The issue's remedy: cutlass 4.7.1 (under vllm's ==4.8.0, through a [cu13] extra vllm asks
    for too), tvm-ffi >=0.1.12 (vllm pins 0.1.11); libs pinned by the cutlass that then stays
    installed; nvcc, pinned by nobody installed, is left to pip's plan."""
    wanted = ["apache-tvm-ffi<0.2,>=0.1.12", "nvidia-cuda-nvcc==13.0.88.*", "nvidia-cutlass-dsl-libs-base==4.7.1",
              "nvidia-cutlass-dsl-libs-cu13==4.7.1", "nvidia-cutlass-dsl==4.7.1"]
    found = breaking_requirements(vllm_stack(), wanted)
    assert found == {
        "apache-tvm-ffi<0.2,>=0.1.12": "apache-tvm-ffi<0.2,>=0.1.12 cannot hold beside vllm 0.33.0's apache-tvm-ffi==0.1.11",
        "nvidia-cutlass-dsl-libs-base==4.7.1": "nvidia-cutlass-dsl-libs-base==4.7.1 cannot hold beside "
                                               "nvidia-cutlass-dsl 4.8.0's nvidia-cutlass-dsl-libs-base==4.8.0",
        "nvidia-cutlass-dsl-libs-cu13==4.7.1": "nvidia-cutlass-dsl-libs-cu13==4.7.1 cannot hold beside "
                                               "nvidia-cutlass-dsl 4.8.0 [cu13]'s nvidia-cutlass-dsl-libs-cu13==4.8.0",
        "nvidia-cutlass-dsl==4.7.1": "nvidia-cutlass-dsl==4.7.1 cannot hold beside vllm 0.33.0's "
                                     "nvidia-cutlass-dsl[cu13]==4.8.0",
    }


def test_without_a_pin_nothing_is_claimed():
    """b<2 beside c's b>=1.5: some version may meet both; only the installer's plan can tell."""
    venv = env("/v", dist("c", "1.0", "b>=1.5"), dist("b", "2.0"))
    assert breaking_requirements(venv, ["b<2"]) == {}
    assert breaking_requirements(env("/v", dist("c", "1.0", "b==2.0"), dist("b", "2.0")), ["b<2"]) != {}


def test_the_check_says_no_safe_remedy_instead_of_a_breaking_command():
    """a wants b==1, c wants b==2 (b 2.0 installed): pip check's conflict stands, and no pip command is offered."""
    result = consistent(dist("a", "1.0", "b==1"), dist("c", "1.0", "b==2"), dist("b", "2.0"))
    assert result.status is Status.FAIL
    assert "a 1.0 has requirement b==1, but you have b 2.0." in result.message
    assert "no safe remedy: b==1 cannot hold beside c 1.0's b==2" in result.message.split("\n")
    assert result.remedy is None


def test_requirements_that_contradict_each_other_have_no_safe_remedy():
    """a wants b==1 and c wants b==2 while b 3.0 is installed: no version of b meets both."""
    result = consistent(dist("a", "1.0", "b==1"), dist("c", "1.0", "b==2"), dist("b", "3.0"))
    assert "no safe remedy: no version meets b==1,==2: the installed distributions want them all" in \
        result.message.split("\n")
    assert result.remedy is None


def test_only_the_safe_part_is_offered():
    """a wants b==1 (c pins b==2: no) and d>=2 (nobody else pins d): the remedy installs d>=2 only."""
    result = consistent(dist("a", "1.0", "b==1", "d>=2"), dist("c", "1.0", "b==2"), dist("b", "2.0"), dist("d", "1.0"))
    command = plan_first_install(result.remedy)
    assert command is not None and command.argv[-1] == "d>=2" and "b==1" not in command.argv
    assert result.remedy.unlocked_by == "--require 'd>=2'"


def report(*items: tuple[str, str, list[str]]) -> bytes:
    return json.dumps({"version": "1", "pip_version": "24.0", "environment": MARKERS,
                       "install": [{"metadata": {"name": n, "version": v, "requires_dist": r}} for n, v, r in items]}
                      ).encode()


def judged(result, plan: bytes, exit_status: int = 0):
    ran: list[tuple[str, ...]] = []

    async def run(argv: Sequence[str]) -> CommandResult:
        ran.append(tuple(argv))
        return CommandResult(tuple(argv), exit_status, plan, b"no index" if exit_status else b"")

    shown, line = asyncio.run(judge_shown_install(run, result.remedy, {}))
    return shown, line, ran


def test_fix_shows_an_install_only_after_its_plan_breaks_nothing():
    """a wants b<2, c wants b>=1.5 (b 2.0 installed): the plan b 2.0 -> 1.4 breaks c, so nothing is
    shown; the plan b 2.0 -> 1.9 breaks nothing, so the command is shown with the plan. Only pip's
    dry run ran."""
    result = consistent(dist("a", "1.0", "b<2"), dist("c", "1.0", "b>=1.5"), dist("b", "2.0"))
    assert result.remedy is not None and not result.remedy.automatic
    shown, line, ran = judged(result, report(("b", "1.4", [])))
    assert shown is None
    assert line == ("no safe remedy: pip's plan for it (b 2.0 -> 1.4 (downgrade)) would break "
                    "c 1.0 requires b>=1.5; the plan installs 1.4")
    assert len(ran) == 1 and "--dry-run" in ran[0] and "--report" in ran[0]
    shown, line, ran = judged(result, report(("b", "1.9", [])))
    assert shown == plan_first_install(result.remedy) and shown.argv[-1] == "b<2" and not shown.automatic
    assert result.remedy.argv == ()  # check itself shows no command: it runs no pip
    assert line == "pip's plan for the remedy: b 2.0 -> 1.9 (downgrade); it breaks nothing installed"


def test_no_plan_no_command():
    """pip cannot plan it (the index refuses): the command is not shown, and the line says why."""
    result = consistent(dist("a", "1.0", "b<2"), dist("b", "2.0"))
    shown, line, _ = judged(result, b"", exit_status=1)
    assert shown is None
    assert line.startswith("no remedy shown: pip's plan could not be judged: pip could not plan the install (exit status 1)")


def test_the_tags_reinstall_is_shown_only_after_its_plan():
    """packages.tags' reinstall of a wheel built for another Python is held to the same standard:
    check names fix --dry-run; the command (same version, --no-deps) is what fix plans."""
    from envdoctor.probe.host.env.wheel_tags import interpreter_facts

    venv = env("/v", dist("markupsafe", "3.0.2"), dist("pip", "24.0"))
    host = facts(venv)
    host.probe.sections["wheel-tags"] = {"interpreter": interpreter_facts(None, 10), "distributions": [
        {"name": "markupsafe", "version": "3.0.2", "path": "/v/site/markupsafe-3.0.2.dist-info",
         "tags": ["cp299-cp299-manylinux_2_17_x86_64"]}]}
    result = {r.id: r for r in GRAPH.evaluate(HostSpec("h", None, venv="/v"), host)}["packages.tags"]
    assert result.status is Status.FAIL and result.remedy.argv == ()
    assert "`envdoctor fix h --dry-run` asks pip for its plan" in result.remedy.summary
    command = plan_first_install(result.remedy)
    assert command.argv[-3:] == ("--force-reinstall", "--no-deps", "markupsafe==3.0.2") and not command.automatic
    shown, line, _ = judged(result, report(("markupsafe", "3.0.2", [])))
    assert shown == command and line == ("pip's plan for the remedy: markupsafe 3.0.2 -> 3.0.2 (reinstall); "
                                         "it breaks nothing installed")


def test_a_claimed_break_is_never_wrong():
    """Over pins, ranges, wildcards and compatible releases of a few versions: whenever two
    requirements are called impossible together, no version of a dense grid meets both."""
    from itertools import product

    from packaging.requirements import Requirement
    from packaging.version import Version

    from envdoctor.install.consistency import _cannot_both_hold

    points = ["1.0", "1.0.1", "1.1", "2.0", "2.0rc1", "2.0.post1"]
    specs = [f"{op}{v}" for op in ("==", "!=", ">=", ">", "<=", "<", "~=") for v in points if not (op == "~=" and "." not in v)]
    specs += ["==1.*", "==2.0.*", ""]
    grid = [Version(f"{a}.{b}{tail}") for a in range(0, 4) for b in range(0, 3) for tail in ("", ".1", "rc1", ".post1")]
    grid += [Version(p) for p in points]
    claimed = 0
    for one, other in product(specs, repeat=2):
        a, b = Requirement(f"x{one}"), Requirement(f"x{other}")
        if _cannot_both_hold(a, b):
            claimed += 1
            assert not any(a.specifier.contains(v, prereleases=True) and b.specifier.contains(v, prereleases=True)
                           for v in grid), (one, other)
    assert claimed > 20  # the claim is made, not only never wrong
