"""The probe's digests section over environments and model folders built on disk: a local
edit shows and is named against RECORD, identical installs at other prefixes agree, the
hashing is bounded (samples, a byte budget) and cached by stat key in an owner-only file."""

from __future__ import annotations

import base64
import hashlib
import marshal
import os
import stat
from pathlib import Path

import pytest

from envdoctor.probe.host.audit import digests as job_digests

SITE = "lib/python3.11/site-packages"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache lives in ~/.cache/envdoctor: a home of the test's own."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install(prefix: Path, name: str, version: str, files: dict[str, bytes], requires: list[str] = ()) -> Path:  # type: ignore[assignment]
    """A distribution laid out as pip installs a wheel: its files, METADATA and a RECORD."""
    site = prefix / SITE
    meta = site / f"{name}-{version}.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + \
        "".join(f"Requires-Dist: {r}\n" for r in requires) + "\n"
    (meta / "METADATA").write_text(metadata)
    rows = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},{record_hash(data)},{len(data)}")
    rows.append(f"{meta.name}/METADATA,{record_hash(metadata.encode())},{len(metadata)}")
    rows.append(f"{name}/__pycache__/x.cpython-311.pyc,,")
    rows.append(f"../../../bin/{name},{record_hash(b'#!' + str(prefix).encode())},9")
    rows.append(f"{meta.name}/RECORD,,")
    (meta / "RECORD").write_text("\n".join(rows) + "\n")
    return site


def run(prefix: Path, names=("pkg",), models=(), **args) -> dict:
    return job_digests.digests_section({"prefix": str(prefix), "distributions": list(names),
                                        "models": [str(m) for m in models], **args}, None)


def by_name(result: dict) -> dict[str, dict]:
    return {d["name"]: d for d in result["distributions"]}


PKG = {"pkg/__init__.py": b"x = 1\n", "pkg/core.py": b"def f():\n    return 2\n"}


def test_identical_installs_at_other_prefixes_have_one_digest(tmp_path):
    """Where the venv is and its scripts' shebangs do not count; the package's own files do."""
    a, b = tmp_path / "venv_a", tmp_path / "other" / "venv_b"
    for prefix in (a, b):
        install(prefix, "pkg", "1.0", PKG)
    first, second = by_name(run(a))["pkg"], by_name(run(b))["pkg"]
    assert first["digest"] and first["digest"] == second["digest"]
    assert first["files"] == 2 and first["modified"] == [] and first["missing"] == []


def test_a_local_edit_changes_the_digest_and_is_named_against_record(tmp_path):
    """One edited file: another digest, and that file listed as modified (its RECORD hash differs)."""
    install(tmp_path / "a", "pkg", "1.0", PKG)
    site = install(tmp_path / "b", "pkg", "1.0", PKG)
    (site / "pkg" / "core.py").write_bytes(b"def f():\n    return 3\n")  # same size, other bytes
    (site / "pkg" / "__init__.py").unlink()
    clean, edited = by_name(run(tmp_path / "a"))["pkg"], by_name(run(tmp_path / "b"))["pkg"]
    assert clean["digest"] != edited["digest"]
    assert edited["modified"] == ["pkg/core.py"] and edited["missing"] == ["pkg/__init__.py"]


def test_requirements_are_followed_but_not_those_of_extras(tmp_path):
    """The closure: what the named distribution requires, not what only an extra asks for."""
    prefix = tmp_path / "venv"
    install(prefix, "pkg", "1.0", PKG, requires=["dep>=1", 'extra_only; extra == "x"', "absent_dep"])
    install(prefix, "dep", "2.0", {"dep.py": b"y = 2\n"})
    install(prefix, "extra_only", "3.0", {"extra_only.py": b"z = 3\n"})
    assert sorted(by_name(run(prefix))) == ["dep", "pkg"]
    assert sorted(by_name(run(prefix, closure=False))) == ["pkg"]


def test_large_files_are_read_by_samples_and_a_change_in_a_sample_shows(tmp_path):
    """A file above FULL_HASH_MAX is read in SAMPLES pieces: a changed byte at its start or its
    size shows; RECORD is then compared by size."""
    big = os.urandom(job_digests.FULL_HASH_MAX + 4096)
    install(tmp_path / "a", "pkg", "1.0", {"pkg/lib.so": big})
    site = install(tmp_path / "b", "pkg", "1.0", {"pkg/lib.so": big})
    first = by_name(run(tmp_path / "a"))["pkg"]
    assert first["sampled"] == 1 and first["digest"] == by_name(run(tmp_path / "b"))["pkg"]["digest"]
    (site / "pkg" / "lib.so").write_bytes(b"\0" + big[1:])
    assert by_name(run(tmp_path / "b"))["pkg"]["digest"] != first["digest"]
    (site / "pkg" / "lib.so").write_bytes(big + b"!")
    grown = by_name(run(tmp_path / "b"))["pkg"]
    assert grown["digest"] != first["digest"] and grown["modified"] == ["pkg/lib.so"]


def test_a_spent_budget_leaves_the_digest_unknown_never_different(tmp_path):
    """With no bytes left to read, files are not hashed: the digest is None and says how many."""
    install(tmp_path / "a", "pkg", "1.0", PKG)
    result = run(tmp_path / "a", budget_bytes=0)
    assert result["budget_exhausted"] is True
    assert by_name(result)["pkg"]["digest"] is None and by_name(result)["pkg"]["unhashed"] == 2


def settle_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by the test are a moment old; a cache entry is kept only for files older than
    the racy margin. A negative margin makes them old enough (the rule itself is tested below)."""
    monkeypatch.setattr(job_digests, "COARSE_MARGIN_NS", -10 * 10 ** 9)


def test_the_cache_makes_a_rerun_read_no_file_and_is_owner_only(tmp_path, monkeypatch, home):
    """A second run of an unchanged environment hashes nothing (every file a cache hit, no budget
    needed); the cache is a private file in ~/.cache/envdoctor named digests-<12 hex>."""
    settle_now(monkeypatch)
    prefix = tmp_path / "venv"
    install(prefix, "pkg", "1.0", PKG)
    first = run(prefix)
    again = run(prefix, budget_bytes=0)
    assert again["cache"]["hits"] == 2 and by_name(again)["pkg"]["digest"] == by_name(first)["pkg"]["digest"]
    path = Path(first["cache"]["path"])
    assert path.parent == home / ".cache" / "envdoctor" and path.name.startswith("digests-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o022 == 0


def test_a_changed_file_is_hashed_again_whatever_the_cache_says(tmp_path, monkeypatch):
    """The stat key (size, mtime_ns, ctime_ns, inode) decides: an edit after the cache was written
    is read again, and a file changed within the racy margin is never cached."""
    settle_now(monkeypatch)
    prefix = tmp_path / "venv"
    site = install(prefix, "pkg", "1.0", PKG)
    before = by_name(run(prefix))["pkg"]
    (site / "pkg" / "core.py").write_bytes(b"def f():\n    return 9\n")
    after = run(prefix)
    assert by_name(after)["pkg"]["digest"] != before["digest"] and after["cache"]["hits"] == 1
    monkeypatch.setattr(job_digests, "COARSE_MARGIN_NS", 2 * 10 ** 9)  # the real margin
    (site / "pkg" / "core.py").write_bytes(b"def f():\n    return 8\n")
    cache = Path(run(prefix)["cache"]["path"])
    assert str(site / "pkg" / "core.py") not in marshal.loads(cache.read_bytes())["entries"]


def test_a_cache_others_could_write_is_not_trusted(tmp_path, monkeypatch, home):
    """A cache file open to the group, or in a folder others can write, is neither read nor written."""
    settle_now(monkeypatch)
    prefix = tmp_path / "venv"
    install(prefix, "pkg", "1.0", PKG)
    path = Path(run(prefix)["cache"]["path"])
    path.chmod(0o660)
    assert run(prefix)["cache"]["hits"] == 0
    path.chmod(0o600)
    path.parent.chmod(0o777)
    result = run(prefix)
    assert result["cache"]["hits"] == 0 and result["cache"]["status"].startswith("unavailable")


def model_folder(root: Path, *, weights: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "kimi_k25"}')
    (root / "tokenizer_config.json").write_text('{"auto_map": {}}')
    (root / "tiktoken.model").write_bytes(b"IQ== 0\n")
    (root / "tokenization_kimi.py").write_text("class T: pass\n")
    (root / "model-00001-of-00001.safetensors").write_bytes(weights)
    (root / ".cache").mkdir()
    (root / ".cache" / "lock").write_text("x")
    return root


def test_model_files_are_classified_and_weights_read_by_samples(tmp_path):
    """Config, tokenizer and code files are hashed whole; weights by size and samples; dot-entries skipped."""
    weights = os.urandom(3 * job_digests.SAMPLE_BYTES)
    folder = model_folder(tmp_path / "Kimi-K2.6", weights=weights)
    model = run(tmp_path / "novenv", names=(), models=[folder])["models"][0]
    kinds = {rel: entry["kind"] for rel, entry in model["files"].items()}
    assert kinds == {"config.json": "config", "tokenizer_config.json": "tokenizer", "tiktoken.model": "tokenizer",
                     "tokenization_kimi.py": "code", "model-00001-of-00001.safetensors": "weights"}
    config = model["files"]["config.json"]
    assert config["hash"] == "sha256:" + hashlib.sha256(b'{"model_type": "kimi_k25"}').hexdigest()
    assert model["files"]["model-00001-of-00001.safetensors"]["hash"].startswith("sampled:")
    assert model["files"]["model-00001-of-00001.safetensors"]["size"] == len(weights)


def test_a_missing_model_folder_is_said_not_hashed(tmp_path):
    """A model folder that is not there is an error of that folder, not of the section."""
    model = run(tmp_path / "novenv", names=(), models=[tmp_path / "nope"])["models"][0]
    assert model["error"] == "no such directory" and model["files"] == {}
