"""RECORD parsing, the stat cache's racy rule, and ledger reconciliation, with fakes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from envdoctor.audit.records import FileState, patch_status, reconcile
from envdoctor.patching.ledger import LedgerEntry
from envdoctor.probe.host.audit import section as probe
from envdoctor.probe.host.audit import hashing as audit_hash
from envdoctor.probe.host.audit import record as audit_record

DATA = b"print('hello')\n"
HEX = hashlib.sha256(DATA).hexdigest()
B64 = base64.urlsafe_b64encode(hashlib.sha256(DATA).digest()).rstrip(b"=").decode()


def test_record_hash_urlsafe_base64_without_padding():
    """A RECORD digest is urlsafe base64 without padding; it is kept as that text, which is the hex's."""
    assert audit_record.parse_record_hash(f"sha256={B64}") == ("sha256", B64, "b64")
    assert audit_record.digest_hex("sha256", B64) == HEX


def test_record_hash_hex_is_accepted_but_marked():
    """A hex digest (some build backends) is recognised as hex, so it is not mistaken for tampering."""
    assert audit_record.parse_record_hash(f"sha256={HEX}") == ("sha256", HEX, "hex")


@pytest.mark.parametrize("value", ["sha256", "sha256=", "sha256=!!notbase64!!", "sha256=abcd", "nosuchalgo=abc"])
def test_record_hash_malformed(value):
    """Malformed or unknown digests give no digest and a reason."""
    algo, digest, why = audit_record.parse_record_hash(value)
    assert algo is None and digest is None and why not in ("b64", "hex", "none")


def test_parse_record_rows_and_problems():
    """Rows keep path, digest and size; entries without hash are kept; bad rows are reported."""
    text = (f"pkg/a.py,sha256={B64},{len(DATA)}\n"
            "pkg-1.0.dist-info/RECORD,,\n"
            "pkg/__pycache__/a.cpython-311.pyc,,\n"
            '"pkg/with space, and comma.py",sha256=' + B64 + ",15\n"
            "only,two\n"
            f"pkg/b.py,sha256={B64},big\n")
    rows, problems = audit_record.parse_record(text)
    assert rows[0] == ("pkg/a.py", "sha256", B64, "b64", len(DATA))
    assert rows[1] == ("pkg-1.0.dist-info/RECORD", None, None, "none", None)
    assert rows[3][0] == "pkg/with space, and comma.py"
    assert any("2 fields" in p for p in problems) and any("not a number" in p for p in problems)


def test_cache_trusts_only_same_stat_and_settled_timestamps():
    """A cached digest stands only for the same stat, and never for a file changed near the stamp (racy)."""
    stamp = 10_000_000_000
    key = [100, 5_000_000_000, 5_000_000_000, 7, 1]
    assert audit_hash.cache_trusts(key, list(key), stamp, audit_hash.FINE_MARGIN_NS)
    assert not audit_hash.cache_trusts(key, [100, 5_000_000_000, 5_000_000_001, 7, 1], stamp, audit_hash.FINE_MARGIN_NS)
    racy = [100, stamp - 1_000, stamp - 1_000, 7, 1]
    assert not audit_hash.cache_trusts(racy, list(racy), stamp, audit_hash.FINE_MARGIN_NS)
    coarse = [100, stamp - 10**9, stamp - 10**9, 7, 1]
    assert audit_hash.cache_trusts(coarse, list(coarse), stamp, audit_hash.FINE_MARGIN_NS)
    assert not audit_hash.cache_trusts(coarse, list(coarse), stamp, audit_hash.COARSE_MARGIN_NS)


def test_racy_margin_widens_for_whole_second_stamps_and_other_devices():
    """Whole-second timestamps or a stamp on another file system get the coarse window."""
    assert audit_hash.racy_margin(12 * 10**9, True) == audit_hash.COARSE_MARGIN_NS
    assert audit_hash.racy_margin(12 * 10**9 + 5, False) == audit_hash.COARSE_MARGIN_NS
    assert audit_hash.racy_margin(12 * 10**9 + 5, True) == audit_hash.FINE_MARGIN_NS


def entry(patch: str, file: str, before: str, after: str, phase: str = "done", op: str = "apply") -> dict:
    return LedgerEntry(op, phase, patch, file, "six", "1.17.0", before, after, "", "", "0.1").to_json()


def ledger(lines: list[dict], files: dict) -> dict:
    return {"exists": True, "lines": [json.dumps(x) for x in lines], "files": files}


def test_reconcile_patched_replaces_the_modified_item():
    """The probe's `modified` for a file the ledger patched becomes `patched` when it matches sha256_after."""
    items = [{"path": "/v/six.py", "distribution": "six", "state": "modified"},
             {"path": "/v/other.py", "distribution": "x", "state": "modified"}]
    led = ledger([entry("p1", "/v/six.py", "b", "a", "intent"), entry("p1", "/v/six.py", "b", "a")],
                 {"/v/six.py": {"exists": True, "sha256": "a", "record_sha256": "b"}})
    files, notes = reconcile(items, led)
    states = {f.path: f.state for f in files}
    assert states == {"/v/six.py": FileState.PATCHED, "/v/other.py": FileState.MODIFIED}
    assert notes == []


@pytest.mark.parametrize(
    ("fact", "state"),
    [
        ({"exists": True, "sha256": "after"}, FileState.PATCHED),
        ({"exists": True, "sha256": "before"}, FileState.REVERTED),
        ({"exists": True, "sha256": "new-record", "record_sha256": "new-record"}, FileState.REVERTED),
        ({"exists": True, "sha256": "other", "record_sha256": "new-record"}, FileState.MODIFIED),
        ({"exists": False}, FileState.MISSING),
        (None, FileState.MISSING),
    ],
)
def test_patch_status(fact, state):
    """A patched file is patched, reverted (pre-image or RECORD again), modified or missing."""
    chain = [LedgerEntry("apply", "done", "p", "/f", "six", "1", "before", "after", "", "", "")]
    assert patch_status("/f", chain, fact).state is state


def test_reverted_patch_is_not_in_force_and_unfinished_intent_is_noted():
    """A patch reverted through the ledger is no longer judged; an intent without done is a note."""
    lines = [entry("p1", "/v/a.py", "b", "a"), entry("p1", "/v/a.py", "a", "b", op="revert"),
             entry("p2", "/v/c.py", "b", "a", "intent")]
    files, notes = reconcile([], ledger(lines, {}))
    assert files == []
    assert len(notes) == 1 and "p2" in notes[0]


def write_dist(site, name, version, files, *, record=True, extra_meta=None):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    rows = []
    for rel, data, digest_style in files:
        digest = hashlib.sha256(data).digest()
        value = base64.urlsafe_b64encode(digest).rstrip(b"=").decode() if digest_style == "b64" else digest.hex()
        rows.append(f"{rel},sha256={value},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / ("RECORD" if record else "RECORD.orig")).write_text("\n".join(rows) + "\n")
    for key, text in (extra_meta or {}).items():
        (info / key).write_text(text)
    return info


@pytest.fixture
def fake_env(tmp_path):
    prefix = tmp_path / "env"
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (prefix / "bin").mkdir()
    return prefix, site


def run_section(prefix, **args):
    items = []
    data = probe.audit_section({"prefix": str(prefix), "workers": 1, **args}, items.append)
    return data, {i["path"]: i for i in items}


def test_section_clobbered_path_says_which_distribution_won(fake_env):
    """One path in two RECORDs: the distribution whose digest matches is named as the one in place."""
    prefix, site = fake_env
    (site / "shared").mkdir()
    (site / "shared" / "x.py").write_bytes(b"B\n")
    write_dist(site, "aaa", "1.0", [("shared/x.py", b"A\n", "b64")])
    write_dist(site, "bbb", "2.0", [("shared/x.py", b"B\n", "b64")])
    data, items = run_section(prefix)
    assert items == {}
    [conflict] = data["conflicts"]
    assert conflict["kept"] == "bbb 2.0" and conflict["overwritten"] == ["aaa 1.0"]


def test_section_hex_record_renamed_record_and_editable_are_said(fake_env):
    """Hex digests verify (noted as malformed); a renamed RECORD and an editable install are noted."""
    prefix, site = fake_env
    (site / "hexy.py").write_bytes(b"h\n")
    write_dist(site, "hexy", "1.0", [("hexy.py", b"h\n", "hex")])
    (site / "sysdeb.py").write_bytes(b"s\n")
    write_dist(site, "sysdeb", "1.0", [("sysdeb.py", b"s\n", "b64")], record=False,
               extra_meta={"INSTALLER": "debian\n"})
    (site / "__editable__.ed-1.0.pth").write_bytes(b"/src/ed\n")
    write_dist(site, "ed", "1.0", [("__editable__.ed-1.0.pth", b"/src/ed\n", "b64")],
               extra_meta={"direct_url.json": json.dumps({"url": "file:///src/ed", "dir_info": {"editable": True}})})
    data, items = run_section(prefix)
    assert items == {}
    notes = {d["name"]: " ".join(d["notes"]) for d in data["distributions"]}
    assert "hex" in notes["hexy"] and "not tampering" in notes["hexy"]
    assert "RECORD.orig" in notes["sysdeb"] and "externally managed" in notes["sysdeb"] and "debian" in notes["sysdeb"]
    assert "editable" in notes["ed"] and "file:///src/ed" in notes["ed"]


def test_section_script_outside_site_and_shebang_rewritten_after_move(fake_env):
    """A ../../../bin script is verified; a shebang rewritten after the venv moved is said to be only that."""
    prefix, site = fake_env
    body = b"import sys\nfrom tool import main\nsys.exit(main())\n"
    old = b"#!/old/place/bin/python3\n" + body
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\ncommand = /usr/bin/python3 -m venv /old/place\n")
    (prefix / "bin" / "tool").write_bytes(f"#!{prefix}/bin/python3\n".encode() + body)
    (prefix / "bin" / "tool2").write_bytes(old)
    write_dist(site, "tool", "1.0", [("../../../bin/tool", old, "b64"), ("../../../bin/tool2", old, "b64")])
    data, items = run_section(prefix)
    item = items[str(prefix / "bin" / "tool")]
    assert item["state"] == "modified" and "shebang" in item["reason"] and "/old/place" in item["reason"]
    assert str(prefix / "bin" / "tool2") not in items
    assert any("/old/place/bin/python3" in n and "does not exist" in n for n in data["distributions"][0]["notes"])


def test_section_several_dist_info_folders_and_stale_pyc(fake_env):
    """Two metadata folders for one name are noted; a .pyc whose header does not match its source is flagged."""
    import py_compile

    prefix, site = fake_env
    (site / "pkg").mkdir()
    source = site / "pkg" / "__init__.py"
    source.write_bytes(b"x = 1\n")
    py_compile.compile(str(source), doraise=True)
    write_dist(site, "pkg", "1.0", [("pkg/__init__.py", b"x = 1\n", "b64")])
    write_dist(site, "pkg", "2.0", [("pkg/__init__.py", b"x = 1\n", "b64")])
    source.write_bytes(b"x = 2\n")  # same size, new mtime: the .pyc no longer belongs to it
    write_rows = site / "pkg-2.0.dist-info" / "RECORD"
    write_rows.write_text(write_rows.read_text().replace(
        base64.urlsafe_b64encode(hashlib.sha256(b"x = 1\n").digest()).rstrip(b"=").decode(),
        base64.urlsafe_b64encode(hashlib.sha256(b"x = 2\n").digest()).rstrip(b"=").decode()))
    import os
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    data, items = run_section(prefix)
    assert any("several metadata folders" in n for d in data["distributions"] for n in d["notes"])
    pyc = [p for p, i in items.items() if p.endswith(".pyc")]
    assert len(pyc) == 1 and "header" in items[pyc[0]]["reason"]


def settle(monkeypatch, folder):
    """No racy margin, and the file system's clock moved past every file in folder (polled, not slept)."""
    import os

    monkeypatch.setattr(audit_hash, "FINE_MARGIN_NS", 0)
    monkeypatch.setattr(audit_hash, "COARSE_MARGIN_NS", 0)
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in folder.rglob("*"))
    probe_file = folder.parent / "clock"
    while True:
        probe_file.write_bytes(b"x")
        if probe_file.stat().st_mtime_ns > newest:
            return
        os.sched_yield()


def test_settled_distribution_is_not_rehashed_until_another_claims_its_file(fake_env, monkeypatch):
    """A re-audit hashes nothing; a new distribution listing a settled one's file makes both judged again."""
    prefix, site = fake_env
    (site / "shared").mkdir()
    (site / "shared" / "x.py").write_bytes(b"A\n")
    write_dist(site, "aaa", "1.0", [("shared/x.py", b"A\n", "b64")])
    settle(monkeypatch, prefix)
    first, items = run_section(prefix)
    assert items == {} and first["stats"]["hashed"] == 1
    again, _ = run_section(prefix)
    assert again["stats"]["hashed"] == 0 and again["stats"]["cache"] == "used"

    write_dist(site, "bbb", "2.0", [("shared/x.py", b"B\n", "b64")])
    third, items = run_section(prefix)
    assert items == {}
    assert third["conflicts"] == [{"path": str(site / "shared" / "x.py"), "kept": "aaa 1.0",
                                   "overwritten": ["bbb 2.0"]}]


def test_full_ignores_the_cache(fake_env, monkeypatch):
    """With full, every file is hashed even when the cache vouches for all of them."""
    prefix, site = fake_env
    (site / "m.py").write_bytes(b"m\n")
    write_dist(site, "m", "1.0", [("m.py", b"m\n", "b64")])
    settle(monkeypatch, prefix)
    run_section(prefix)
    data, _ = run_section(prefix, full=True)
    assert data["stats"]["hashed"] == 1 and data["stats"]["cache"].startswith("ignored")


def test_pre_37_pyc_header_is_read_in_its_own_layout(tmp_path, monkeypatch):
    """Python 3.6 writes magic, mtime, size (12 bytes; no PEP 552 flags word): read as such, a
    .pyc made from its source is not flagged, and one made from another source is."""
    source = tmp_path / "mod.py"
    source.write_bytes(b"x = 1\n")
    st = source.stat()
    magic = b"\x33\x0d\x0d\x0a"  # Python 3.6's
    stamp = (st.st_mtime_ns // 10 ** 9).to_bytes(4, "little") + st.st_size.to_bytes(4, "little")
    good, bad = tmp_path / "good.pyc", tmp_path / "bad.pyc"
    good.write_bytes(magic + stamp + b"\xe3code object follows")
    bad.write_bytes(magic + (st.st_mtime_ns // 10 ** 9 - 60).to_bytes(4, "little") + stamp[4:] + b"\xe3rest")
    monkeypatch.setattr(audit_hash, "PYC_FLAGS_WORD", False)
    monkeypatch.setattr(audit_hash, "_magic_number", lambda: magic)
    words, special = audit_hash.check_pyc_batch([(str(good), str(source)), (str(bad), str(source))])
    assert [(position, why) for position, why, _ in special] == [
        (1, ".pyc header (source mtime and size) does not match its source")]
    assert audit_hash.pep552_header(magic + stamp + b"more") == magic + b"\0\0\0\0" + stamp


def test_section_path_replaced_by_a_fifo_is_modified_without_waiting(fake_env):
    """A RECORD-listed file replaced by a FIFO is reported, not opened for a writer that never comes."""
    import os

    prefix, site = fake_env
    os.mkfifo(site / "piped.py")
    write_dist(site, "piped", "1.0", [("piped.py", b"p\n", "b64")])
    _, items = run_section(prefix)
    item = items[str(site / "piped.py")]
    assert item["state"] == "modified" and "not a regular file" in item["reason"]


def test_open_regular_refuses_a_fifo_at_once_and_reads_a_file(tmp_path):
    """The probe's reader of installed files raises for a FIFO instead of waiting for a writer."""
    import os

    from envdoctor.probe.host.core import open_regular

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        open_regular(str(tmp_path / "fifo"))
    (tmp_path / "file").write_bytes(b"data")
    with open_regular(str(tmp_path / "file")) as handle:
        assert handle.read() == b"data"


def test_site_paths_normalize_only_the_odd_rows_as_site_path_does():
    """One join for plain rows; ../, ./, // and absolute rows anywhere come out as site_path makes them."""
    site = "/v/lib/python3.11/site-packages"
    rels = ["a.py", "../../../bin/tool", "pkg/b.py", "pkg/./c.py", "x//y.py", "/etc/passwd", "pkg/d.py",
            "../../../bin/other", "last.py"]
    for order in (rels, rels[::-1], rels[1:], ["/abs.py", *rels]):
        paths, odd = audit_record.site_paths(site, order)
        assert paths == [audit_record.site_path(site, r) for r in order]
        assert {order[i] for i in odd} == {r for r in order if audit_record.site_path(site, r) != f"{site}/{r}"}
    assert audit_record.site_paths(site, ["a.py", "b.py"]) == ([f"{site}/a.py", f"{site}/b.py"], set())


def test_pyc_of_a_missing_source_is_not_judged_and_a_stale_one_beside_a_hashed_source_is(fake_env):
    """A RECORD-listed source that is gone: `missing`, and its .pyc (never loaded) says nothing;
    a .pyc beside a hashed source whose header is another source's is flagged."""
    import importlib.util
    import os
    import py_compile

    prefix, site = fake_env
    (site / "pkg").mkdir()
    gone, kept = site / "pkg" / "gone.py", site / "pkg" / "kept.py"
    for path in (gone, kept):
        path.write_bytes(b"v = 1\n")
        py_compile.compile(str(path), doraise=True)
    write_dist(site, "pkg", "1.0", [("pkg/gone.py", b"v = 1\n", "b64"), ("pkg/kept.py", b"v = 1\n", "b64")])
    gone.unlink()
    st = kept.stat()
    os.utime(kept, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    data, items = run_section(prefix, full=True)
    assert items[str(gone)]["state"] == "missing"
    assert importlib.util.cache_from_source(str(gone)) not in items
    assert "header" in items[importlib.util.cache_from_source(str(kept))]["reason"]
    assert data["stats"]["pyc_checked"] == 2


def test_stat_keys_pack_into_words_and_an_inode_above_2_63_falls_back_to_text():
    """Stat keys are cached as one string of words, or as text when one does not fit; both come back equal."""
    keys = [[10, 1_700_000_000_123_456_789, 1_700_000_000_987_654_321, 42], [0, 0, 0, 1]]
    packed = audit_record.pack_keys(keys)
    assert isinstance(packed, bytes) and len(packed) == 8 * 4 * len(keys)
    assert audit_record.unpack_keys(packed) == keys
    huge = [*keys, [1, 2, 3, 2**63 + 5]]
    texts = audit_record.pack_keys(huge)
    assert texts == [audit_record.key_text(k) for k in huge] and audit_record.unpack_keys(texts) == huge


def test_another_users_environment_gets_nothing_created_inside(fake_env, tmp_path, monkeypatch):
    """Root's audit of a venv owned by nobody keeps its stat cache and snapshot in root's own
    ~/.cache/envdoctor (owner-only), creates nothing in the venv, and replays from there."""
    import pwd

    prefix, site = fake_env
    (site / "m.py").write_bytes(b"x = 1\n")
    write_dist(site, "m", "1.0", [("m.py", b"x = 1\n", "b64")])
    nobody = pwd.getpwnam("nobody")
    for path in [prefix, *prefix.rglob("*")]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    settle(monkeypatch, prefix)
    before = sorted(prefix.rglob("*"))
    data, items = run_section(prefix)
    assert items == {} and sorted(prefix.rglob("*")) == before and not (prefix / ".envdoctor").exists()
    cache = Path(data["stats"]["cache_path"])
    assert cache.parent.parent == tmp_path / "home" / ".cache" / "envdoctor"
    assert cache.parent.stat().st_uid == os.getuid() and cache.parent.stat().st_mode & 0o077 == 0
    again, _ = run_section(prefix)
    assert again["stats"]["snapshot"].startswith("replayed") and sorted(prefix.rglob("*")) == before


def test_own_environment_keeps_its_cache_beside_its_ledger(fake_env, tmp_path, monkeypatch):
    """An environment of the running user keeps the audit's cache in its own .envdoctor, owner-only."""
    prefix, site = fake_env
    write_dist(site, "m", "1.0", [])
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    data, _ = run_section(prefix)
    assert Path(data["stats"]["cache_path"]).parent == prefix / ".envdoctor"
    assert (prefix / ".envdoctor").stat().st_mode & 0o077 == 0 and not (tmp_path / "home").exists()


def test_files_of_the_data_scheme_under_the_venvs_prefix_are_verified(fake_env, tmp_path):
    """pynvvideocodec's RECORD puts `external/ffmpeg/...` through the wheel's data scheme into the
    venv's prefix: inside the environment, verified (a changed one is `modified`, never `outside`)."""
    prefix, site = fake_env
    (prefix / "external" / "ffmpeg").mkdir(parents=True)
    (prefix / "external" / "ffmpeg" / "readme.txt").write_bytes(b"ffmpeg\n")
    (prefix / "external" / "ffmpeg" / "changed.txt").write_bytes(b"someone else's\n")
    write_dist(site, "pynvvideocodec", "2.0.4", [("../../../external/ffmpeg/readme.txt", b"ffmpeg\n", "b64"),
                                                  ("../../../external/ffmpeg/changed.txt", b"as shipped\n", "b64")])
    data, items = run_section(prefix)
    assert str(prefix / "external" / "ffmpeg" / "readme.txt") not in items
    assert items[str(prefix / "external" / "ffmpeg" / "changed.txt")]["state"] == "modified"


def test_a_prefix_path_that_links_out_or_is_envdoctors_own_stays_outside(fake_env, tmp_path):
    """Below the prefix by name but elsewhere once links resolve, or in `.envdoctor/`: never read."""
    prefix, site = fake_env
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_bytes(b"top secret\n")
    (prefix / "linked").symlink_to(elsewhere)
    (prefix / ".envdoctor").mkdir()
    (prefix / ".envdoctor" / "ledger.jsonl").write_bytes(b"{}\n")
    write_dist(site, "sneaky", "1.0", [("../../../linked/secret.txt", b"x\n", "b64"),
                                         ("../../../.envdoctor/ledger.jsonl", b"x\n", "b64"),
                                         ("../../../../elsewhere/secret.txt", b"x\n", "b64")])
    data, items = run_section(prefix)
    assert {path: item["state"] for path, item in items.items()} == {
        str(prefix / "linked" / "secret.txt"): "outside", str(prefix / ".envdoctor" / "ledger.jsonl"): "outside",
        str(elsewhere / "secret.txt"): "outside"}


def test_the_default_interpreters_prefix_is_no_data_root():
    """Without a named environment (a system prefix such as /usr) nothing beyond the scheme's folders is inside."""
    assert not probe.inside_data_scheme("/usr/external/x", None)
    assert not probe.inside_data_scheme("/v/../etc/x", "/v")
    assert not probe.inside_data_scheme("/vx/a", "/v")
