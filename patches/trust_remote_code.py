"""The generic patch: ``trust_remote_code=True`` added to the loader calls the scanner found.

It has no fixed file list: ``check`` (code.trust-remote-code) builds one patch per file of
an installed library, naming each call that is ``missing`` the flag by line, column and
resolved callee (never by line alone), and declaring exactly one keyword per call. ``fix``
applies it only with the user's consent (``--trust-remote-code``), and the ledger records
it under the id ``trust-remote-code`` like any other patch. A call that passes
``**kwargs`` is left alone: the dict may already hold the keyword.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from envdoctor.patching.proof import SiteKey
from envdoctor.patching.engine import AddKeyword, GenericPatch, Patch, SkipFile, Transform, TransformMismatch

if TYPE_CHECKING:
    import libcst as cst

    from envdoctor.scan.exports import ExportTable

PATCH_ID = "trust-remote-code"

#: How `patches list` and `patches show` describe it: its files are found per host by check.
GENERIC = GenericPatch(
    id=PATCH_ID,
    summary="add trust_remote_code=True to the model-loading calls the scanner finds missing it",
    why="a model that ships its own code fails to load (or loads a different class) without the flag",
    applies_to="installed libraries that depend on or import transformers, vllm or sglang (and --scan DIST)",
    needs_consent=True,
)


def add_flag_at(
    sites: Collection[SiteKey], *, path: str = "", package: str | None = None, exports: ExportTable | None = None
) -> Transform:
    """A transform adding trust_remote_code=True to exactly the calls ``sites`` name.

    A site is (line, column, callee) as the scanner reports it; the call edited is the one
    the scanner finds there with that callee, never another call on the same line.
    ``package`` (the file's package) and ``exports`` (the distribution's re-exports) let the
    scanner resolve names as it did when it found the sites.
    """
    keys = frozenset(sites)

    def transform(module: cst.Module) -> cst.Module:
        # Imported when the transform runs, not when this module loads: start-up time
        # (libcst takes ~150 ms to import, and every command loads the patch definitions).
        from envdoctor.patching.cst_edits import add_keyword_at_sites

        edit = add_keyword_at_sites(module, keys, path=path, package=package, exports=exports)
        if edit.unknown:
            missing = ", ".join(f"{line}:{column} {callee}" for line, column, callee in edit.unknown)
            raise TransformMismatch(f"no such call in the file: {missing}")
        if edit.changed:
            return edit.module
        if edit.present:
            raise SkipFile("every call already passes trust_remote_code")
        raise TransformMismatch("every named call passes **kwargs")

    return transform


def for_file(
    distribution: str, version: str, path: str, sites: Collection[SiteKey], exports: ExportTable | None = None
) -> Patch:
    """The generic patch for one installed file: one trust_remote_code=True per named site, declared."""
    from envdoctor.scan.scanner import package_of_relative_path  # (the scanner only when a patch is built)
    from envdoctor.scan.loaders import KEYWORD

    keys = tuple(sorted(sites))
    where = ",".join(f"{line}:{column}" for line, column, _ in keys)
    return Patch(
        id=PATCH_ID,
        summary=f"pass trust_remote_code=True at {path}:{where}",
        why="a model that ships its own code fails to load (or loads a different class) without the flag",
        distribution=distribution,
        specifier=f"=={version}",
        files=(path,),
        transform=add_flag_at(keys, path=path, package=package_of_relative_path(path), exports=exports),
        needs_consent=True,
        declares=(AddKeyword(KEYWORD, "True", sites=keys),),
    )
