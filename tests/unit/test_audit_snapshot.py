"""The audit snapshot: an unchanged environment is replayed after a stat pass; any change to a
file, a folder, a .pyc or the metadata is audited again; a racy audit is never kept."""

from __future__ import annotations

import os
import py_compile

import pytest

from envdoctor.probe.host.audit import hashing as audit_hash
from envdoctor.probe.host.audit import snapshot as audit_snapshot
from tests.unit.test_audit import fake_env, run_section, settle, write_dist  # noqa: F401  # fake_env is a fixture

REPLAYED = "replayed"


@pytest.fixture
def env(fake_env, monkeypatch):  # noqa: F811  # the fixture imported above
    """A settled environment of two distributions, with bytecode and a shebang script, audited once."""
    prefix, site = fake_env
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_bytes(b"x = 1\n")
    (site / "pkg" / "mod.py").write_bytes(b"y = 2\n")
    py_compile.compile(str(site / "pkg" / "mod.py"), doraise=True)
    write_dist(site, "pkg", "1.0", [("pkg/__init__.py", b"x = 1\n", "b64"), ("pkg/mod.py", b"y = 2\n", "b64")])
    script = f"#!{prefix}/bin/python3\nprint('t')\n".encode()
    (prefix / "bin" / "tool").write_bytes(script)
    write_dist(site, "tool", "2.0", [("../../../bin/tool", script, "b64")])
    settle(monkeypatch, prefix)
    first, items = run_section(prefix)
    assert items == {} and first["stats"]["snapshot"] == "saved"
    return prefix, site, first


def test_unchanged_environment_is_replayed_with_the_same_result(env):
    prefix, _, first = env
    again, items = run_section(prefix)
    assert again["stats"]["snapshot"].startswith(REPLAYED)
    assert items == {} and again["stats"]["hashed"] == 0 and again["stats"]["cache"] == "used"
    assert again["distributions"] == first["distributions"]
    assert again["stats"]["files"] == first["stats"]["files"] == 3


def test_same_size_rewrite_with_mtime_put_back_is_audited_again(env, monkeypatch):
    """In place, same size, mtime restored: only the ctime differs, and that is enough."""
    prefix, site, _ = env
    target = site / "pkg" / "__init__.py"
    st = target.stat()
    with open(target, "r+b") as handle:
        handle.write(b"x = 9\n")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    data, items = run_section(prefix)
    assert not data["stats"]["snapshot"].startswith(REPLAYED)
    assert items[str(target)]["state"] == "modified"


def test_new_pth_file_is_found(env):
    prefix, site, _ = env
    (site / "evil.pth").write_bytes(b"import os\n")
    data, items = run_section(prefix)
    assert not data["stats"]["snapshot"].startswith(REPLAYED)
    assert items[str(site / "evil.pth")]["state"] == "extra"


def test_pyc_overwritten_in_place_is_found(env):
    """cp over an existing .pyc keeps its folder's mtime: the .pyc's own stat must be watched."""
    prefix, site, _ = env
    [pyc] = (site / "pkg" / "__pycache__").glob("mod.*.pyc")
    folder_mtime = pyc.parent.stat().st_mtime_ns
    header = bytearray(pyc.read_bytes())
    header[8:12] = (int.from_bytes(header[8:12], "little") ^ 1).to_bytes(4, "little")  # another source mtime
    with open(pyc, "r+b") as handle:
        handle.write(bytes(header))
    assert pyc.parent.stat().st_mtime_ns == folder_mtime
    data, items = run_section(prefix)
    assert not data["stats"]["snapshot"].startswith(REPLAYED)
    assert "header" in items[str(pyc)]["reason"]


def test_changed_metadata_is_audited_again(env):
    """METADATA is read on every audit: a new version is never replayed from the old result."""
    prefix, site, _ = env
    meta = site / "pkg-1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 1.1"))
    data, items = run_section(prefix)
    assert not data["stats"]["snapshot"].startswith(REPLAYED)
    assert {d["name"]: d["version"] for d in data["distributions"]}["pkg"] == "1.1"


def test_vanished_interpreter_of_a_script_is_noticed(env):
    """The stale-shebang note depends on a file outside the environment's lists: it is checked too."""
    prefix, _, first = env
    # The script's interpreter does not exist in this fake venv: the first audit noted it.
    assert any("does not exist" in n for d in first["distributions"] for n in d["notes"])
    (prefix / "bin" / "python3").write_bytes(b"")
    data, _ = run_section(prefix)
    assert not data["stats"]["snapshot"].startswith(REPLAYED)
    assert not any("does not exist" in n for d in data["distributions"] for n in d["notes"])


def test_snapshot_of_other_audit_code_is_not_replayed(env):
    """The controller sends the digest of the audit's code: a snapshot that code of another
    digest made (which may judge differently) is audited again, then replayed under the new one."""
    prefix, _, first = env
    again, _ = run_section(prefix, code="0123456789abcdef")
    assert not again["stats"]["snapshot"].startswith(REPLAYED) and again["stats"]["hashed"] == 0  # the stat cache still holds
    replayed, _ = run_section(prefix, code="0123456789abcdef")
    assert replayed["stats"]["snapshot"].startswith(REPLAYED)
    assert replayed["distributions"] == first["distributions"]


def test_full_never_replays(env):
    prefix, _, first = env
    data, _ = run_section(prefix, full=True)
    assert data["stats"]["hashed"] == first["stats"]["files"]
    assert not data["stats"]["snapshot"].startswith(REPLAYED)


def test_racy_audit_is_not_kept_and_an_old_snapshot_is_dropped(env, monkeypatch):
    """Files changed within the racy window of the stamp: no snapshot, and the old one is removed."""
    prefix, site, _ = env
    snapshot = prefix / ".envdoctor" / audit_snapshot.SNAPSHOT_NAME
    assert snapshot.exists() and snapshot.stat().st_mode & 0o077 == 0
    monkeypatch.setattr(audit_hash, "FINE_MARGIN_NS", 3600 * 10**9)
    monkeypatch.setattr(audit_hash, "COARSE_MARGIN_NS", 3600 * 10**9)
    (site / "pkg" / "mod.py").write_bytes(b"y = 3\n")
    data, items = run_section(prefix)
    assert data["stats"]["snapshot"].startswith("not saved")
    assert not snapshot.exists()
    assert items[str(site / "pkg" / "mod.py")]["state"] == "modified"


def test_a_difference_is_replayed_too(env, monkeypatch):
    """A settled difference stays reported on every replay, exit status and all."""
    prefix, site, _ = env
    target = site / "pkg" / "mod.py"
    target.write_bytes(b"y = 3\n")
    settle(monkeypatch, prefix)
    first, items = run_section(prefix)
    assert items[str(target)]["state"] == "modified" and first["stats"]["snapshot"] == "saved"
    again, items = run_section(prefix)
    assert again["stats"]["snapshot"].startswith(REPLAYED)
    assert items[str(target)]["state"] == "modified"


def test_damaged_snapshot_falls_back(env):
    prefix, _, _ = env
    snapshot = prefix / ".envdoctor" / audit_snapshot.SNAPSHOT_NAME
    raw = snapshot.read_bytes()
    snapshot.write_bytes(raw[: len(raw) - 5])  # the path bytes cut short
    data, items = run_section(prefix)
    assert items == {} and not data["stats"]["snapshot"].startswith(REPLAYED)
    snapshot.write_bytes(b"not json\n")
    data, items = run_section(prefix)
    assert items == {} and not data["stats"]["snapshot"].startswith(REPLAYED)


def test_non_utf8_names_survive_the_snapshot(env, monkeypatch):
    """A file whose name is not UTF-8 is watched by its exact bytes and replayed as the same path."""
    prefix, site, _ = env
    raw = os.fsencode(site / "pkg") + b"/caf\xe9.py"
    with open(raw, "wb") as handle:
        handle.write(b"x = 1\n")
    settle(monkeypatch, prefix)
    first, items = run_section(prefix)
    [path] = [p for p in items if p.endswith(".py")]
    assert path.encode("utf-8", "surrogateescape") == raw and first["stats"]["snapshot"] == "saved"
    again, items = run_section(prefix)
    assert again["stats"]["snapshot"].startswith(REPLAYED) and list(items) == [path]
    # An extra file's content does not matter (it is extra whatever it holds); its folder does.
    os.unlink(raw)
    third, items = run_section(prefix)
    assert not third["stats"]["snapshot"].startswith(REPLAYED) and items == {}


def test_snapshot_words_drop_the_top_inode_bit_as_the_stat_pass_does():
    """An inode above 2**63 is digested without its top bit, as stat_chunk digests it; None is MISSING."""
    words = audit_snapshot._words([("a", [1, 2, 3, 4]), ("b", None), ("c", [5, 6, 7, 2**63 + 9])])
    assert list(words) == [1, 2, 3, 4, *audit_snapshot.MISSING, 5, 6, 7, 9]
    assert audit_snapshot.words_digest(words) == audit_snapshot.words_digest(list(words))
