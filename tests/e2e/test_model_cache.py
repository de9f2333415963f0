"""The host's cache of the models section (probe/host/model/cache.py), with a real venv that has
transformers from PyPI, a Kimi-like model folder whose tokenizer code needs tiktoken, and the
real live load. The section runs in this process as the probe runs it on a host, with HOME in
a temporary folder, so the cache is this test's own.

Tests in this module run in file order: the install test changes the venv.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from envdoctor.operations import gather  # noqa: F401  # registers the probe sections ("models")
from envdoctor.probe.host.model import cache as model_cache
from envdoctor.probe.host.model import files as model_files
from envdoctor.probe.program import section_code_digest
from tests.conftest import make_venv
from tests.kimi_fixture import build_kimi

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cache_venv(tmp_path_factory) -> Path:
    """A venv with transformers and jinja2 from PyPI, without tiktoken."""
    return make_venv(tmp_path_factory.mktemp("cache venv") / "venv", ["transformers", "jinja2"])


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cache models")
    return build_kimi(root / "Kimi-K2.6", mark=root / "MARK")


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    """This test's own HOME: the cache is ~/.cache/envdoctor there."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check", *args],
                   check=True)


def models(venv: Path, model: Path, trust: bool = True) -> dict:
    """The models section's answer for one folder, as the probe gives it."""
    args = {"models": [str(model)], "trust_remote_code": trust, "python": str(venv / "bin" / "python"),
            "code": section_code_digest("models")}
    return model_files.models_section(args, None)[0]


def cache_file(venv: Path, model: Path) -> Path:
    return Path(model_cache.model_cache_path(str(model), str(venv / "bin" / "python")))


def without_mark(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k != "cached"}


def test_a_failed_load_is_cached_and_installing_the_missing_module_is_a_miss(home, cache_venv, kimi):
    """Without tiktoken the trusted load fails (cached: the same state fails alike); install and uninstall miss."""
    first = models(cache_venv, kimi)
    assert "tiktoken" in first["live"]["trusted"]["error"] and "cached" not in first
    again = models(cache_venv, kimi)
    assert again.get("cached") is True and without_mark(again) == first
    pip(cache_venv, "install", "tiktoken")
    installed = models(cache_venv, kimi)
    assert "cached" not in installed and installed["live"]["trusted"]["class"] == "TikTokenTokenizer"
    assert models(cache_venv, kimi).get("cached") is True
    pip(cache_venv, "uninstall", "-y", "tiktoken")
    removed = models(cache_venv, kimi)
    assert "cached" not in removed and "tiktoken" in removed["live"]["trusted"]["error"]
    pip(cache_venv, "install", "tiktoken")  # (the tests below load the tokenizer)


def test_a_hit_gives_the_answer_of_a_miss_without_running_the_model_code(home, cache_venv, kimi):
    """The second answer equals the first, says it is cached, and the tokenizer's code did not run again."""
    mark = kimi.parent / "MARK"
    first = models(cache_venv, kimi)
    assert "cached" not in first and first["live"]["trusted"]["class"] == "TikTokenTokenizer"
    path = cache_file(cache_venv, kimi)
    assert path.parent == home / ".cache" / "envdoctor"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    mark.unlink()
    second = models(cache_venv, kimi)
    assert second["cached"] is True
    assert without_mark(second) == first
    assert not mark.exists(), "the live load ran again on a cache hit"


def test_a_load_started_early_gives_the_answer_of_one_started_in_turn(home, cache_venv, kimi):
    """models_prestart (the probe's start) then the section: the same answer, saved under the key taken first."""
    args = {"models": [str(kimi)], "trust_remote_code": True, "python": str(cache_venv / "bin" / "python"),
            "code": section_code_digest("models")}
    model_files.models_prestart(args)
    assert str(kimi) in model_files.LIVE_STARTED
    early = model_files.models_section(args, None)[0]
    assert not model_files.LIVE_STARTED and "cached" not in early
    assert early["live"]["trusted"]["class"] == "TikTokenTokenizer"
    model_files.models_prestart(args)  # the cache answers now: nothing is started
    assert not model_files.LIVE_STARTED
    assert without_mark(models(cache_venv, kimi)) == early


def test_a_tokenizer_file_changed_in_place_is_a_miss(home, cache_venv, kimi):
    """Same size, mtime set back with os.utime: the ctime and the answer still change."""
    first = models(cache_venv, kimi, trust=False)
    assert models(cache_venv, kimi, trust=False).get("cached") is True
    path = kimi / "tokenizer_config.json"
    before = path.stat()
    text = path.read_text()
    changed = text.replace('"[PAD]"', '"[PAX]"', 1)
    assert changed != text and len(changed) == len(text)
    path.write_text(changed)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    try:
        answer = models(cache_venv, kimi, trust=False)
        assert "cached" not in answer
        assert answer["files"]["tokenizer_config.json"]["sha256"] != first["files"]["tokenizer_config.json"]["sha256"]
        assert "[PAX]" in json.dumps(answer["json"]["tokenizer_config.json"])
    finally:
        path.write_text(text)


def test_another_interpreter_is_a_miss(home, cache_venv, kimi):
    """The venv's python replaced by a copy of the interpreter (as `venv --copies` makes it): not the cached one."""
    models(cache_venv, kimi)
    assert models(cache_venv, kimi).get("cached") is True
    python = cache_venv / "bin" / "python"
    saved = cache_venv / "bin" / "python.saved"
    os.rename(python, saved)
    try:
        shutil.copy2(saved, python)  # (a link's target, or the file: a new file either way)
        answer = models(cache_venv, kimi)
        assert "cached" not in answer and answer["live"]["trusted"]["class"] == "TikTokenTokenizer"
    finally:
        if python.exists() or python.is_symlink():
            python.unlink()
        os.rename(saved, python)


def forge(path: Path) -> None:
    """Make the saved answer say something no host has (same key): read back, it would show."""
    data = json.loads(path.read_text())
    data["model"]["listing"] = ["FORGED"]
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("spoil", ["none", "folder group-writable", "file mode 0644", "file of another uid",
                                   "file a symlink"])
def test_a_cache_someone_else_could_write_is_never_read(spoil, home, cache_venv, kimi, tmp_path):
    """A forged entry is read only from an owner-only file in an owner-only folder ('none' shows it would be)."""
    models(cache_venv, kimi, trust=False)
    path = cache_file(cache_venv, kimi)
    forge(path)
    if spoil == "folder group-writable":
        path.parent.chmod(0o775)
    elif spoil == "file mode 0644":
        path.chmod(0o644)
    elif spoil == "file of another uid":
        if os.getuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, 12345, -1)
    elif spoil == "file a symlink":
        elsewhere = tmp_path / "elsewhere"
        os.rename(path, elsewhere)
        path.symlink_to(elsewhere)
    answer = models(cache_venv, kimi, trust=False)
    if spoil == "none":
        assert answer.get("cached") is True and answer["listing"] == ["FORGED"]
    else:
        assert "cached" not in answer and answer["listing"] != ["FORGED"]


def test_each_user_has_a_cache_of_their_own(home, cache_venv, kimi, monkeypatch):
    """The cache is under the user's own HOME and named by the uid too: another user's file is never theirs."""
    mine = cache_file(cache_venv, kimi)
    assert str(mine).startswith(str(home))
    other_home = home / "other"
    other_home.mkdir()
    monkeypatch.setenv("HOME", str(other_home))
    monkeypatch.setattr(os, "getuid", lambda: 12345)
    theirs = cache_file(cache_venv, kimi)
    assert str(theirs).startswith(str(other_home)) and theirs.name != mine.name
