"""The models cache's rules that need no venv: what may be saved, and what the key holds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from envdoctor.probe.host.model import cache as model_cache


def test_a_finished_load_is_cacheable_and_a_machine_failure_is_not() -> None:
    """A missing module is the state's own answer; a timeout, a crash or an OSError is not saved."""
    assert model_cache.live_result_cacheable({"trusted": {"class": "TikTokenTokenizer"}})
    assert model_cache.live_result_cacheable({"trusted": {"error": "ModuleNotFoundError: No module named 'tiktoken'"}})
    assert model_cache.live_result_cacheable(None)
    assert not model_cache.live_result_cacheable({"error": "/venv/bin/python exited with 124: timed out"})
    assert not model_cache.live_result_cacheable({"trusted": {"error": "OSError: [Errno 28] No space left on device"}})
    assert not model_cache.live_result_cacheable({"untrusted": {"error": "MemoryError"}})


def test_a_file_changed_within_the_racy_margin_is_not_saved() -> None:
    """Fine timestamps: 50 ms; whole seconds (a coarse file system): 2 s."""
    now = 100 * 10 ** 9 + 500
    row = lambda ns: ["f", [0o100644, 1, ns, ns, 1, 1]]  # noqa: E731  # a stat row
    assert model_cache.model_cache_settled([row(now - 10 ** 8)], now)
    assert not model_cache.model_cache_settled([row(now - 10 ** 7)], now)
    assert not model_cache.model_cache_settled([row(99 * 10 ** 9)], now)  # whole second, 1 s ago
    assert model_cache.model_cache_settled([row(97 * 10 ** 9)], now)
    assert model_cache.model_cache_settled([["gone", ["missing", 2]]], now)


def test_the_key_changes_with_each_argument_and_each_file(tmp_path: Path) -> None:
    """The code digest, the consent, the timeout, the interpreter and a new file in the folder each change it."""
    (tmp_path / "config.json").write_text("{}")
    base = {"trust_remote_code": False, "live_timeout": 180, "python": sys.executable, "code": "a"}
    key = model_cache.model_cache_key(str(tmp_path), base)[0]
    assert key == model_cache.model_cache_key(str(tmp_path), dict(base))[0]
    for change in ({"code": "b"}, {"trust_remote_code": True}, {"live_timeout": 30}, {"python": "/usr/bin/python3"}):
        assert model_cache.model_cache_key(str(tmp_path), {**base, **change})[0] != key, change
    (tmp_path / "tokenizer.json").write_text("{}")
    assert model_cache.model_cache_key(str(tmp_path), base)[0] != key


def test_a_folder_too_large_to_key_is_not_cached(tmp_path: Path) -> None:
    """Past the entry bound there is no key (the answer is computed every time)."""
    for i in range(5):
        (tmp_path / f"shard-{i}").write_text("")
    assert model_cache.model_folder_rows(str(tmp_path), limit=3) is None
    assert model_cache.model_folder_rows(str(tmp_path), limit=10) is not None


def test_the_cache_file_is_named_by_user_folder_and_interpreter(monkeypatch, tmp_path: Path) -> None:
    """In the user's own HOME, and another uid gets another name even there."""
    monkeypatch.setenv("HOME", str(tmp_path))
    mine = model_cache.model_cache_path("/models/k", "/venv/bin/python")
    assert mine.startswith(os.path.join(str(tmp_path), ".cache", "envdoctor", "models-"))
    assert mine != model_cache.model_cache_path("/models/k", "/other/bin/python")
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    assert model_cache.model_cache_path("/models/k", "/venv/bin/python") != mine
