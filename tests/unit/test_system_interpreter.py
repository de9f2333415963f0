"""The system interpreter is not the job: with no environment chosen, Debian's own python3 is
described, not gated; only what the job needs of it is judged, and nothing is ever installed
into an externally-managed (PEP 668) interpreter."""

from __future__ import annotations

from dataclasses import replace

from envdoctor.engine.facts import Distribution, Environment
from envdoctor.engine.graph import load_checks
from envdoctor.engine.results import Status
from envdoctor.install.pip_remedy import plan_first_install
from envdoctor.inventory import HostSpec
from tests.unit.fakes import MARKERS, dist, env, facts

GRAPH = load_checks()
DIST_PACKAGES = "/usr/lib/python3/dist-packages"


def debian_python(*extra: Distribution, externally_managed: bool = True) -> Environment:
    """Debian 12's /usr/bin/python3 as the probe reports it, with python3-gi and python3-cryptography."""
    dists = (
        dist("PyGObject", "3.42.2", "pycairo>=1.16.0", site=DIST_PACKAGES),
        Distribution("cryptography", "38.0.4", ("cffi>=1.12",), f"{DIST_PACKAGES}/cryptography-38.0.4.dist-info",
                     DIST_PACKAGES),
        Distribution("cryptography", "38.0.4", ("cffi>=1.12",), f"{DIST_PACKAGES}/cryptography.egg-info",
                     DIST_PACKAGES, kind="egg-info", active=False),
        dist("cffi", "1.15.1", site=DIST_PACKAGES),
        *extra,
    )
    return Environment(prefix="/usr", python="/usr/bin/python3", exists=True, runs=True, version="3.11.2",
                       executable="/usr/bin/python3", base_prefix="/usr", markers=MARKERS,
                       site_packages=("/usr/local/lib/python3.11/dist-packages", DIST_PACKAGES),
                       distributions=dists, externally_managed=externally_managed)


def host(default: Environment, *envs: Environment):
    return replace(facts(*envs, default=default), configured_envs=())


def evaluate(spec: HostSpec, host_facts) -> dict:
    return {r.id: r for r in GRAPH.evaluate(spec, host_facts)}


def test_debian_python_with_python3_gi_is_green_when_the_job_needs_nothing_of_it():
    """No flags on a stock Debian host: pygobject's missing pycairo and cryptography's two metadata
    folders are noted as not gated, and no check of the interpreter or its packages is a problem."""
    results = evaluate(HostSpec("ct200", None), host(debian_python()))
    consistent = results["packages.consistent"]
    assert consistent.status is Status.PASS, consistent.message
    assert "pygobject 3.42.2 requires pycairo" in consistent.message
    assert "cryptography: 2 metadata folders" in consistent.message
    assert any("pycairo" in line for line in consistent.details["not_gated"])
    assert consistent.remedy is None
    judged = [results[i] for i in ("python.venv", "python.pip-path", "packages.required", "packages.consistent")]
    assert not [r.id for r in judged if r.status.is_problem]


def test_what_the_job_requires_of_the_system_interpreter_is_judged():
    """--require pygobject: its missing pycairo fails; cryptography's duplicate, untouched by the job, stays a note."""
    results = evaluate(HostSpec("ct200", None, requires=("pygobject",)), host(debian_python()))
    consistent = results["packages.consistent"]
    assert consistent.status is Status.FAIL
    first, *rest = consistent.message.split("\n")
    assert first == "pip check: 1 problem(s):"
    assert "pygobject 3.42.2 requires pycairo" in rest[0]
    assert any("cryptography: 2 metadata folders" in line for line in rest[1:])


def test_the_job_needs_what_its_requirements_require_in_turn():
    """--require requests: requests' own missing urllib3 concerns the job (transitively) and fails."""
    requests = dist("requests", "2.31.0", "urllib3<3,>=1.21.1", "idna", site=DIST_PACKAGES)
    idna = dist("idna", "3.3", site=DIST_PACKAGES)
    results = evaluate(HostSpec("ct200", None, requires=("requests",)), host(debian_python(requests, idna)))
    consistent = results["packages.consistent"]
    assert consistent.status is Status.FAIL
    assert "requests 2.31.0 requires urllib3, which is not installed." in consistent.message
    assert "pygobject" not in consistent.message.split("not gated")[0]


def test_nothing_is_ever_installed_into_an_externally_managed_interpreter():
    """A requirement the system interpreter lacks: the remedy is a venv and init, with no pip command to run."""
    results = evaluate(HostSpec("ct200", None, requires=("tiktoken", "pygobject")), host(debian_python()))
    for check_id in ("packages.required", "packages.consistent"):
        remedy = results[check_id].remedy
        assert remedy is not None and not remedy.automatic and remedy.argv == (), check_id
        assert "externally managed (PEP 668)" in remedy.summary
        assert "python3 -m venv" in remedy.summary and "`envdoctor init ct200`" in remedy.summary


def test_a_chosen_venv_is_judged_whole_even_on_a_debian_host():
    """With --venv the environment is the job's: every inconsistency in it fails, and installs are commands."""
    venv = env("/root/venv", dist("PyGObject", "3.42.2", "pycairo>=1.16.0"))
    results = evaluate(HostSpec("ct200", None, venv="/root/venv"), facts(venv, default=debian_python()))
    consistent = results["packages.consistent"]
    assert consistent.status is Status.FAIL
    assert plan_first_install(consistent.remedy).argv[:4] == ("/root/venv/bin/python", "-m", "pip", "install")


def test_the_system_interpreter_is_described_with_the_venv_to_choose_and_the_init_line():
    """python.venv passes on the system interpreter, names it as such, and names the best venv and `envdoctor init`."""
    stack = env("/root/venv_sglang211", dist("transformers", "4.57.1"), dist("sglang", "0.5.2"))
    result = evaluate(HostSpec("ct200", None), host(debian_python(), stack))["python.venv"]
    assert result.status is Status.PASS
    assert "the system's own interpreter (externally managed: PEP 668)" in result.message
    assert "pass --venv /root/venv_sglang211 (it has transformers 4.57.1, sglang 0.5.2)" in result.message
    assert "`envdoctor init ct200`" in result.message


def test_a_distro_interpreter_without_the_marker_is_the_system_one_too():
    """An older Debian/Ubuntu python3 (dist-packages, no EXTERNALLY-MANAGED) is described, not gated; a pyenv one is not."""
    old_debian = debian_python(externally_managed=False)
    assert old_debian.is_system and not old_debian.externally_managed
    assert evaluate(HostSpec("h", None), host(old_debian))["packages.consistent"].status is Status.PASS
    pyenv = replace(old_debian, prefix="/root/.pyenv/versions/3.11.7", base_prefix="/root/.pyenv/versions/3.11.7",
                    executable="/root/.pyenv/versions/3.11.7/bin/python3.11",
                    site_packages=("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages",))
    assert not pyenv.is_system
    assert evaluate(HostSpec("h", None), host(pyenv))["packages.consistent"].status is Status.FAIL


def test_a_venv_is_never_the_system_interpreter():
    """A venv (prefix differs from its base) is not the system's, whatever its base is."""
    assert not env("/root/venv").is_system
    assert not replace(env("/root/venv"), externally_managed=True).is_system
