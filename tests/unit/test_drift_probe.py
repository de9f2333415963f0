"""The drift probe section on a small site-packages laid out on disk: selection, entry scope, cache."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from envdoctor.drift.judge import judge
from envdoctor.probe import drift as probe_drift


def dist(site: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> None:
    """A distribution with METADATA and RECORD, as pip installs one."""
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n\n", encoding="utf-8")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files) + f"{info.name}/RECORD,,\n", encoding="utf-8")


@pytest.fixture()
def venv(tmp_path: Path) -> Path:
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    dist(site, "transformers", "5.0.0", {"transformers/__init__.py": "def pipeline(task):\n    pass\n"})
    dist(site, "vllm", "0.16.0", {
        "vllm/__init__.py": "",
        "vllm/sched.py": "class Scheduler:\n    def __init__(self, config, block_size):\n        pass\n",
    })
    dist(site, "speculators", "0.3.0", {
        "speculators/__init__.py": "",
        "speculators/gen.py": "from vllm.sched import Scheduler\nScheduler(config=1)\n",
        "speculators/train.py": "import transformers\ntransformers.pipeline('x', extra=1)\n",
        "speculators/cli.py": "from speculators import train\n",
    }, requires=("transformers>=4", 'vllm==0.11.0; extra == "datagen"'))
    return prefix


def run(prefix: Path, **args) -> dict:
    request = {"prefix": str(prefix), "depends_on": ["transformers", "vllm", "sglang"], "extra": [], **args}
    return probe_drift.drift_section(request, lambda item: None)


def test_consumers_uses_and_findings_from_files_on_disk(venv: Path) -> None:
    """speculators (it depends on transformers) is read; both providers' breaks are found."""
    data = run(venv, cache=False)
    pairs = {(p.consumer, p.provider): p for p in judge(data)}
    assert set(pairs) == {("speculators", "vllm"), ("speculators", "transformers")}
    assert [(f.path, f.line) for f in pairs["speculators", "vllm"].findings] == [("speculators/gen.py", 2)]
    assert "vllm==0.11.0" in pairs["speculators", "vllm"].remedy
    assert [f.line for f in pairs["speculators", "transformers"].findings] == [2]


def test_entry_scope_reads_only_the_files_the_entry_imports(venv: Path) -> None:
    """-m speculators.cli reaches train.py (and the package), never gen.py."""
    data = run(venv, cache=False, entry="speculators.cli")
    assert set(data["scoped_files"]) == {"speculators/cli.py", "speculators/train.py", "speculators/__init__.py"}
    assert {p.provider for p in judge(data)} == {"transformers"}


def test_cache_answers_an_unchanged_venv_and_notices_a_changed_file(venv: Path) -> None:
    """Second run: a hit from an owner-only file; a rewritten provider file: a miss."""
    assert run(venv)["cache"] == "miss"
    cache = venv / ".envdoctor" / "drift-cache"
    assert cache.stat().st_mode & 0o077 == 0
    assert run(venv)["cache"] == "hit"
    module = next(venv.glob("lib/*/site-packages/vllm/sched.py"))
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert run(venv)["cache"] == "miss"


def test_a_cache_others_can_write_is_ignored(venv: Path) -> None:
    """A group-writable cache file is not trusted."""
    run(venv)
    cache = venv / ".envdoctor" / "drift-cache"
    cache.chmod(0o620)
    assert run(venv)["cache"] == "miss"
