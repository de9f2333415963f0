"""The generic patch: ``trust_remote_code=True`` added to the loader calls the scanner found.

It has no fixed file list: ``check`` (code.trust-remote-code) builds one patch per file of
an installed library, naming the lines where a call is ``missing`` the flag. ``fix``
applies it only with the user's consent (``--trust-remote-code``), and the ledger records
it under the id ``trust-remote-code`` like any other patch. A call that passes
``**kwargs`` is left alone: the dict may already hold the keyword.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet

from envdoctor.patching import Patch, SkipFile, Transform, TransformMismatch

if TYPE_CHECKING:
    import libcst as cst

PATCH_ID = "trust-remote-code"


def add_flag_at(lines: Collection[int]) -> Transform:
    """A transform adding trust_remote_code=True to the calls that start on ``lines``."""

    def transform(module: cst.Module) -> cst.Module:
        # Imported when the transform runs, not when this module loads: start-up time
        # (libcst takes ~150 ms to import, and every command loads the patch definitions).
        from libcst.metadata import MetadataWrapper

        from envdoctor.cst_edits import AddTrustRemoteCode, at_lines

        edit = AddTrustRemoteCode(at_lines(lines))
        new = MetadataWrapper(module).visit(edit)
        if edit.changed_lines:
            return new
        if edit.present_lines:
            raise SkipFile("every call already passes trust_remote_code")
        raise TransformMismatch(f"no call without **kwargs starts on line(s) {sorted(lines)}")

    return transform


def for_file(distribution: str, version: str, path: str, lines: Collection[int]) -> Patch:
    return Patch(
        id=PATCH_ID,
        summary=f"pass trust_remote_code=True at {path}:{','.join(str(n) for n in sorted(lines))}",
        why="a model that ships its own code fails to load (or loads a different class) without the flag",
        distribution=distribution,
        specifier=SpecifierSet(f"=={version}"),
        files=(path,),
        transform=add_flag_at(lines),
        needs_consent=True,
    )
