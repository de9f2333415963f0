"""The host-side cache of which installed distributions import transformers/vllm/sglang."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envdoctor.probe.host.scan import sources as sources


def make_dist(site: Path, name: str, files: dict[str, str]) -> dict:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = []
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        rows.append(f"{rel},,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return {"name": name, "version": "1.0", "site": str(site), "dist_info": str(info)}


@pytest.fixture
def venv(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the cache lives in ~/.cache/envdoctor
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return prefix, site


def test_a_second_run_reads_no_file_and_a_change_is_seen(venv, monkeypatch) -> None:
    """The verdict is reused while no file changed; an edited file is read again."""
    prefix, site = venv
    dist = make_dist(site, "evalkit", {"evalkit/__init__.py": "import os\n", "evalkit/hf.py": "x = 1\n"})
    first = sources.ImportsCache(str(prefix))
    assert sources.src_imported_module(dist, ["transformers"], 1 << 20, first) is None
    first.save()
    saved = Path(first.folder) / first.NAME
    assert saved.stat().st_mode & 0o077 == 0 and Path(first.folder).stat().st_mode & 0o077 == 0
    assert not (prefix / ".envdoctor").exists()  # a check writes nothing inside the environment

    reads = []
    real = sources._src_first_import
    monkeypatch.setattr(sources, "_src_first_import", lambda *a: reads.append(a) or real(*a))
    again = sources.ImportsCache(str(prefix))
    assert sources.src_imported_module(dist, ["transformers"], 1 << 20, again) is None
    assert reads == []

    (site / "evalkit" / "hf.py").write_text("from transformers import AutoModel\n")
    edited = sources.ImportsCache(str(prefix))
    assert sources.src_imported_module(dist, ["transformers"], 1 << 20, edited) == "transformers"
    assert len(reads) == 1


def test_a_cache_in_a_folder_others_can_write_is_ignored(venv, monkeypatch) -> None:
    """A planted verdict in a group-writable .envdoctor is neither trusted nor rewritten."""
    prefix, site = venv
    dist = make_dist(site, "evalkit", {"evalkit/hf.py": "from transformers import AutoModel\n"})
    cache = sources.ImportsCache(str(prefix))
    assert sources.src_imported_module(dist, ["transformers"], 1 << 20, cache) == "transformers"
    cache.save()
    folder = Path(cache.folder)
    # Plant a verdict that hides the import, then open the folder to others.
    planted = (folder / cache.NAME).read_text().replace('"transformers"]', 'null]')
    (folder / cache.NAME).write_text(planted)
    os.chmod(folder, 0o777)
    assert sources.src_imported_module(dist, ["transformers"], 1 << 20, sources.ImportsCache(str(prefix))) \
        == "transformers"
    os.chmod(folder, 0o700)
    trusted = sources.ImportsCache(str(prefix))
    assert sources.src_imported_module(dist, ["transformers"], 1 << 20, trusted) is None  # the planted one, now private


def test_the_cache_never_creates_a_missing_venv(tmp_path: Path, monkeypatch) -> None:
    """Saving the cache of a venv path that does not exist creates nothing there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = sources.ImportsCache(str(tmp_path / "nope"))
    cache.store("x", "k", None)
    cache.save()
    assert not (tmp_path / "nope").exists()
