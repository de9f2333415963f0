"""The controller's cache of the scanner's answers: the same text is parsed once across runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from envdoctor.scan import site_cache
from envdoctor.scan.loaders import ScanError, Site

SOURCE = b"from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained('m')\n"


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ENVDOCTOR_CODE_CACHE", raising=False)
    return tmp_path / "xdg" / "envdoctor" / "scan-sites"


def counting_scan(calls: list):
    def scan(data, path, exports):
        calls.append((data, path))
        return [Site(path, 2, 0, "transformers.AutoTokenizer.from_pretrained", "missing")], None
    return scan


def test_a_text_is_scanned_once_and_a_changed_one_again(cache_home):
    """A second call with the same path and text reads the kept answer; another text is a miss."""
    calls: list = []
    first = site_cache.cached_scan(SOURCE, "lib/a.py", None, counting_scan(calls))
    again = site_cache.cached_scan(SOURCE, "lib/a.py", None, counting_scan(calls))
    assert first == again and len(calls) == 1 and first[0][0].state == "missing"
    site_cache.cached_scan(SOURCE + b"\n", "lib/a.py", None, counting_scan(calls))
    site_cache.cached_scan(SOURCE, "lib/b.py", None, counting_scan(calls))
    assert len(calls) == 3


def test_an_entry_of_the_wrong_shape_or_from_others_is_not_used(cache_home):
    """A damaged entry, or one others could have written, means scanning again."""
    calls: list = []
    site_cache.cached_scan(SOURCE, "lib/a.py", None, counting_scan(calls))
    (entry,) = cache_home.iterdir()
    entry.write_text('{"sites": [[1]]}')
    site_cache.cached_scan(SOURCE, "lib/a.py", None, counting_scan(calls))
    assert len(calls) == 2
    entry.chmod(0o666)
    site_cache.cached_scan(SOURCE, "lib/a.py", None, counting_scan(calls))
    assert len(calls) == 3


def test_errors_and_exports_are_kept_too_and_off_writes_nothing(cache_home, monkeypatch):
    """A file that does not parse keeps its error; exports come back as read; off writes nothing."""
    def failing(data, path, exports):
        return [], ScanError(path, "does not parse")
    assert site_cache.cached_scan(b"def (", "x.py", None, failing) == ((), ScanError("x.py", "does not parse"))
    assert site_cache.cached_scan(b"def (", "x.py", None, counting_scan([])) == ((), ScanError("x.py", "does not parse"))
    reads: list = []
    def exports(data, module, package):
        reads.append(module)
        return {"AutoTokenizer": "transformers.AutoTokenizer"}
    assert site_cache.cached_exports(SOURCE, "pkg", None, exports) == {"AutoTokenizer": "transformers.AutoTokenizer"}
    assert site_cache.cached_exports(SOURCE, "pkg", None, exports) == {"AutoTokenizer": "transformers.AutoTokenizer"}
    assert reads == ["pkg"]
    monkeypatch.setenv("ENVDOCTOR_CODE_CACHE", "off")
    before = set(cache_home.iterdir())
    site_cache.cached_scan(b"y = 1", "y.py", None, counting_scan([]))
    assert set(cache_home.iterdir()) == before
