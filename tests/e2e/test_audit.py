"""envdoctor audit over a real sshd, on real venvs with real PyPI packages."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv as venv_module
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

PACKAGES = ["six", "idna", "tqdm"]


@pytest.fixture(scope="session")
def audit_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test packages' wheels, downloaded once per session."""
    folder = tmp_path_factory.mktemp("audit-wheels")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder), *PACKAGES],
                   check=True)
    return folder


def pip_into(venv: Path, wheels: Path, *args: str) -> None:
    # The controller's pip installs into the venv (--python): the venv itself needs no pip.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-index", "--find-links", str(wheels), *args], check=True)


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory, audit_wheels: Path) -> Path:
    """A venv (without pip) with six, idna and tqdm installed from their wheels; built once."""
    path = tmp_path_factory.mktemp("audit-base") / "base venv"
    venv_module.EnvBuilder(with_pip=False, clear=True).create(path)
    pip_into(path, audit_wheels, *PACKAGES)
    return path


@pytest.fixture
def venv(base_venv: Path, tmp_path: Path) -> Path:
    """A private copy of the base venv for one test to change."""
    target = tmp_path / "venv copy"
    shutil.copytree(base_venv, target, symlinks=True)
    return target


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def audit(run_cli, sshd, venv: Path, *extra: str):
    res = run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
                  "--format", "json", *extra)
    assert "Traceback" not in res.stderr, res.stderr
    data = json.loads(res.stdout)
    return res, data["hosts"][0]


def by_path(host: dict) -> dict[str, dict]:
    return {f["path"]: f for f in host["files"]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_ledger(venv: Path, patch: str, file: Path, before: str, after: str) -> None:
    """Ledger lines as the patch engine writes them (envdoctor/patching/ledger.py): intent, then done."""
    folder = venv / ".envdoctor"
    folder.mkdir(mode=0o700, exist_ok=True)
    common = {"op": "apply", "patch": patch, "file": str(file), "distribution": "six", "version": "1.17.0",
              "sha256_before": before, "sha256_after": after, "backup": "", "time": "2026-01-01T00:00:00Z",
              "envdoctor": "0.1.0"}
    with open(folder / "ledger.jsonl", "a") as handle:
        for phase in ("intent", "done"):
            handle.write(json.dumps({**common, "phase": phase}) + "\n")


def patch_six(venv: Path) -> tuple[Path, str, str]:
    """Edit six.py and record it in the ledger as envdoctor's patch; returns (file, before, after)."""
    target = site_packages(venv) / "six.py"
    before = sha256(target)
    target.write_text(target.read_text() + "\n# patched by envdoctor (test)\n")
    after = sha256(target)
    write_ledger(venv, "test-six-patch", target, before, after)
    return target, before, after


def test_clean_venv_has_no_differences(run_cli, sshd, venv):
    """A freshly installed venv audits clean (exit 0), with every RECORD-listed file verified."""
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 0, res.stdout
    assert host["files"] == []
    assert host["stats"]["files"] > 50 and host["stats"]["hashed"] == host["stats"]["files"]
    names = {d["name"].lower() for d in host["distributions"]}
    assert {"six", "idna", "tqdm"} <= names


def test_hand_edit_deleted_file_and_stray_pth(run_cli, sshd, venv):
    """A hand edit is modified, a deleted file missing, a stray .pth extra; each named with its distribution."""
    site = site_packages(venv)
    edited = site / "idna" / "core.py"
    edited.write_text(edited.read_text().replace("def ", "def  ", 1))
    (site / "idna" / "codec.py").unlink()
    (site / "zz-stray.pth").write_text("import os\n")
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 1
    files = by_path(host)
    assert files[str(edited)]["state"] == "modified" and files[str(edited)]["distribution"] == "idna"
    assert files[str(site / "idna" / "codec.py")]["state"] == "missing"
    assert files[str(site / "zz-stray.pth")]["state"] == "extra"
    assert len(files) == 3


def test_non_utf8_filename_is_extra_and_round_trips(run_cli, sshd, venv):
    """A .py with non-UTF-8 bytes in its name inside a package is extra; its exact bytes come back."""
    site = site_packages(venv)
    raw = os.fsencode(site / "idna") + b"/caf\xe9 \xff.py"
    with open(raw, "wb") as handle:
        handle.write(b"print('hi')\n")
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 1
    [item] = host["files"]
    assert item["state"] == "extra" and item["distribution"] == "idna"
    assert base64.b64decode(item["path_bytes_b64"]) == raw
    assert item["path"].endswith("caf\\xe9 \\xff.py")


def test_recorded_patch_is_patched_and_exit_0(run_cli, sshd, venv):
    """A file changed by a recorded envdoctor patch, as recorded, is `patched` and the audit passes."""
    target, _, _ = patch_six(venv)
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 0, res.stdout
    [item] = host["files"]
    assert item["path"] == str(target) and item["state"] == "patched" and item["patches"] == ["test-six-patch"]


def test_edit_on_top_of_a_patch_is_modified(run_cli, sshd, venv):
    """A patched file changed again by hand is `modified`, not `patched`."""
    target, _, _ = patch_six(venv)
    target.write_text(target.read_text() + "# and a hand edit\n")
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 1
    assert by_path(host)[str(target)]["state"] == "modified"


def test_reinstall_after_patch_is_reverted_and_check_fails(run_cli, sshd, venv, audit_wheels):
    """pip --force-reinstall drops a recorded patch: audit says reverted; check's audit.patches fails."""
    target, _, _ = patch_six(venv)
    pip_into(venv, audit_wheels, "--force-reinstall", "--no-deps", "six")
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 1
    item = by_path(host)[str(target)]
    assert item["state"] == "reverted" and item["patches"] == ["test-six-patch"]
    checked = run_cli("check", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv),
                      "--only", "audit.patches", "--format", "json")
    result = {r["id"]: r for r in json.loads(checked.stdout)["hosts"][0]["results"]}["audit.patches"]
    assert result["status"] == "fail" and "test-six-patch" in result["message"]
    assert checked.exit_status == 1


def test_distribution_without_record_is_named(run_cli, sshd, venv):
    """A distutils-style install (bare .egg-info, no RECORD) is reported as unverifiable, not as extra code."""
    site = site_packages(venv)
    (site / "oldlib-1.0-py3.11.egg-info").write_text("Metadata-Version: 1.0\nName: oldlib\nVersion: 1.0\n")
    (site / "oldlib").mkdir()
    (site / "oldlib" / "__init__.py").write_text("x = 1\n")
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 0, res.stdout
    assert host["files"] == []
    assert any(n.startswith("oldlib 1.0:") and "without RECORD" in n for n in host["notes"])


def test_cache_skips_unchanged_and_catches_same_size_same_mtime_rewrite(run_cli, sshd, venv):
    """A re-audit hashes nothing; a same-size rewrite with its mtime put back is still caught; --full rehashes."""
    first_res, first = audit(run_cli, sshd, venv)
    assert first_res.exit_status == 0 and first["stats"]["hashed"] > 0
    _, again = audit(run_cli, sshd, venv)
    assert again["stats"]["hashed"] == 0 and again["stats"]["cached"] == first["stats"]["files"]
    # Settled by now (the interpreter may have written bytecode while the first audit ran):
    # the unchanged venv is only statted and the last result replayed.
    _, third = audit(run_cli, sshd, venv)
    assert third["stats"]["snapshot"].startswith("replayed") and third["stats"]["files"] == first["stats"]["files"]

    target = site_packages(venv) / "six.py"
    st = target.stat()
    data = target.read_bytes()
    with open(target, "r+b") as handle:  # in place: same inode, same size
        handle.write(b"#" + data[1:2] + data[2:] if data[:1] != b"#" else b"!" + data[1:])
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns and target.stat().st_size == st.st_size
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 1
    assert by_path(host)[str(target)]["state"] == "modified"
    assert host["stats"]["hashed"] >= 1

    _, full = audit(run_cli, sshd, venv, "--full")
    assert full["stats"]["hashed"] == full["stats"]["files"] and full["stats"]["cache"].startswith("ignored")
    cache = venv / ".envdoctor" / "audit-cache"
    assert cache.stat().st_mode & 0o077 == 0


def test_text_and_junit_reports(run_cli, sshd, venv, tmp_path):
    """Text groups differences by distribution; JUnit has a failing case for the distribution."""
    (site_packages(venv) / "idna" / "extra_mod.py").write_text("x = 1\n")
    args = ["audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv)]
    text = run_cli(*args)
    assert text.exit_status == 1
    assert "idna: 1 extra" in text.stdout and "extra_mod.py" in text.stdout
    out = tmp_path / "audit.xml"
    junit = run_cli(*args, "--format", "junit", "--output", str(out))
    assert junit.exit_status == 1
    cases = {c.get("name"): c for c in ET.parse(out).getroot().iter("testcase")}
    assert cases["idna"].find("failure") is not None


SPECULATORS_PATCH = "speculators-tokenizer-trust-remote-code"


@pytest.fixture(scope="module")
def speculators_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A venv with the real speculators 0.3.0 wheel (no deps), and the wheel; built once."""
    wheels = tmp_path_factory.mktemp("audit-speculators-wheel")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                    "speculators==0.3.0"], check=True)
    wheel = next(wheels.glob("speculators-0.3.0-*.whl"))
    path = tmp_path_factory.mktemp("audit-speculators") / "spec venv"
    venv_module.EnvBuilder(with_pip=False, clear=True).create(path)
    pip_into(path, wheels, "--no-deps", str(wheel))
    return path, wheel


def test_fix_patch_is_patched_then_reinstall_reverts_and_fix_reapplies(run_cli, sshd, speculators_venv):
    """A patch applied by `envdoctor fix` audits as patched; a reinstall makes it reverted; fix puts it back."""
    venv, wheel = speculators_venv
    ssh = ["ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(venv)]
    fix = ["fix", *ssh, "--trust-remote-code", "--only", f"patch.{SPECULATORS_PATCH}", "--only", "audit.patches"]
    fixed = run_cli(*fix, "--format", "json")
    assert fixed.exit_status == 0, fixed.stdout + fixed.stderr
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 0, res.stdout
    assert [f["state"] for f in host["files"]] == ["patched"]
    assert host["files"][0]["patches"] == [SPECULATORS_PATCH]

    pip_into(venv, wheel.parent, "--force-reinstall", "--no-deps", str(wheel))
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 1 and [f["state"] for f in host["files"]] == ["reverted"]

    again = run_cli(*fix, "--format", "json")
    assert again.exit_status == 0, again.stdout + again.stderr
    before = {r["id"]: r for r in json.loads(again.stdout)["hosts"][0]["before"]}
    assert before["audit.patches"]["status"] == "fail"
    res, host = audit(run_cli, sshd, venv)
    assert res.exit_status == 0 and [f["state"] for f in host["files"]] == ["patched"]


def test_missing_venv_and_relative_venv_are_clear_errors(run_cli, sshd, tmp_path):
    """A venv that does not exist is the host's error (exit 1); a relative --venv is a usage error (exit 2)."""
    res = run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", str(tmp_path / "nope"))
    assert res.exit_status == 1 and "no such directory" in res.stdout and "Traceback" not in res.stderr
    bad = run_cli("audit", "ct200", "--ssh-config", str(sshd.ssh_config), "--venv", "relative/venv")
    assert bad.exit_status == 2 and bad.stderr.startswith("envdoctor: error:")


PYTHON36 = "/root/.pyenv/versions/3.6.15/bin/python3.6"


@pytest.mark.skipif(not os.path.exists(PYTHON36) and shutil.which("python3.6") is None,
                    reason="needs a Python 3.6 interpreter (the real authority on its bytecode)")
def test_python36_venv_bytecode_belongs_to_its_sources(run_cli, sshd, tmp_path):
    """Python 3.6 lays a .pyc header out without PEP 552's flags word: a venv it made and
    compiled (ensurepip) has no .pyc flagged when its own interpreter runs the probe."""
    python36 = PYTHON36 if os.path.exists(PYTHON36) else shutil.which("python3.6")
    subprocess.run([python36, "-m", "venv", str(tmp_path / "v36")], check=True)
    # Sources dated on an even second, compiled again by Python 3.6 itself: read in 3.7's
    # layout, such a header's mtime would pass for flags with bit 0 clear (timestamp-based).
    site = site_packages(tmp_path / "v36")
    for source in site.rglob("*.py"):
        os.utime(source, (1_700_000_000, 1_700_000_000))
    subprocess.run([python36, "-m", "compileall", "-q", "-f", str(site)], check=True)
    res, host = audit(run_cli, sshd, tmp_path / "v36", "--full")
    assert host["python"].startswith(str(tmp_path / "v36")), host["python"]
    assert host["stats"]["pyc_checked"] > 100
    assert [f["path"] for f in host["files"] if f["path"].endswith(".pyc")] == []
    assert res.exit_status == 0, res.stdout
