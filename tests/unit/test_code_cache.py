"""The controller's cache of a model code file's imports (modelfacts/code_cache.py), with real libcst."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envdoctor.modelfacts import code_cache
from envdoctor.modelfacts.code_imports import collect_imports
from envdoctor.modelfacts.import_refs import CodeParseError

SOURCE = "import os\ntry:\n    import tiktoken\nexcept ImportError:\n    pass\nfrom .helpers import x\n"


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ENVDOCTOR_CODE_CACHE", raising=False)
    return tmp_path / "envdoctor" / "code-imports"


def entry(folder: Path) -> Path:
    (found,) = folder.iterdir()
    return found


def test_a_hit_equals_libcst_and_is_read_from_the_owner_only_file(cache_home: Path) -> None:
    """The first read parses and saves (0600 in a 0700 folder); the second comes from the file."""
    assert code_cache.cached_imports("tok.py", SOURCE) == collect_imports("tok.py", SOURCE)
    path = entry(cache_home)
    assert (path.stat().st_mode & 0o777, cache_home.stat().st_mode & 0o777) == (0o600, 0o700)
    data = json.loads(path.read_text())
    data["refs"][0][2] = "forged"
    path.write_text(json.dumps(data))
    assert code_cache.cached_imports("tok.py", SOURCE)[0].module == "forged"  # (read from the file)
    assert code_cache.cached_imports("tok.py", SOURCE + "\n")[0].module == "os"  # another text: a miss


@pytest.mark.parametrize("spoil", ["file group-writable", "folder group-writable", "file a symlink"])
def test_an_entry_someone_else_could_write_is_ignored(spoil: str, cache_home: Path, tmp_path: Path) -> None:
    """A forged entry is not read from a file or folder others can write, nor through a symlink."""
    code_cache.cached_imports("tok.py", SOURCE)
    path = entry(cache_home)
    data = json.loads(path.read_text())
    data["refs"][0][2] = "forged"
    path.write_text(json.dumps(data))
    if spoil == "file group-writable":
        path.chmod(0o620)
    elif spoil == "folder group-writable":
        cache_home.chmod(0o770)
    else:
        elsewhere = tmp_path / "elsewhere.json"
        os.rename(path, elsewhere)
        path.symlink_to(elsewhere)
    assert code_cache.cached_imports("tok.py", SOURCE)[0].module == "os"


def test_a_parse_error_is_cached_as_that_error(cache_home: Path) -> None:
    """The same text fails the same way, from the cache too."""
    with pytest.raises(CodeParseError) as first:
        code_cache.cached_imports("bad.py", "def (:\n")
    with pytest.raises(CodeParseError) as second:
        code_cache.cached_imports("bad.py", "def (:\n")
    assert str(first.value) == str(second.value) and "not valid Python" in str(second.value)
    assert "error" in json.loads(entry(cache_home).read_text())


def test_off_keeps_nothing(cache_home: Path, monkeypatch) -> None:
    """ENVDOCTOR_CODE_CACHE=off parses every time and writes nothing."""
    monkeypatch.setenv("ENVDOCTOR_CODE_CACHE", "off")
    assert code_cache.cached_imports("tok.py", SOURCE) == collect_imports("tok.py", SOURCE)
    assert not cache_home.exists()
