"""The parts of pure-logic modules that start processes: worker processes of the scanner and the
audit's stat pass, and the CLI on a file too deep to parse (moved from the unit tier, which
starts no process)."""

from __future__ import annotations

import subprocess
import sys

from envdoctor.probe.host.audit import snapshot as audit_snapshot
from envdoctor.scan.scanner import TrustRemoteCodeScanner
from tests.unit.test_audit import fake_env, run_section  # noqa: F401  # fake_env is a fixture
from tests.unit.test_audit_snapshot import REPLAYED, env  # noqa: F401  # env is a fixture
from tests.unit.test_scan import CFG, tree  # noqa: F401  # tree is a fixture


def test_deep_source_through_the_scanner_cli_exits_without_a_crash(tmp_path):
    """`envdoctor scan` on a 20,000-deep file says it cannot be scanned instead of dying with SIGSEGV: a
    one-line error (exit 2) when the file is named, one of the errors when its folder is."""
    bad = tmp_path / "bad.py"
    bad.write_text("from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained('m')\nx = "
                   + "(" * 20000 + "1" + ")" * 20000 + "\n")
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "scan", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr  # a named file that cannot be scanned is bad input
    assert proc.stderr.startswith("envdoctor: error:") and "nested brackets" in proc.stderr.splitlines()[0]
    assert "Traceback" not in proc.stderr
    inside = subprocess.run([sys.executable, "-m", "envdoctor", "scan", str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert inside.returncode == 0 and "nested brackets" in inside.stdout, inside.stderr


def test_filtered_parallel_and_full_scans_agree(tree):  # noqa: F811  # the fixture imported above
    """The byte filter, the ast shortcuts and worker processes change the speed, never the findings."""
    reference = TrustRemoteCodeScanner(use_filter=False, shortcuts=False).scan([tree])
    assert reference.parsed == reference.files
    for scanner in (TrustRemoteCodeScanner(), TrustRemoteCodeScanner(jobs=2), TrustRemoteCodeScanner(use_filter=False)):
        report = scanner.scan([tree])
        assert (report.sites, report.errors) == (reference.sites, reference.errors)
        assert report.parsed < reference.parsed or not scanner.use_filter


def test_namespace_packages_and_reexports_resolve_across_a_scanned_tree(tmp_path):
    """A folder without __init__.py is still a package inside the scanned root, and a package's re-export is followed."""
    root = tmp_path / "python" / "sglang"
    (root / "srt" / "utils").mkdir(parents=True)  # srt and utils have no __init__.py, as in sglang
    (root / "__init__.py").write_text("")
    (root / "srt" / "utils" / "common.py").write_text("from transformers import AutoConfig, AutoProcessor\n")
    (root / "srt" / "hf.py").write_text(
        "from .utils.common import AutoConfig\n"
        "from .utils import common\n"
        "config = AutoConfig.from_pretrained(path)\n"
        "processor = common.AutoProcessor.from_pretrained(path, trust_remote_code=True)\n"
    )
    (root / "srt" / "model_loader.py").write_text(
        "from transformers import AutoModel\nmodel = AutoModel.from_config(config)\n")
    for scanner in (TrustRemoteCodeScanner(), TrustRemoteCodeScanner(jobs=2),
                    TrustRemoteCodeScanner(use_filter=False, shortcuts=False)):
        report = scanner.scan([root])
        assert [(s.path, s.line, s.callee, s.state) for s in report.sites] == [
            ("srt/hf.py", 3, CFG, "missing"),
            ("srt/hf.py", 4, "transformers.AutoProcessor.from_pretrained", "ok"),
            ("srt/model_loader.py", 2, "transformers.AutoModel.from_config", "missing"),
        ], scanner
    # Installed under site-packages, a namespace folder is named from the site root.
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "ns" / "inner").mkdir(parents=True)
    module = site / "ns" / "inner" / "m.py"
    module.write_text("from ..up import AutoModel\n")
    from envdoctor.scan.scanner import module_of_file

    assert module_of_file(module, site / "ns") == ("ns.inner.m", "ns.inner")


def test_stat_pass_is_the_same_over_forked_workers(env, monkeypatch):  # noqa: F811  # the fixture imported above
    """The digests do not depend on how many processes took the chunks."""
    prefix, _, _ = env
    monkeypatch.setattr(audit_snapshot, "PARALLEL_MIN_PATHS", 0)
    data, items = run_section(prefix, workers=3)
    assert items == {} and data["stats"]["snapshot"].startswith(REPLAYED) and data["stats"]["workers"] == 3


def test_a_stopped_atomic_write_leaves_no_temporary_file(tmp_path):
    """The command watch stops a host command with SIGTERM when envdoctor is gone: the patch
    writer then unwinds (the temporary file removed, the target untouched), where the default
    action would leave `.envdoctor-*.tmp` beside the file it was replacing."""
    import signal
    import time

    from envdoctor.probe.host import program_text

    target = tmp_path / "module.py"
    target.write_bytes(b"old\n")
    script = program_text(("patch.atomic_write",), "unwind_on_stop") + (
        "\nimport os, time\n"
        "os.fsync = lambda fd: time.sleep(60)  # hold the write where the temporary file exists\n"
        f"write_atomic({str(target)!r}, b'new' * 1000, 0o644)\n")
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".envdoctor-*.tmp")):
            assert proc.poll() is None and time.monotonic() < deadline, "the write never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert target.read_bytes() == b"old\n"
    assert list(tmp_path.glob(".envdoctor-*.tmp")) == []
