"""The patch engine: states from facts (pure), and the host program run on real files here."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

import libcst as cst
import pytest
from packaging.specifiers import SpecifierSet

from envdoctor.errors import ConfigError, PatchError
from envdoctor.patching.ledger import applied_patches, ledger_path, parse_ledger, unfinished
from envdoctor.patching.host import KILL_AFTER_INTENT_ENV
from envdoctor.patching.engine import (
    APPLIED,
    CONFLICT,
    NOT_APPLICABLE,
    PENDING,
    Patch,
    PatchFiles,
    RemoteFile,
    SkipFile,
    apply_patch_remedy,
    changes_remedy,
    load_patches,
    patch_remedy,
    plan_patch,
    record_hash_hex,
    revert_patch,
)
from envdoctor.transport.local import LocalTransport
from envdoctor.patching.proof import AddKeyword, ReplaceStatement
from envdoctor.patches.trust_remote_code import add_flag_at
from tests.unit.fakes import dist, env

SOURCE = b"from transformers import AutoTokenizer\ntok = AutoTokenizer.from_pretrained(path)\n"
PATCHED = b"from transformers import AutoTokenizer\ntok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)\n"
REL = "demo/load.py"
TOKENIZER = "transformers.AutoTokenizer.from_pretrained"

DEMO = Patch(
    id="demo-flag",
    summary="demo loads its tokenizer with trust_remote_code=True",
    why="test",
    distribution="demo",
    specifier=SpecifierSet(">=1.0,<2"),
    files=(REL,),
    transform=add_flag_at({(2, 6, TOKENIZER)}),
    fixed_in="2.0",
    declares=(AddKeyword("trust_remote_code", sites=((2, 6, TOKENIZER),)),),
)


def record_of(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


class Venv:
    """A fake environment on disk: one distribution with RECORD, one module, its bytecode."""

    def __init__(self, root: Path, version: str = "1.2") -> None:
        self.prefix = str(root / "venv")
        self.site = root / "venv" / "lib" / "python3.11" / "site-packages"
        self.file = self.site / REL
        self.file.parent.mkdir(parents=True)
        self.file.write_bytes(SOURCE)
        self.pyc = self.file.parent / "__pycache__" / "load.cpython-311.pyc"
        self.pyc.parent.mkdir()
        self.pyc.write_bytes(b"stale")
        info = self.site / f"demo-{version}.dist-info"
        info.mkdir()
        (info / "RECORD").write_text(f"{REL},{record_of(SOURCE)},{len(SOURCE)}\n")
        # The host program runs with this interpreter; the fake venv has none of its own.
        self.env = replace(env(self.prefix, dist("demo", version, site=str(self.site))), python=sys.executable)

    def files(self, ledger_lines: list[str] | None = None) -> PatchFiles:
        data = self.file.read_bytes() if self.file.exists() else None
        remote = RemoteFile("demo", REL, str(self.file), data, record_of(SOURCE))
        if ledger_lines is None:
            ledger_lines = self.ledger_lines()
        return PatchFiles(self.prefix, {("demo", REL): remote}, tuple(parse_ledger(ledger_lines)))

    def ledger_lines(self) -> list[str]:
        path = Path(ledger_path(self.prefix))
        return path.read_text().splitlines() if path.exists() else []

    def plan(self):
        return plan_patch(DEMO, self.env, self.files())

    def apply(self):
        plan = self.plan()
        assert plan.state == PENDING, plan.message
        return asyncio.run(apply_patch_remedy(LocalTransport(), patch_remedy(plan, self.env, consent=True), dry_run=False))


@pytest.fixture
def venv(tmp_path: Path) -> Venv:
    return Venv(tmp_path)


def test_record_digest_is_read_as_hex():
    """RECORD's urlsafe base64 sha256 without padding decodes to the file's hex digest."""
    assert record_hash_hex(record_of(SOURCE)) == hashlib.sha256(SOURCE).hexdigest()
    assert record_hash_hex("md5=abc") is None


def test_pristine_file_is_pending_with_diff(venv):
    """A file that matches RECORD and needs the change is pending, with a unified diff."""
    plan = venv.plan()
    assert plan.state == PENDING
    assert "+tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)" in plan.diff
    assert plan.changes[0].data == PATCHED


def test_foreign_change_is_a_conflict(venv):
    """A file whose hash is neither RECORD's nor a known pre-image is refused as a conflict."""
    venv.file.write_bytes(SOURCE + b"# edited by hand\n")
    plan = venv.plan()
    assert plan.state == CONFLICT and "not a file this patch recognises" in plan.message


def test_version_outside_specifier_names_the_upstream_fix(tmp_path):
    """An installed version outside the specifier is not-applicable, naming the version that fixed it."""
    plan = Venv(tmp_path, version="2.1").plan()
    assert plan.state == NOT_APPLICABLE
    assert "demo 2.1" in plan.message and "fixed upstream in 2.0" in plan.message


def test_missing_distribution_is_not_applicable(venv):
    """Without the distribution there is nothing to patch."""
    plan = plan_patch(DEMO, env(venv.prefix), venv.files())
    assert plan.state == NOT_APPLICABLE and not plan.version


def test_apply_writes_file_backup_ledger_and_drops_bytecode(venv):
    """Applying replaces the file, keeps a private backup, drops its .pyc, and logs intent then done."""
    outcome = venv.apply()
    assert outcome.exit_status == 0, outcome.output
    assert venv.file.read_bytes() == PATCHED
    assert not venv.pyc.exists()
    entries = parse_ledger(venv.ledger_lines())
    assert [(e.op, e.phase) for e in entries] == [("apply", "intent"), ("apply", "done")]
    done = entries[-1]
    assert done.sha256_before == hashlib.sha256(SOURCE).hexdigest()
    assert done.sha256_after == hashlib.sha256(PATCHED).hexdigest()
    assert Path(done.backup).read_bytes() == SOURCE
    assert stat.S_IMODE(os.stat(done.backup).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(venv.prefix) / ".envdoctor").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ledger_path(venv.prefix)).st_mode) == 0o600
    assert venv.plan().state == APPLIED


def test_file_changed_after_check_is_refused_under_the_lock(venv):
    """If the file changes between check and fix, the host refuses and writes nothing."""
    plan = venv.plan()
    venv.file.write_bytes(SOURCE + b"# someone else\n")
    outcome = asyncio.run(apply_patch_remedy(LocalTransport(), patch_remedy(plan, venv.env, consent=True), dry_run=False))
    assert outcome.exit_status != 0 and "changed since it was checked" in outcome.output
    assert venv.file.read_bytes() == SOURCE + b"# someone else\n"
    assert venv.ledger_lines() == []


def test_killed_after_intent_is_redone_by_next_run(venv, monkeypatch):
    """A run killed right after its intent line leaves the file intact; the next run applies it once."""
    monkeypatch.setenv(KILL_AFTER_INTENT_ENV, "1")
    killed = venv.apply()
    assert killed.exit_status != 0
    assert venv.file.read_bytes() == SOURCE
    assert len(unfinished(parse_ledger(venv.ledger_lines()))) == 1
    monkeypatch.delenv(KILL_AFTER_INTENT_ENV)
    assert venv.apply().exit_status == 0
    entries = parse_ledger(venv.ledger_lines())
    assert venv.file.read_bytes() == PATCHED
    assert unfinished(entries) == []
    assert len([e for e in entries if e.op == "apply" and e.phase == "done"]) == 1


def test_killed_after_replace_is_only_recorded_by_next_run(venv):
    """A run killed after the rename (no done line) is completed by recording it, not by rewriting."""
    venv.apply()
    lines = venv.ledger_lines()
    Path(ledger_path(venv.prefix)).write_text(lines[0] + "\n" + lines[1][:20])  # done line torn
    plan = venv.plan()
    assert plan.state == PENDING and plan.unrecorded == (str(venv.file),)
    outcome = asyncio.run(apply_patch_remedy(LocalTransport(), patch_remedy(plan, venv.env, consent=True), dry_run=False))
    assert "completed" in outcome.output
    assert venv.plan().state == APPLIED


def test_two_concurrent_applies_leave_one_clean_patch(venv):
    """Two fixes racing: one applies, the other finds it done; the ledger records one apply."""
    remedy = patch_remedy(venv.plan(), venv.env, consent=True)

    async def race():
        return await asyncio.gather(*(apply_patch_remedy(LocalTransport(), remedy, dry_run=False) for _ in range(2)))

    outcomes = asyncio.run(race())
    results = sorted(o.output.split(": ")[1].split(" ")[0] for o in outcomes)
    assert results == ["already-applied", "applied"]
    assert venv.file.read_bytes() == PATCHED
    assert len([e for e in parse_ledger(venv.ledger_lines()) if e.phase == "done"]) == 1


def test_revert_restores_original_and_records_it(venv):
    """Revert puts the backup back and records the revert, so the patch is no longer in force."""
    venv.apply()
    venv.pyc.write_bytes(b"stale again")
    results = asyncio.run(revert_patch(LocalTransport(), venv.env, venv.files(), DEMO.id))
    assert [r.result for r in results] == ["reverted"]
    assert venv.file.read_bytes() == SOURCE and not venv.pyc.exists()
    entries = parse_ledger(venv.ledger_lines())
    assert applied_patches(entries) == {}
    assert entries[-1].op == "revert" and entries[-1].sha256_after == hashlib.sha256(SOURCE).hexdigest()


def test_revert_of_a_patch_not_in_force_is_an_error(venv):
    """Reverting a patch the ledger does not show as applied raises PatchError with a hint."""
    with pytest.raises(PatchError, match="not applied"):
        asyncio.run(revert_patch(LocalTransport(), venv.env, venv.files(), DEMO.id))


def test_revert_refuses_a_file_changed_since_patching(venv):
    """A patched file someone edited afterwards is not overwritten by revert."""
    venv.apply()
    venv.file.write_bytes(PATCHED + b"# later edit\n")
    results = asyncio.run(revert_patch(LocalTransport(), venv.env, venv.files(), DEMO.id))
    assert [r.result for r in results] == ["refused"]
    assert venv.file.read_bytes() == PATCHED + b"# later edit\n"


def test_host_checks_record_for_changes_planned_without_it(venv):
    """A change marked for a RECORD check is refused on the host when the file is not RECORD's."""
    foreign = SOURCE + b"# local\n"
    venv.file.write_bytes(foreign)
    plan = plan_patch(DEMO, venv.env, PatchFiles(venv.prefix, {("demo", REL): RemoteFile(
        "demo", REL, str(venv.file), foreign, record_of(foreign))}))
    marked = replace(plan.changes[0], record_site=str(venv.site))
    remedy = changes_remedy(DEMO.id, [marked], venv.env, automatic=True)
    outcome = asyncio.run(apply_patch_remedy(LocalTransport(), remedy, dry_run=False))
    assert outcome.exit_status != 0 and "differs from RECORD" in outcome.output
    assert venv.file.read_bytes() == foreign


def test_user_patch_file_is_loaded_and_checked(tmp_path):
    """--patches FILE adds its Patch objects; a file without one, or a duplicate id, is a usage error."""
    good = tmp_path / "mine.py"
    good.write_text(
        "from packaging.specifiers import SpecifierSet\n"
        "from envdoctor.patching.engine import Patch\n"
        "MINE = Patch(id='mine', summary='s', why='w', distribution='x', specifier=SpecifierSet('>=1'),\n"
        "             files=('x/a.py',), transform=lambda module: module)\n"
    )
    assert "mine" in [p.id for p in load_patches([str(good)]).patches]
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ConfigError, match="defines no Patch"):
        load_patches([str(empty)])
    with pytest.raises(ConfigError, match="two patches"):
        load_patches([str(good), str(good)])
    assert json.dumps(load_patches().get("speculators-tokenizer-trust-remote-code").versions) == '">=0.3.0,<0.5"'


def _append_marker(module: cst.Module) -> cst.Module:
    if "PATCHED_TWICE" in module.code:
        raise SkipFile("already there")
    return module.with_changes(body=[*module.body, cst.parse_statement("PATCHED_TWICE = True\n")])


def test_second_patch_on_a_file_accepts_the_first_patchs_text(venv):
    """A file another envdoctor patch left as recorded is a known pre-image, not a conflict."""
    venv.apply()
    second = replace(DEMO, id="demo-second", transform=_append_marker,
                     declares=(ReplaceStatement("", old="", new="PATCHED_TWICE = True"),))
    plan = plan_patch(second, venv.env, venv.files())
    assert plan.state == PENDING, plan.message
    outcome = asyncio.run(apply_patch_remedy(LocalTransport(), patch_remedy(plan, venv.env, consent=True), dry_run=False))
    assert outcome.exit_status == 0, outcome.output
    assert venv.file.read_bytes() == PATCHED + b"PATCHED_TWICE = True\n"
    assert plan_patch(DEMO, venv.env, venv.files()).state == APPLIED


def test_user_patch_is_proven_like_a_shipped_one(venv, tmp_path):
    """A --patches file that declares its keyword applies; the same change undeclared is refused and nothing is written."""
    mine = tmp_path / "mine.py"
    mine.write_text(
        "from packaging.specifiers import SpecifierSet\n"
        "from envdoctor.patching.engine import AddKeyword, Patch\n"
        "TOKENIZER = 'transformers.AutoTokenizer.from_pretrained'\n"
        "def transform(module):\n"
        "    from envdoctor.patching.cst_edits import add_keyword_at_sites\n"
        "    return add_keyword_at_sites(module, callee=TOKENIZER).module\n"
        "MINE = Patch(id='mine-flag', summary='s', why='w', distribution='demo', specifier=SpecifierSet('>=1'),\n"
        "             files=('demo/load.py',), transform=transform,\n"
        "             declares=(AddKeyword('trust_remote_code', callee=TOKENIZER),))\n"
        "LAZY = Patch(id='mine-undeclared', summary='s', why='w', distribution='demo', specifier=SpecifierSet('>=1'),\n"
        "             files=('demo/load.py',), transform=transform)\n"
    )
    patches = load_patches([str(mine)])
    refused = plan_patch(patches.get("mine-undeclared"), venv.env, venv.files())
    assert refused.state == "refused" and refused.changes == () and "+tok = " in refused.diff
    plan = plan_patch(patches.get("mine-flag"), venv.env, venv.files())
    assert plan.state == PENDING, plan.message
    outcome = asyncio.run(apply_patch_remedy(LocalTransport(), patch_remedy(plan, venv.env, consent=True), dry_run=False))
    assert outcome.exit_status == 0 and venv.file.read_bytes() == PATCHED
