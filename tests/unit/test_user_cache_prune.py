"""The per-environment caches in ~/.cache/envdoctor stay bounded: a new one makes the least
recently used of its kind beyond USER_CACHE_KEEP go, and nothing else is ever touched."""

from __future__ import annotations

import os
import time

from envdoctor.probe.host import core
from envdoctor.probe.host.drift.section import write_cache


def _make(folder, name, age_s, *, as_dir=True):
    path = folder / name
    if as_dir:
        path.mkdir()
        (path / "data").write_text("x")
    else:
        path.write_text("x")
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_least_recently_used_of_a_kind_go_and_nothing_else(tmp_path):
    cache = tmp_path / "envdoctor"
    cache.mkdir()
    olds = [_make(cache, "drift-%012x" % n, 1000 + n) for n in range(40)]  # n=0 is the newest
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    (olds[-1] / "link").symlink_to(outside / "precious")  # inside a cache that goes: only the link goes
    os.utime(olds[-1], (time.time() - 1039, time.time() - 1039))  # (the new entry dated the folder)
    os.symlink(outside, cache / ("drift-%012x" % 99))  # a planted link named like a cache: left alone
    others = [_make(cache, "gpu-%012x" % 1, 10 ** 6), _make(cache, "imports-%016x" % 1, 10 ** 6, as_dir=False),
              _make(cache, "drift-notours", 10 ** 6), _make(cache, "ssh-g", 10 ** 6), _make(cache, "logs", 10 ** 6)]
    new = _make(cache, "drift-%012x" % 1000, 0)

    removed = core.prune_user_caches(str(new), keep=32)

    assert sorted(removed) == sorted(str(p) for p in olds[31:])  # 31 others + the new one are kept
    assert all(p.exists() for p in olds[:31]) and new.exists()
    assert not any(p.exists() for p in olds[31:])
    assert (outside / "precious").read_text() == "keep" and (cache / ("drift-%012x" % 99)).is_symlink()
    assert all(p.exists() for p in others)


def test_only_names_this_program_gives_are_pruned(tmp_path):
    for name in ("ssh-g", ".envdoctor", "drift-ABCDEF012345", "probe-0123"):
        assert core.prune_user_caches(str(tmp_path / name), keep=1) == []


def test_a_used_cache_is_touched_at_most_once_a_day(tmp_path):
    used = _make(tmp_path, "imports-%016x" % 7, 3 * 86400, as_dir=False)
    core.touch_user_cache(str(used))
    assert time.time() - used.stat().st_mtime < 60
    recent = _make(tmp_path, "drift-%012x" % 7, 3600)
    before = recent.stat().st_mtime
    core.touch_user_cache(str(recent))
    assert recent.stat().st_mtime == before
    venv_own = _make(tmp_path, ".envdoctor", 3 * 86400)  # a venv's own audit cache is not ours to date
    before = venv_own.stat().st_mtime
    core.touch_user_cache(str(venv_own))
    assert venv_own.stat().st_mtime == before


def test_drift_cache_made_for_a_new_environment_prunes_its_kind(tmp_path):
    """Through the drift section's own writer: the 40 caches of environments long gone shrink
    to USER_CACHE_KEEP with the new one."""
    cache = tmp_path / "envdoctor"
    cache.mkdir(mode=0o700)
    for n in range(40):
        _make(cache, "drift-%012x" % n, 86400 + n)
    folder = cache / ("drift-%012x" % 4096)
    assert write_cache(str(folder), "key", {}, {"answer": 1})
    kept = sorted(p.name for p in cache.iterdir() if p.name.startswith("drift-"))
    assert len(kept) == core.USER_CACHE_KEEP and folder.name in kept
    assert "drift-%012x" % 39 not in kept and "drift-%012x" % 0 in kept
