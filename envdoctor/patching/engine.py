"""The patch engine: what a patch is, its state on a host, and applying or reverting it.

A :class:`Patch` (content, in ``patches/``) names a distribution, the versions that need
it, the files it touches, a libcst transform ``Module -> Module`` that does no I/O, and
what that transform changes (``declares``): before anything is written, the new text is
proven to differ from the old only as declared (:mod:`envdoctor.patching.proof`); a patch
that changes anything else is refused.
The engine works from facts the probe already gathered (section ``patch_files``: file
bytes, RECORD hashes, the ledger), so planning is pure: it decides the state of each patch
(pending, applied, not-applicable, conflict), and for a pending one the new text, its
hashes and the unified diff. Writing happens on the host, in :mod:`envdoctor.patching.host`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import importlib
import os
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from envdoctor import __version__
from envdoctor.errors import ConfigError, PatchError
from envdoctor.engine.facts import Environment, HostFacts, canonicalize_name
from envdoctor.engine.graph import load_module_file
from envdoctor.patching.ledger import LedgerEntry, applied_patches, parse_ledger, unfinished
from envdoctor.patching.host import KILL_AFTER_INTENT_ENV, change_request, run_host_program
from envdoctor.patching.proof import AddKeyword as AddKeyword  # re-exported: patch files declare with these
from envdoctor.patching.proof import Declared, prove
from envdoctor.patching.proof import ReplaceStatement as ReplaceStatement
from envdoctor.engine.results import Remedy
from envdoctor.suggestions import did_you_mean
from envdoctor.transport.interface import Transport

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    # libcst takes ~150 ms to import: the CLI pays for it only when a transform runs.
    import libcst as cst

PENDING, APPLIED, NOT_APPLICABLE, CONFLICT = "pending", "applied", "not-applicable", "conflict"
#: The transform's result changes more (or less) than the patch declares: nothing is written.
REFUSED = "refused"


class SkipFile(Exception):
    """Raised by a transform when the file needs no change (already applied, as in libcst codemods)."""


class TransformMismatch(Exception):
    """Raised by a transform when the file does not hold the code it knows how to change."""


class UndeclaredChange(Exception):
    """The new text differs from the old beyond what the patch declares (see patch_proof)."""

    def __init__(self, path: str, problems: Sequence[str], diff: str) -> None:
        super().__init__(f"{path}: the patch changes what it does not declare: {'; '.join(problems)}")
        self.path = path
        self.problems = tuple(problems)
        self.diff = diff


Transform = Callable[["cst.Module"], "cst.Module"]


@dataclass(frozen=True)
class Patch:
    id: str
    summary: str
    why: str
    distribution: str
    #: The versions it is for: a SpecifierSet, or its text (">=0.3.0,<0.4"), parsed when needed
    #: (packaging.specifiers costs 20 ms of start-up, and every command loads the patches).
    specifier: SpecifierSet | str
    files: tuple[str, ...]
    transform: Transform
    #: The upstream version that no longer needs the patch, when known.
    fixed_in: str | None = None
    #: sha256 (hex) of file versions accepted beside the RECORD's (e.g. a known downstream build).
    known_preimages: frozenset[str] = frozenset()
    #: Only applied by fix with the user's --trust-remote-code consent.
    needs_consent: bool = False
    #: What the transform changes, and nothing else (proven before writing; see patch_proof).
    #: A patch that declares nothing may change nothing.
    declares: tuple[Declared, ...] = ()

    @property
    def specifier_set(self) -> SpecifierSet:
        return _specifier_set(self.specifier) if isinstance(self.specifier, str) else self.specifier

    @property
    def versions(self) -> str:
        """The specifier as people write it: lower bounds first (SpecifierSet sorts by text)."""
        order = {">": 0, ">=": 0, "==": 1, "~=": 1, "===": 1, "!=": 2, "<=": 3, "<": 3}
        return ",".join(str(s) for s in sorted(self.specifier_set, key=lambda s: (order.get(s.operator, 2), s.version)))

    def applies_to(self, version: str) -> bool:
        try:
            return self.specifier_set.contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False


@lru_cache(maxsize=1024)
def _specifier_set(text: str) -> SpecifierSet:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(text)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_hash_hex(record: str | None) -> str | None:
    """RECORD's ``sha256=<urlsafe base64, no padding>`` as hex; None for other algorithms."""
    if not record or not record.startswith("sha256="):
        return None
    digest = record[len("sha256="):]
    try:
        return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    except ValueError:
        return None


def transform_source(patch: Patch, source: bytes, path: str = "") -> bytes | None:
    """The patched text, proven to change only what the patch declares; None when the
    transform says it is already applied. Raises UndeclaredChange (with the diff) otherwise."""
    import libcst as cst  # here, not at the top: start-up time (see TYPE_CHECKING above)

    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise TransformMismatch(f"does not parse: {exc.message}") from None
    try:
        new = patch.transform(module)
    except SkipFile:
        return None
    data = new.bytes
    if data == source:
        return None
    problems = prove(patch.declares, path, source, data)
    if problems:
        raise UndeclaredChange(path or "the file", problems, unified_diff(path or "file", source, data))
    return data


def unified_diff(path: str, old: bytes, new: bytes) -> str:
    return "".join(
        difflib.unified_diff(
            old.decode("utf-8", "replace").splitlines(keepends=True),
            new.decode("utf-8", "replace").splitlines(keepends=True),
            fromfile=f"a/{path}", tofile=f"b/{path}",
        )
    )


@dataclass(frozen=True)
class RemoteFile:
    distribution: str
    path: str
    file: str | None
    data: bytes | None
    record: str | None
    error: str | None = None


@dataclass(frozen=True)
class PatchFiles:
    """The ``patch_files`` probe section: files as they are on the host, and the ledger."""

    prefix: str
    files: Mapping[tuple[str, str], RemoteFile]
    ledger: tuple[LedgerEntry, ...] = ()
    error: str | None = None

    @classmethod
    def from_facts(cls, facts: HostFacts) -> PatchFiles | None:
        raw = facts.section("patch_files")
        if raw is None:
            return None
        files = {}
        for item in raw.get("files") or ():
            data = base64.b64decode(item["data"]) if item.get("data") is not None else None
            remote = RemoteFile(item["distribution"], item["path"], item.get("file"), data,
                                item.get("record"), item.get("error"))
            files[(canonicalize_name(remote.distribution), remote.path)] = remote
        return cls(str(raw.get("prefix", "")), files, tuple(parse_ledger(raw.get("ledger") or ())), raw.get("error"))

    def get(self, distribution: str, path: str) -> RemoteFile | None:
        return self.files.get((canonicalize_name(distribution), path))


@dataclass(frozen=True)
class FileChange:
    """One file a pending patch rewrites: what is there, what will be, and the diff."""

    patch: str
    file: str
    path: str
    distribution: str
    version: str
    sha256_before: str
    sha256_after: str
    data: bytes
    diff: str
    #: When set, the host checks the file against RECORD in this site-packages before writing
    #: (for files planned without a RECORD hash at hand, such as the generic patch's).
    record_site: str = ""

    def request(self) -> dict[str, str]:
        return {
            "patch": self.patch, "file": self.file, "path": self.path, "distribution": self.distribution,
            "version": self.version, "sha256_before": self.sha256_before,
            "sha256_after": self.sha256_after, "data": base64.b64encode(self.data).decode("ascii"),
            "record_site": self.record_site,
        }


@dataclass(frozen=True)
class PatchPlan:
    patch: Patch
    state: str
    message: str
    version: str = ""
    changes: tuple[FileChange, ...] = ()
    #: Files an interrupted run already changed: fix only has to record them.
    unrecorded: tuple[str, ...] = ()
    #: REFUSED: what the transform would have written (its diff), never applied.
    refused: tuple[FileChange, ...] = ()

    @property
    def diff(self) -> str:
        return "".join(c.diff for c in self.changes or self.refused)


def _plan_file(
    patch: Patch, remote: RemoteFile, version: str, ledger: Sequence[LedgerEntry]
) -> tuple[str, str, FileChange | None]:
    """(state, message, change) for one file."""
    if remote.data is None or remote.file is None:
        return CONFLICT, remote.error or f"{remote.path} is missing", None
    current = sha256_hex(remote.data)
    in_force = applied_patches(ledger).get((patch.id, remote.file))
    if in_force is not None and in_force.sha256_after == current:
        return APPLIED, f"{remote.path} patched as recorded", None
    for intent in unfinished(ledger):
        if intent.op == "apply" and (intent.patch, intent.file) == (patch.id, remote.file) and intent.sha256_after == current:
            # A killed run replaced the file but did not record it; fix will write the done line.
            change = FileChange(patch.id, remote.file, remote.path, patch.distribution, version,
                                intent.sha256_before, current, remote.data, "")
            return PENDING, f"{remote.path} was patched by an interrupted run that did not record it", change
    expected = record_hash_hex(remote.record)
    # Another envdoctor patch in force on the same file left it as recorded: that text is known too.
    ours = {e.sha256_after for e in applied_patches(ledger).values() if e.file == remote.file}
    if current != expected and current not in patch.known_preimages and current not in ours:
        why = "no RECORD entry" if expected is None else "its hash differs from the distribution's RECORD"
        return CONFLICT, f"{remote.path} is not a file this patch recognises ({why}); it was changed by someone else", None
    try:
        new = transform_source(patch, remote.data, remote.path)
    except TransformMismatch as exc:
        return CONFLICT, f"{remote.path}: the code this patch changes is not there ({exc})", None
    except UndeclaredChange as exc:
        refused = FileChange(patch.id, remote.file, remote.path, patch.distribution, version, current, "", b"", exc.diff)
        return REFUSED, f"refused, nothing written: {exc}", refused
    if new is None:
        if in_force is not None:
            return APPLIED, f"{remote.path} patched as recorded (and by later patches since)", None
        return NOT_APPLICABLE, f"{remote.path} already has the change", None
    change = FileChange(patch.id, remote.file, remote.path, patch.distribution, version,
                        current, sha256_hex(new), new, unified_diff(remote.path, remote.data, new))
    return PENDING, f"{remote.path} needs the change", change


def plan_patch(patch: Patch, env: Environment, files: PatchFiles) -> PatchPlan:
    """The state of ``patch`` in ``env``: pure, from facts the probe gathered."""
    dist = env.installed.get(canonicalize_name(patch.distribution))
    if dist is None:
        return PatchPlan(patch, NOT_APPLICABLE, f"{patch.distribution} is not installed in {env.prefix}")
    if not patch.applies_to(dist.version):
        upstream = f"; fixed upstream in {patch.fixed_in}" if patch.fixed_in else ""
        return PatchPlan(patch, NOT_APPLICABLE,
                         f"{dist.name} {dist.version} is installed, outside {patch.versions}{upstream}",
                         dist.version)
    results = []
    for path in patch.files:
        remote = files.get(patch.distribution, path)
        if remote is None:
            results.append((CONFLICT, f"{path} was not read from the host", None))
        else:
            results.append(_plan_file(patch, remote, dist.version, files.ledger))
    states = {state for state, _, _ in results}
    messages = "; ".join(message for _, message, _ in results)
    if REFUSED in states:
        # The diff of what the transform wanted, for the report; never a change to apply.
        refused = tuple(c for state, _, c in results if state == REFUSED and c is not None)
        return PatchPlan(patch, REFUSED, f"{dist.name} {dist.version}: {messages}", dist.version, refused=refused)
    changes = tuple(change for state, _, change in results if change is not None and state != REFUSED)
    for state in (CONFLICT, PENDING, APPLIED):
        if state in states:
            unrecorded = tuple(c.file for c in changes if not c.diff)
            return PatchPlan(patch, state, f"{dist.name} {dist.version}: {messages}", dist.version,
                             changes if state == PENDING else (), unrecorded)
    return PatchPlan(patch, NOT_APPLICABLE, f"{dist.name} {dist.version}: {messages}", dist.version)


def patch_remedy(plan: PatchPlan, env: Environment, *, consent: bool) -> Remedy:
    """An automatic Remedy(kind="patch") for a pending plan (by hand without needed consent)."""
    return changes_remedy(plan.patch.id, plan.changes, env, automatic=consent or not plan.patch.needs_consent)


class DeferredChanges(Sequence[FileChange]):
    """A patch's file changes made when first used: by fix, which applies them or shows their
    diff, never by a check that only reports the remedy (making them runs libcst on each file)."""

    def __init__(self, make: Callable[[], Sequence[FileChange]]) -> None:
        self._make: Callable[[], Sequence[FileChange]] | None = make
        self._made: tuple[FileChange, ...] = ()

    def _changes(self) -> tuple[FileChange, ...]:
        if self._make is not None:
            self._made, self._make = tuple(self._make()), None
        return self._made

    def __getitem__(self, index):  # type: ignore[no-untyped-def]  # (Sequence's int and slice overloads)
        return self._changes()[index]

    def __len__(self) -> int:
        return len(self._changes())


def changes_remedy(patch_id: str, changes: Sequence[FileChange], env: Environment, *, automatic: bool,
                   files: Sequence[str] | None = None) -> Remedy:
    """``files``: the paths to name when ``changes`` are deferred (naming them would make them)."""
    named = ", ".join(files if files is not None else [c.path for c in changes])
    return Remedy(
        summary=f"apply patch {patch_id} to {named}",
        kind="patch",
        automatic=automatic,
        payload={"patch": patch_id, "python": env.python, "prefix": env.prefix,
                 "changes": changes if isinstance(changes, DeferredChanges) else tuple(changes)},
    )


@dataclass(frozen=True)
class PatchOutcome:
    """What applying one patch remedy did; fleet turns it into an Action."""

    exit_status: int | None
    output: str
    diff: str = ""


async def apply_patch_remedy(transport: Transport, remedy: Remedy, *, dry_run: bool) -> PatchOutcome:
    changes: Sequence[FileChange] = remedy.payload["changes"]
    diff = "".join(c.diff for c in changes)
    if dry_run:
        return PatchOutcome(None, "", diff)
    if not changes:  # (deferred changes that turned out to change nothing)
        return PatchOutcome(0, "nothing to change: every call already passes the flag, or the file differs")
    request = change_request(
        "apply", remedy.payload["prefix"], [c.request() for c in changes], version=__version__,
        kill_after_intent=bool(os.environ.get(KILL_AFTER_INTENT_ENV)),
    )
    try:
        status, outcomes, stderr = await run_host_program(transport, remedy.payload["python"], request)
    except PatchError as exc:
        return PatchOutcome(1, str(exc), diff)
    lines = [f"{o['file']}: {o['result']} ({o['message']})" for o in outcomes]
    if status != 0 and stderr:
        lines.append(stderr)
    return PatchOutcome(status, "\n".join(lines), diff)


@dataclass(frozen=True)
class RevertResult:
    file: str
    result: str
    message: str

    @property
    def ok(self) -> bool:
        return self.result != "refused"


async def revert_patch(transport: Transport, env: Environment, files: PatchFiles, patch_id: str) -> list[RevertResult]:
    """Restore the originals of every file ``patch_id`` changed, as the ledger records them."""
    in_force = [e for (pid, _), e in applied_patches(files.ledger).items() if pid == patch_id]
    if not in_force:
        raise PatchError(f"patch {patch_id} is not applied in {env.prefix} (the ledger has no record of it)",
                         hint="`envdoctor check HOST` shows the state of each patch")
    changes = [{name: value for name, value in e.to_json().items() if name not in ("op", "phase", "time")}
               for e in in_force]
    request = change_request("revert", env.prefix, changes, version=__version__,
                             kill_after_intent=bool(os.environ.get(KILL_AFTER_INTENT_ENV)))
    _, outcomes, _ = await run_host_program(transport, env.python, request)
    return [RevertResult(o["file"], o["result"], o["message"]) for o in outcomes]


# -- finding patches -----------------------------------------------------------------------

def patches_in(module: Any) -> list[Patch]:
    return [value for value in vars(module).values() if isinstance(value, Patch)]


@dataclass(frozen=True)
class PatchSet:
    patches: tuple[Patch, ...] = field(default_factory=tuple)

    def get(self, patch_id: str) -> Patch:
        for patch in self.patches:
            if patch.id == patch_id:
                return patch
        known = ", ".join(p.id for p in self.patches)
        raise ConfigError(f"no patch named {patch_id!r}{did_you_mean(patch_id, (p.id for p in self.patches))}",
                          hint=f"known patches: {known}")


@cache
def shipped_patches() -> tuple[Patch, ...]:
    """Every patch in the ``patches`` package (modules whose names start with _ are helpers)."""
    root = importlib.import_module("envdoctor.patches")
    found: list[Patch] = []
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            found.extend(patches_in(importlib.import_module(f"envdoctor.patches.{info.name}")))
    return tuple(found)


@dataclass(frozen=True)
class GenericPatch:
    """A patch that has no fixed files: ``check`` builds one :class:`Patch` per file it finds
    (the trust_remote_code patch). Declared in its module so that ``patches list`` and
    ``patches show`` name every patch ``fix`` can apply."""

    id: str
    summary: str
    why: str
    #: Which installed code it applies to, in words ("libraries that depend on transformers ...").
    applies_to: str
    needs_consent: bool = False


@cache
def generic_patches() -> tuple[GenericPatch, ...]:
    """Every :class:`GenericPatch` declared in the ``patches`` package."""
    root = importlib.import_module("envdoctor.patches")
    return tuple(
        value
        for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name) if not info.name.startswith("_")
        for value in vars(importlib.import_module(f"envdoctor.patches.{info.name}")).values()
        if isinstance(value, GenericPatch)
    )


@cache
def user_patches(files: tuple[str, ...]) -> tuple[Patch, ...]:
    found: list[Patch] = []
    for name in files:
        module = load_module_file(Path(name), "envdoctor_user_patches")
        patches = patches_in(module)
        if not patches:
            raise ConfigError(f"{name} defines no Patch", hint="a patch file assigns Patch(...) objects at module level")
        found.extend(patches)
    return tuple(found)


def load_patches(extra_files: Iterable[str] = ()) -> PatchSet:
    patches = shipped_patches() + user_patches(tuple(extra_files))
    seen: set[str] = set()
    for patch in patches:
        if patch.id in seen:
            raise ConfigError(f"two patches are named {patch.id!r}")
        seen.add(patch.id)
    return PatchSet(patches)


def files_request(prefix: str | None, patches: Iterable[Patch]) -> dict[str, Any]:
    """Arguments of the ``patch_files`` probe section: every file of every patch."""
    return {
        "prefix": prefix or "",
        "files": [{"distribution": p.distribution, "path": path} for p in patches for path in p.files],
    }
