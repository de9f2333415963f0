"""packages.consistent against real `pip check` and `uv pip check` (the oracles) on a corpus of
broken venvs built with real packages from PyPI, read over a real sshd: they must name the same
problems (where uv reads a venv otherwise than Python and pip, NOT_AS_UV says so)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import venv as venv_module
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.conftest import make_venv, uv_executable

pytestmark = pytest.mark.e2e

SITE = "lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def oracle(tmp_path_factory) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The newest pip from PyPI, run against any venv with `pip --python VENV/bin/python ...`."""
    pip_venv = make_venv(tmp_path_factory.mktemp("oracle") / "pip", ["--upgrade", "pip"])

    def pip(target: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(pip_venv / "bin" / "python"), "-m", "pip", "--python", str(target / "bin" / "python"),
             "--disable-pip-version-check", *args],
            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )

    return pip


def site(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def dist_info(venv: Path, name: str) -> Path:
    found = [p for p in site(venv).glob("*.dist-info") if canonicalize_name(p.name.split("-")[0]) == name]
    assert len(found) == 1, found
    return found[0]


def set_header(metadata: Path, name: str, value: str, *, add: bool = False) -> None:
    """Replace (or add before the first one) a header of a METADATA file, leaving the rest as is."""
    head, sep, body = metadata.read_text(encoding="utf-8").partition("\n\n")
    lines = head.split("\n")
    if add:
        lines.insert(2, f"{name}: {value}")  # after Metadata-Version and Name
    else:
        lines[next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))] = f"{name}: {value}"
    metadata.write_text("\n".join(lines) + sep + body, encoding="utf-8")


def build_corpus(root: Path, pip: Callable[..., subprocess.CompletedProcess[str]]) -> dict[str, Path]:
    """Each case is a venv broken one way; built with pip itself, metadata edited where pip cannot."""
    cases: dict[str, Path] = {}

    def new(name: str, *install: str) -> Path:
        path = root / name
        venv_module.EnvBuilder(with_pip=False, clear=True).create(path)
        if install:
            done = pip(path, "install", "-q", *install)
            assert done.returncode == 0, done.stderr
        cases[name] = path
        return path

    new("clean", "click")  # colorama only on Windows: a false marker
    missing = new("missing", "requests")
    assert pip(missing, "uninstall", "-y", "idna").returncode == 0
    new("conflict", "requests")
    assert pip(cases["conflict"], "install", "-q", "--no-deps", "urllib3==1.20").returncode == 0
    # pytest's tomli/exceptiongroup apply below Python 3.11 only; pluggy is missing.
    new("marker", "--no-deps", "pytest", "iniconfig", "packaging", "pygments")
    # Jinja2 vs jinja2-3.0.3.dist-info, MarkupSafe vs markupsafe: names compared as PEP 503 does.
    new("normalization", "--no-deps", "Flask", "Jinja2==3.0.3", "Werkzeug", "itsdangerous", "click", "blinker",
        "jaraco.functools", "more_itertools")
    duplicate = new("duplicate", "requests")
    good = dist_info(duplicate, "urllib3")
    old = good.with_name("urllib3-1.20.dist-info")
    shutil.copytree(good, old)
    set_header(old / "METADATA", "Version", "1.20")
    bad_req = new("malformed-requires", "six", "python-dateutil")
    set_header(dist_info(bad_req, "six") / "METADATA", "Requires-Dist", "requests >>= 2", add=True)
    bad_version = new("malformed-version", "six")
    info = dist_info(bad_version, "six")
    set_header(info / "METADATA", "Version", "banana")
    info.rename(info.with_name("six-banana.dist-info"))
    project = root / "editable-project"
    (project / "edproj").mkdir(parents=True)
    (project / "edproj" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "edproj"\nversion = "0.1"\ndependencies = ["six>=99", "not-a-real-dist-xyz"]\n'
        '[tool.setuptools]\npackages = ["edproj"]\n')
    new("editable", "six", "setuptools")
    done = pip(cases["editable"], "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(project))
    assert done.returncode == 0, done.stderr
    pth = new("pth")
    extra = root / "pth-extra"
    assert pip(pth, "install", "-q", "--no-deps", "--target", str(extra), "requests").returncode == 0
    (site(pth) / "extra.pth").write_text(f"{extra}\n")
    return cases


def pip_findings(done: subprocess.CompletedProcess[str]) -> set[tuple[str, ...]]:
    """pip check's lines as (kind, distribution, dependency[, installed version])."""
    found: set[tuple[str, ...]] = set()
    for line in (done.stdout + done.stderr).splitlines():
        if m := re.match(r"^(\S+) \S+ requires (\S+), which is not installed\.$", line):
            found.add(("missing", canonicalize_name(m[1]), canonicalize_name(m[2])))
        elif m := re.match(r"^(\S+) \S+ has requirement (.+), but you have (\S+) (\S+)\.$", line):
            found.add(("conflict", canonicalize_name(m[1]), canonicalize_name(m[3]), m[4]))
        elif m := re.search(r"Error parsing (?:dependencies of|requirements for) (\S+):", line):
            found.add(("parse", canonicalize_name(m[1])))
    return found


def envdoctor_findings(pip_check: dict) -> set[tuple[str, ...]]:
    found = {("missing", m["distribution"], m["name"]) for m in pip_check["missing"]}
    found |= {("conflict", c["distribution"], c["name"], c["installed"]) for c in pip_check["conflicts"]}
    found |= {("parse", e["distribution"]) for e in pip_check["parse_errors"]}
    return found


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, oracle) -> dict[str, Path]:
    return build_corpus(tmp_path_factory.mktemp("corpus"), oracle)


@pytest.fixture(scope="module")
def report(corpus, run_cli, sshd, tmp_path_factory) -> dict[str, dict]:
    """One envdoctor run over sshd: an inventory host per corpus venv, all on the test server."""
    inventory = tmp_path_factory.mktemp("inv") / "envdoctor.toml"
    inventory.write_text("".join(f'[hosts.{name}]\nssh = "ct200"\nvenv = "{path}"\n' for name, path in corpus.items()))
    res = run_cli("check", *corpus, "--config", str(inventory), "--ssh-config", str(sshd.ssh_config),
                  "--only", "packages.consistent", "--format", "json")
    assert res.exit_status == 1, res.stderr
    hosts = json.loads(res.stdout)["hosts"]
    return {h["host"]: next(r for r in h["results"] if r["id"] == "packages.consistent") for h in hosts}


CASES = ["clean", "missing", "conflict", "marker", "normalization", "duplicate", "malformed-requires",
         "malformed-version", "editable", "pth"]


@pytest.mark.parametrize("case", CASES)
def test_packages_consistent_agrees_with_pip_check(case, corpus, report, oracle):
    """pip check's verdict and each of its findings (missing, conflict, parse error) equal envdoctor's."""
    done = oracle(corpus[case], "check")
    result = report[case]
    pip_check = result["details"]["pip_check"]
    assert pip_check["ok"] == (done.returncode == 0), (done.stdout, done.stderr, result["message"])
    assert envdoctor_findings(pip_check) == pip_findings(done), (done.stdout, done.stderr, result["message"])
    expected_status = "pass" if done.returncode == 0 and not result["details"]["duplicates"] else "fail"
    assert result["status"] == expected_status
    assert result["message"].split("\n")[0].startswith("pip check: ")


def uv_findings(done: subprocess.CompletedProcess[str]) -> set[tuple[str, ...]]:
    """uv pip check's lines in the same shape as pip_findings (uv names the specifier, pip the name)."""
    found: set[tuple[str, ...]] = set()
    text = done.stdout + done.stderr
    for m in re.finditer(r"The package `([^`]+)` requires `([A-Za-z0-9._-]+)[^`]*`, but (?:it's not installed|`([^`]+)` is installed)", text):
        if m[3] is None:
            found.add(("missing", canonicalize_name(m[1]), canonicalize_name(m[2])))
        else:
            found.add(("conflict", canonicalize_name(m[1]), canonicalize_name(m[2]), m[3]))
    found |= {("parse", canonicalize_name(n)) for n in re.findall(r"The package `([^`]+)` is broken or incomplete", text)}
    found |= {("duplicate", canonicalize_name(n)) for n in re.findall(r"The package `([^`]+)` has multiple installed", text)}
    return found


#: Where uv pip check reads a venv otherwise than its Python and pip do: it does not follow a
#: .pth file's path entries (it checks 0 packages there, pip 1), so envdoctor follows pip.
NOT_AS_UV = {"pth"}


@pytest.mark.parametrize("case", [c for c in CASES if c not in NOT_AS_UV])
def test_packages_consistent_agrees_with_uv_pip_check(case, corpus, report):
    """uv pip check's verdict and findings equal envdoctor's, duplicate metadata folders included
    (uv reports them; pip check does not). A version uv cannot parse stops uv (exit 2): a failure too."""
    done = subprocess.run([uv_executable(), "pip", "check", "--python", str(corpus[case] / "bin" / "python")],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    result = report[case]
    assert (result["status"] == "pass") == (done.returncode == 0), (done.stdout, done.stderr, result["message"])
    if done.returncode == 2:  # uv stopped at metadata it cannot read: no findings to compare
        assert case == "malformed-version" and result["details"]["pip_check"]["parse_errors"], done.stderr
        return
    ours = envdoctor_findings(result["details"]["pip_check"])
    ours |= {("duplicate", d["distribution"]) for d in result["details"]["duplicates"]}
    assert ours == uv_findings(done), (done.stdout, done.stderr, result["message"])


def test_corpus_is_broken_where_it_should_be(corpus, oracle):
    """The corpus holds what it claims: pip check passes only on the clean venv and the duplicate's
    (whose first-listed folder decides), and fails on every other case."""
    verdicts = {case: oracle(corpus[case], "check").returncode for case in CASES}
    assert verdicts["clean"] == 0
    assert all(verdicts[c] == 1 for c in CASES if c not in ("clean", "duplicate")), verdicts


def test_duplicate_metadata_names_both_and_uses_importlib_metadata_version(corpus, report):
    """Two urllib3 metadata folders in one site-packages: both named, and the version checked is
    the one importlib.metadata returns in that venv."""
    venv = corpus["duplicate"]
    used = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
                           "print(m.version('urllib3'), m.distribution('urllib3')._path)"],
                          capture_output=True, text=True, check=True, cwd="/").stdout.split()
    duplicates = report["duplicate"]["details"]["duplicates"]
    assert len(duplicates) == 1
    assert duplicates[0]["used_version"] == used[0]
    assert duplicates[0]["used"] == used[1]
    folders = sorted(p.name for p in site(venv).glob("urllib3-*.dist-info"))
    for folder in folders:
        assert folder in report["duplicate"]["message"]
    assert "duplicate metadata: urllib3: 2 metadata folders" in report["duplicate"]["message"]


def test_malformed_requires_dist_names_distribution_and_line(report):
    """A malformed Requires-Dist is a failure naming the distribution and the line, as pip does."""
    errors = report["malformed-requires"]["details"]["pip_check"]["parse_errors"]
    assert [(e["distribution"], e["line"]) for e in errors] == [("six", "Requires-Dist: requests >>= 2")]
    assert "Error parsing dependencies of six" in report["malformed-requires"]["message"]
