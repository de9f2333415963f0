"""packages.tags against `uv pip check` on a real venv built to mismatch: real wheels from PyPI
unpacked into its site-packages as an installer lays them out (a cp3(N+1) wheel, a musllinux
and an aarch64 wheel, a py2-only wheel whose Requires-Python excludes 3), some with their WHEEL
or METADATA edited (a manylinux_2_99 and a manylinux_2_34 tag, a debug-ABI tag, a
Requires-Python above the interpreter), beside wheels that fit. uv reads the same files: its
findings must be envdoctor's, on this host's glibc and on a glibc 2.31 host (uv's
--python-platform x86_64-manylinux_2_31; envdoctor's judge told glibc 2.31)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import venv as venv_module
import zipfile
from pathlib import Path

import pytest

from envdoctor.engine.facts import canonicalize_name
from envdoctor.install.wheel_tags import judge_wheels
from envdoctor.probe.host.env.wheel_tags import wheel_tags_section
from tests.conftest import uv_executable

CUR = f"{sys.version_info[0]}{sys.version_info[1]}"
NEXT = f"{sys.version_info[0]}{sys.version_info[1] + 1}"
#: (requirement, pip download options, WHEEL tag to write instead or None, Requires-Python to write or None)
WHEELS = [
    ("markupsafe==3.0.2", ["--platform", "manylinux2014_x86_64", "--python-version", NEXT], None, None),
    ("pyyaml==6.0.2", ["--platform", "manylinux2014_x86_64", "--python-version", CUR],
     f"cp{CUR}-cp{CUR}-manylinux_2_99_x86_64", None),
    ("msgpack==1.1.0", ["--platform", "manylinux2014_x86_64", "--python-version", CUR],
     f"cp{CUR}-cp{CUR}-manylinux_2_34_x86_64", None),
    ("charset-normalizer==3.4.2", ["--platform", "musllinux_1_2_x86_64", "--python-version", CUR], None, None),
    ("ujson==5.10.0", ["--platform", "manylinux2014_aarch64", "--python-version", CUR], None, None),
    ("futures==3.3.0", ["--python-version", "2.7"], None, None),
    ("six==1.17.0", [], None, f">=3.{sys.version_info[1] + 1}"),
    ("bcrypt==4.3.0", ["--platform", "manylinux2014_x86_64", "--python-version", CUR], None, None),
    ("wrapt==1.17.2", ["--platform", "manylinux2014_x86_64", "--python-version", CUR],
     f"cp{CUR}-cp{CUR}d-manylinux2014_x86_64", None),
    ("idna==3.10", [], None, None),
    ("certifi==2025.1.31", [], None, ">=3.6"),
]


def unpack(wheel: Path, site: Path, tag: str | None, requires_python: str | None) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
        info = next(n.split("/")[0] for n in archive.namelist() if n.split("/")[0].endswith(".dist-info"))
    if tag:
        path = site / info / "WHEEL"
        kept = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("Tag:")]
        path.write_text("\n".join([*kept, f"Tag: {tag}"]) + "\n\n")
    if requires_python:
        path = site / info / "METADATA"
        head, _, body = path.read_text().partition("\n\n")
        head = "\n".join(line for line in head.splitlines() if not line.startswith("Requires-Python:"))
        path.write_text(f"{head}\nRequires-Python: {requires_python}\n\n{body}")


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (no pip: only these distributions) holding the wheels above, unpacked."""
    root = tmp_path_factory.mktemp("tags")
    venv = root / "venv"
    venv_module.EnvBuilder(with_pip=False).create(venv)
    site = next(venv.glob("lib/python3*/site-packages"))
    for requirement, options, tag, requires_python in WHEELS:
        folder = root / "dl" / requirement
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "--disable-pip-version-check", "-d", str(folder), *options, requirement], check=True)
        unpack(next(folder.glob("*.whl")), site, tag, requires_python)
    return venv


@pytest.fixture(scope="module")
def uv() -> str:
    return uv_executable()


def uv_findings(uv: str, venv: Path, *platform: str) -> set[tuple[str, str]]:
    """(distribution, tag | requires-python) for each incompatibility `uv pip check` reports."""
    res = subprocess.run([uv, "pip", "check", "--python", str(venv / "bin" / "python"), *platform],
                         capture_output=True, text=True, timeout=120)
    text = res.stdout + res.stderr
    found = {(canonicalize_name(n), "tag") for n in re.findall(r"The package `([^`]+)` was built for a different", text)}
    found |= {(canonicalize_name(n), "requires-python")
              for n in re.findall(r"The package `([^`]+)` requires Python", text)}
    assert found or res.returncode == 0, text
    return found


def ours(data: dict) -> set[tuple[str, str]]:
    return {(canonicalize_name(m.name), m.kind) for m in judge_wheels(data).mismatches}


def test_envdoctor_reports_what_uv_pip_check_reports_on_this_host(run_cli, mismatched, uv):
    """Through the CLI and the real probe: the same distributions, for the same reason (tag or Requires-Python)."""
    res = run_cli("check", "local", "--venv", str(mismatched), "--only", "packages.tags", "--format", "json")
    assert res.exit_status == 1, res.stderr
    result = next(r for r in json.loads(res.stdout)["hosts"][0]["results"] if r["id"] == "packages.tags")
    assert result["status"] == "fail"
    found = {(canonicalize_name(m["name"]), m["kind"]) for m in result["details"]["mismatches"]}
    expected = uv_findings(uv, mismatched)
    assert found == expected
    assert ("pyyaml", "tag") in found and ("markupsafe", "tag") in found and ("six", "requires-python") in found
    assert ("msgpack", "tag") not in found  # manylinux_2_34 fits this host's glibc 2.36


def test_envdoctor_reports_what_uv_reports_for_a_glibc_2_31_host(mismatched, uv):
    """The same files judged for glibc 2.31: manylinux_2_34 no longer fits, for uv and for envdoctor."""
    data = wheel_tags_section({"prefix": str(mismatched)}, None)
    data["interpreter"]["glibc"] = "glibc 2.31"
    found = ours(data)
    assert found == uv_findings(uv, mismatched, "--python-platform", "x86_64-manylinux_2_31")
    assert ("msgpack", "tag") in found


def test_the_failure_names_the_wheel_file_and_its_tag(mismatched):
    """Each mismatch names its WHEEL (or METADATA) file and the tag (or specifier) that does not fit."""
    data = wheel_tags_section({"prefix": str(mismatched)}, None)
    by_name = {canonicalize_name(m.name): m for m in judge_wheels(data).mismatches}
    pyyaml = by_name["pyyaml"]
    assert pyyaml.file.endswith("PyYAML-6.0.2.dist-info/WHEEL") and "manylinux_2_99_x86_64" in pyyaml.what
    assert "needs glibc 2.99 and the host has glibc" in pyyaml.sentence()
    assert by_name["ujson"].reason.startswith("it is built for aarch64")
    assert by_name["charset-normalizer"].reason.startswith("it is built for musl libc")
    assert by_name["six"].file.endswith("six-1.17.0.dist-info/METADATA")
    assert by_name["six"].what == f">=3.{sys.version_info[1] + 1}"
