"""The drift probe section on a small site-packages laid out on disk: selection, entry scope, cache."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from envdoctor.drift.judge import judge
from envdoctor.probe.host.drift import section as probe_drift


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
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the cache lives in ~/.cache/envdoctor
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
    # Environments discovered on this machine are never a baseline here: only those named.
    request = {"prefix": str(prefix), "depends_on": ["transformers", "vllm", "sglang"], "extra": [],
               "discover_baselines": False, **args}
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
    assert not (venv / ".envdoctor").exists()  # a check writes nothing inside the environment
    cache = Path(probe_drift.drift_cache_folder(str(venv))) / probe_drift.DRIFT_CACHE_NAME
    assert cache.stat().st_mode & 0o077 == 0
    assert run(venv)["cache"] == "hit"
    module = next(venv.glob("lib/*/site-packages/vllm/sched.py"))
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert run(venv)["cache"] == "miss"


def test_a_same_size_edit_dated_back_is_noticed(venv: Path) -> None:
    """An edit that keeps the file's size, then `touch -d` back to its old mtime, is not answered
    from the cache: the key holds the ctime and inode, which no owner can set back."""
    assert run(venv)["cache"] == "miss"
    module = next(venv.glob("lib/*/site-packages/speculators/gen.py"))
    before = module.stat()
    uses = [u for c in run(venv)["consumers"] for u in c["uses"]]
    assert any("config" in json.dumps(u) for u in uses)
    module.write_text(module.read_text().replace("config=1", "confiX=1"))
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (module.stat().st_size, module.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = run(venv)
    assert again["cache"] == "miss"
    assert any("confiX" in json.dumps(u) for c in again["consumers"] for u in c["uses"])


def test_a_cache_others_can_write_is_ignored(venv: Path) -> None:
    """A group-writable cache file is not trusted."""
    run(venv)
    cache = Path(probe_drift.drift_cache_folder(str(venv))) / probe_drift.DRIFT_CACHE_NAME
    cache.chmod(0o620)
    assert run(venv)["cache"] == "miss"


def test_several_entries_read_the_union_and_an_unknown_entry_reads_everything(venv: Path, tmp_path: Path) -> None:
    """Two stages' entries: the files either reaches; an entry the host lacks: no scope, named as not found."""
    script = tmp_path / "job.py"
    script.write_text("import speculators.gen\n", encoding="utf-8")
    data = run(venv, cache=False, entry=["speculators.cli", str(script)])
    assert set(data["scoped_files"]) == {"speculators/cli.py", "speculators/train.py", "speculators/__init__.py",
                                         "speculators/gen.py"}
    assert data["entries_unfound"] == []
    data = run(venv, cache=False, entry=["speculators.cli", "torch.distributed.run"])
    assert data["scoped_files"] is None and data["entries_unfound"] == ["torch.distributed.run"]
    assert {p.provider for p in judge(data)} == {"transformers", "vllm"}


def known_good_venvs(tmp_path: Path) -> tuple[Path, Path]:
    """speculators pinning vllm==0.11.0 under [datagen] beside vllm 0.16.0, and a second venv with vllm 0.11.0."""
    here, there = tmp_path / "new", tmp_path / "old"
    for prefix, version, scheduler in ((here, "0.16.0", "config, block_size"), (there, "0.11.0", "config")):
        site = prefix / "lib" / "python3.11" / "site-packages"
        dist(site, "transformers", "5.0.0", {"transformers/__init__.py": ""})
        dist(site, "vllm", version, {"vllm/__init__.py": "", "vllm/sched.py": (
            f"class Scheduler:\n    def __init__(self, {scheduler}):\n        pass\n")})
    dist(here / "lib" / "python3.11" / "site-packages", "speculators", "0.3.0", {
        "speculators/__init__.py": "",
        "speculators/gen.py": "from vllm.sched import Scheduler\nScheduler(config=1)\nfrom vllm.sched import gone\n",
    }, requires=("transformers>=4", 'vllm==0.11.0; extra == "datagen"'))
    return here, there


def test_a_known_good_version_elsewhere_keeps_new_breaks_and_downgrades_old_ones(tmp_path: Path) -> None:
    """Against the pinned vllm 0.11.0 of another venv: Scheduler() fits there (stays an error, says so),
    the import that fails there too becomes a warning."""
    here, there = known_good_venvs(tmp_path)
    data = run(here, cache=False, baselines=[str(there), str(tmp_path / "nope")])
    assert [(b["provider"], b["version"], b["extra"]) for b in data["baselines"]] == [("vllm", "0.11.0", "datagen")]
    assert data["baselines_missing"] == [str(tmp_path / "nope")]
    pair = next(p for p in judge(data) if p.provider == "vllm")
    by_line = {f.line: f for f in pair.findings}
    assert by_line[2].severity == "error"
    assert "resolves against vllm 0.11.0 (pinned by speculators [datagen]); breaks against 0.16.0" in by_line[2].why
    assert by_line[3].severity == "warn" and "also fails against vllm 0.11.0, the version speculators names" in by_line[3].why
    assert pair.known_good is not None and pair.known_good.prefix == str(there)
    assert f"is installed in {there}" in pair.remedy


def test_without_a_known_good_version_the_findings_are_unchanged(tmp_path: Path) -> None:
    """No environment holds vllm 0.11.0: both uses are plain errors and no baseline is reported."""
    here, there = known_good_venvs(tmp_path)
    (there / "lib" / "python3.11" / "site-packages" / "vllm-0.11.0.dist-info").rename(
        there / "lib" / "python3.11" / "site-packages" / "vllm-0.12.0.dist-info")
    data = run(here, cache=False, baselines=[str(there)])
    assert data["baselines"] == []
    pair = next(p for p in judge(data) if p.provider == "vllm")
    assert [(f.line, f.severity) for f in pair.findings] == [(2, "error"), (3, "error")]
    assert "resolves against" not in pair.findings[0].why and pair.known_good is None


@pytest.mark.parametrize(("version", "specifier", "holds"), [
    ("0.16.0", "==0.11.0", False), ("0.11", "==0.11.0", True), ("0.11.2", "==0.11.*", True),
    ("0.12.0", "==0.11.*", False), ("2.5.1+cu121", ">=2.5,<2.6", True), ("2.6.0", ">=2.5,<2.6", False),
    ("1.4.7", "~=1.4.5", True), ("1.5.0", "~=1.4.5", False), ("0.11.0rc1", "==0.11.0", None),
    ("0.16.0", "!=0.16.0", False), ("1.0", "latest", None),
])
def test_the_hosts_specifier_subset_agrees_with_packaging(version: str, specifier: str, holds: bool | None) -> None:
    """Plain releases are compared as packaging does; pre-releases and odd clauses are not guessed."""
    from packaging.specifiers import SpecifierSet

    from envdoctor.probe.host.drift.baseline import baseline_satisfies

    assert baseline_satisfies(version, specifier) is holds
    if holds is not None:
        assert SpecifierSet(specifier).contains(version) is holds
