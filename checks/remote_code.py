"""Do the installed libraries load models with trust_remote_code=True?

The probe section ``sources`` ships the files of the libraries that depend on transformers,
vllm or sglang (under any extra), or import them, and those named with ``--scan``, that
pass the byte filter; here they are parsed and every model-loading call is classified.
Files that only import a loader name travel too (``exports_only``): what they bind is
followed when another module of the same distribution imports it from them.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envdoctor.checks.patches import trust_remote_code_remedy

from envdoctor.engine.facts import canonicalize_name
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Status, errored, failed, passed, skipped, warned
from envdoctor.scan.exports import ExportTable, exports_of_source, module_of_relative_path

if TYPE_CHECKING:
    from envdoctor.scan.loaders import ScanError, Site

# The scanner itself (envdoctor.scan.scanner) is imported when there are files to scan.
SECTION = "sources"
#: Gaps named in the message; the rest are in details.
SHOWN = 5


@dataclass(frozen=True)
class InstalledSite:
    """A site in an installed file, with where that file came from (what a patch needs)."""

    site: Site
    distribution: str
    version: str
    site_packages: str

    def to_json(self) -> dict[str, Any]:
        return {**self.site.to_json(), "distribution": self.distribution, "version": self.version,
                "site_packages": self.site_packages}


def export_tables(items: Iterable[Mapping[str, Any]]) -> dict[str, ExportTable]:
    """Each distribution's re-exports (canonical name -> table), from every file shipped for it."""
    modules: dict[str, dict[str, dict[str, str]]] = {}
    for item in items:
        try:
            data = base64.b64decode(str(item.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            continue
        module, package = module_of_relative_path(str(item.get("path", "")))
        exports = _exports_cached(data, module, package)
        if exports:
            modules.setdefault(canonicalize_name(str(item.get("distribution", ""))), {})[module] = dict(exports)
    return {dist: ExportTable.build(table) for dist, table in modules.items()}


def scan_items(
    items: Iterable[Mapping[str, Any]], exports: Mapping[str, ExportTable] | None = None
) -> tuple[list[InstalledSite], list[ScanError]]:
    """Parse the files the probe shipped; pure, so the same items always give the same sites."""
    items = list(items)
    if not items:
        return [], []
    from envdoctor.scan.loaders import ScanError

    tables = export_tables(items) if exports is None else exports
    sites: list[InstalledSite] = []
    errors: list[ScanError] = []
    for item in items:
        if item.get("exports_only"):
            continue
        path = str(item.get("path", "?"))
        try:
            data = base64.b64decode(str(item.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            errors.append(ScanError(path, "the probe sent unreadable contents"))
            continue
        table = tables.get(canonicalize_name(str(item.get("distribution", ""))))
        found, error = _scan_cached(data, path, table)
        if error is not None:
            errors.append(error)
        sites.extend(InstalledSite(s, str(item.get("distribution", "")), str(item.get("version", "")),
                                   str(item.get("site", ""))) for s in found)
    return sites, errors


@functools.lru_cache(maxsize=4096)
def _scan_cached(data: bytes, path: str, exports: ExportTable | None) -> tuple[tuple[Site, ...], ScanError | None]:
    # A fleet runs the same library on many hosts, and fix evaluates twice: parse each file once,
    # and once across runs (envdoctor/scan/site_cache.py).
    from envdoctor.scan.scanner import package_of_relative_path, scan_source
    from envdoctor.scan.site_cache import cached_scan

    def scan(text: bytes, where: str, table: ExportTable | None) -> tuple[list[Site], ScanError | None]:
        return scan_source(text, where, package=package_of_relative_path(where), exports=table)

    return cached_scan(data, path, exports, scan)


@functools.lru_cache(maxsize=4096)
def _exports_cached(data: bytes, module: str, package: str | None) -> tuple[tuple[str, str], ...]:
    from envdoctor.scan.site_cache import cached_exports

    return tuple(sorted(cached_exports(data, module, package, exports_of_source).items()))


def scan_names_not_installed(results_per_host: Iterable[Iterable[CheckResult]]) -> list[str]:
    """``--scan`` names that no host where this check ran has installed: the user's input error."""
    missing: set[str] | None = None
    for results in results_per_host:
        for result in results:
            if result.id == CHECK_ID and result.status not in (Status.BLOCKED, Status.SKIPPED):
                names = set(result.details.get("not_installed") or ())
                missing = names if missing is None else missing & names
    return sorted(missing or ())


#: Folders of a library's own tests (``accelerate/test_utils/``, ``pkg/tests/``): code a training
#: or serving job never runs, loading the libraries' tiny test models, not the user's.
TEST_FOLDERS = frozenset({"tests", "test", "testing", "test_utils"})


def in_test_code(path: str) -> bool:
    """Whether an installed file (relative to site-packages) is a library's test code."""
    *folders, name = path.split("/")
    return (any(f in TEST_FOLDERS for f in folders) or name.startswith("test_") or name.endswith("_test.py")
            or name == "conftest.py")


def _describe(site: InstalledSite) -> str:
    return f"{site.site.path}:{site.site.line} {site.site.callee} ({site.site.state})"


CHECK_ID = "code.trust-remote-code"


@check(
    CHECK_ID,
    facts=("sources",),
    title="Installed libraries pass trust_remote_code",
    requires=["python.venv"],
    why="a model that ships its own code (Kimi K2.x) fails to load, or silently loads a different "
    "tokenizer class, when a library calls from_pretrained without trust_remote_code=True",
)
def trust_remote_code_sites(ctx: CheckContext) -> CheckResult:
    if unread := ctx.section_failed(SECTION, "could not scan the installed libraries"):
        return unread
    summary = ctx.facts.section(SECTION)
    if summary is None:
        return skipped("the probe did not scan the installed libraries")
    items = ctx.facts.probe.items.get(SECTION, [])
    exports = export_tables(items)
    sites, errors = scan_items(items, exports)
    dists = summary.get("distributions") or []
    details: dict[str, Any] = {
        "distributions": [{k: d.get(k) for k in ("name", "version", "reason", "files", "matched", "error") if k in d}
                          for d in dists],
        "sites": [s.to_json() for s in sites],
    }
    if errors:
        details["errors"] = [e.to_json() for e in errors]
    if summary.get("skipped"):
        details["skipped"] = summary["skipped"]
    if summary.get("not_found"):
        details["not_installed"] = summary["not_found"]
    scanned = f"{sum(int(d.get('files', 0)) for d in dists)} files of {len(dists)} distribution(s)"
    all_gaps = [s for s in sites if s.site.is_gap]
    gaps = [s for s in all_gaps if not in_test_code(s.site.path)]
    test_gaps = [s for s in all_gaps if in_test_code(s.site.path)]
    untested = ""
    if test_gaps:
        details["test_code_gaps"] = [_describe(s) for s in test_gaps]
        files = sorted({s.site.path for s in test_gaps})
        untested = (f"; {len(test_gaps)} more in the libraries' own test code, not counted (a job never runs it): "
                    + ", ".join(files[:SHOWN]) + (f" and {len(files) - SHOWN} more file(s)" if len(files) > SHOWN else ""))
    if summary.get("not_found"):
        names = ", ".join(summary["not_found"])
        return errored(f"--scan {names}: not installed in {ctx.spec.venv or 'the default environment'} "
                       "(name an installed distribution; `python -m pip list` shows them)", **details)
    if not dists:
        return passed("no installed library depends on transformers, vllm or sglang: nothing to scan", **details)
    if not gaps:
        unsure = sum(1 for s in sites if s.site.state in ("parameterized", "kwargs"))
        extra = f"; {unsure} take the flag from the caller" if unsure else ""
        if errors:  # files the byte filter says may hold a call: what they hold is not known
            extra += (f"; {len(errors)} file(s) that may hold such a call could not be scanned: "
                      + "; ".join(f"{e.path} ({e.message})" for e in errors[:SHOWN])
                      + (f"; and {len(errors) - SHOWN} more" if len(errors) > SHOWN else ""))
        counted = len(sites) - len(test_gaps)
        return passed(f"{counted} model-loading call(s) in {scanned}, none without trust_remote_code{extra}{untested}",
                      **details)
    shown = "; ".join(_describe(s) for s in gaps[:SHOWN]) + (f"; and {len(gaps) - SHOWN} more" if len(gaps) > SHOWN else "")
    message = f"{len(gaps)} model-loading call(s) without trust_remote_code=True: {shown}{untested}"
    # The generic patch (patches/trust_remote_code.py); fix applies it only with consent.
    refused: list[Any] = []
    remedy = trust_remote_code_remedy(ctx, items, gaps, exports, refused)
    if refused:
        # Never expected: the generic patch would change more than one keyword per site.
        details["refused_patches"] = [{"path": r.path, "problems": list(r.problems), "diff": r.diff} for r in refused]
        message += f"; the patch for {len(refused)} file(s) was refused (it changed more than it declares)"
    if ctx.spec.trust_remote_code:
        return failed(message, remedy=remedy, **details)
    return warned(message + " (a failure for models that need remote code: --trust-remote-code)", remedy=remedy, **details)
