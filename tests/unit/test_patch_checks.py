"""checks/patches.py: each patch state becomes the right check status and remedy."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace

from packaging.specifiers import SpecifierSet

from envdoctor.checks.patches import evaluator, trust_remote_code_remedy
from envdoctor.engine.graph import CheckContext
from envdoctor.inventory import HostSpec
from envdoctor.patching.engine import Patch
from envdoctor.probe.program import ProbeOutput
from envdoctor.engine.results import Status
from envdoctor.patching.proof import AddKeyword
from envdoctor.patches.trust_remote_code import add_flag_at
from tests.unit.fakes import dist, env, facts

SITE = "/v/lib/python3.11/site-packages"
SOURCE = b"from transformers import AutoConfig\nc = AutoConfig.from_pretrained(p)\n"
CONFIG = "transformers.AutoConfig.from_pretrained"
DEMO = Patch(id="demo", summary="s", why="w", distribution="demo", specifier=SpecifierSet("<2"),
             files=("demo/a.py",), transform=add_flag_at({(2, 4, CONFIG)}), fixed_in="2.0", needs_consent=True,
             declares=(AddKeyword("trust_remote_code", sites=((2, 4, CONFIG),)),))


def record_of(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def context(version: str = "1.0", data: bytes = SOURCE, *, consent: bool = False) -> CheckContext:
    section = {"prefix": "/v", "ledger": [], "files": [{
        "distribution": "demo", "path": "demo/a.py", "file": f"{SITE}/demo/a.py", "site": SITE,
        "record": record_of(SOURCE), "data": base64.b64encode(data).decode()}]}
    host = replace(facts(env("/v", dist("demo", version))), probe=ProbeOutput(sections={"patch_files": section}))
    return CheckContext(HostSpec("h", None, venv="/v", trust_remote_code=consent), host)


def test_pending_needs_consent_warns_and_is_not_automatic():
    """A pending patch that passes trust_remote_code warns, with a by-hand remedy, without consent."""
    result = evaluator(DEMO)(context())
    assert result.status is Status.WARN and result.details["state"] == "pending"
    assert result.remedy is not None and result.remedy.kind == "patch" and not result.remedy.automatic


def test_pending_with_consent_fails_with_automatic_patch_remedy():
    """With consent the pending patch fails and fix may apply it by itself."""
    result = evaluator(DEMO)(context(consent=True))
    assert result.status is Status.FAIL and result.remedy is not None and result.remedy.automatic
    assert "+c = AutoConfig.from_pretrained(p, trust_remote_code=True)" in result.details["diff"]


def test_newer_version_passes_naming_the_fix():
    """Outside the specifier the check passes and says which version fixed it upstream."""
    result = evaluator(DEMO)(context("2.3"))
    assert result.status is Status.PASS and "fixed upstream in 2.0" in result.message


def test_foreign_file_is_a_conflict_with_a_manual_reinstall():
    """An unrecognised file fails as a conflict whose remedy is a by-hand reinstall."""
    result = evaluator(DEMO)(context(data=SOURCE + b"# mine\n", consent=True))
    assert result.status is Status.FAIL and result.details["state"] == "conflict"
    assert result.remedy is not None and not result.remedy.automatic
    assert result.remedy.argv[-3:] == ("--force-reinstall", "--no-deps", "demo==1.0")


class _Site:
    def __init__(self, path: str, line: int, state: str) -> None:
        self.path, self.line, self.state = path, line, state
        self.column, self.callee = 4, CONFIG


class _Gap:
    def __init__(self, path: str, line: int, state: str = "missing") -> None:
        self.distribution = "other"
        self.site = _Site(path, line, state)


def test_generic_remedy_patches_missing_sites_only_with_consent():
    """The scanner's missing sites get one patch remedy, automatic only with consent; false is left."""
    data = b"from transformers import AutoConfig\na = AutoConfig.from_pretrained(p)\nb = AutoConfig.from_pretrained(p, trust_remote_code=False)\n"
    items = [{"distribution": "other", "version": "3.0", "site": SITE, "path": "other/x.py",
              "data": base64.b64encode(data).decode()}]
    gaps = [_Gap("other/x.py", 2), _Gap("other/x.py", 3, "explicit-false")]
    ctx = context()
    remedy = trust_remote_code_remedy(ctx, items, gaps)
    assert remedy is not None and not remedy.automatic
    (change,) = remedy.payload["changes"]
    assert change.data.splitlines()[1:] == [b"a = AutoConfig.from_pretrained(p, trust_remote_code=True)",
                                           b"b = AutoConfig.from_pretrained(p, trust_remote_code=False)"]
    assert change.record_site == SITE and change.file == f"{SITE}/other/x.py"
    assert trust_remote_code_remedy(context(consent=True), items, gaps).automatic


def test_generic_remedy_leaves_files_a_dedicated_patch_owns():
    """A file a shipped patch covers for the installed version is not patched generically."""
    ctx = replace(context(), facts=replace(context().facts, envs=(env("/v", dist("speculators", "0.3.0")),)))
    rel = "speculators/data_generation/vllm_hidden_states_generator.py"
    items = [{"distribution": "speculators", "version": "0.3.0", "site": SITE, "path": rel,
              "data": base64.b64encode(SOURCE).decode()}]
    gap = _Gap(rel, 2)
    gap.distribution = "speculators"
    assert trust_remote_code_remedy(ctx, items, [gap]) is None


def test_patch_whose_result_is_not_what_it_declares_is_refused_with_its_diff():
    """A transform that changes more than its declaration: the check errors with the diff and offers no remedy."""
    import libcst as cst

    def sneaky(module: cst.Module) -> cst.Module:
        return cst.parse_module(module.code.replace("(p)", "(p, trust_remote_code=True)").replace("c = ", "cfg = "))

    result = evaluator(replace(DEMO, transform=sneaky))(context(consent=True))
    assert result.status is Status.ERROR and result.remedy is None
    assert result.details["state"] == "refused" and "nothing written" in result.message
    assert "+cfg = AutoConfig.from_pretrained(p, trust_remote_code=True)" in result.details["diff"]
