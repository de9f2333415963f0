"""The imports of a model's own code (what ``trust_remote_code`` would run), read with libcst
on the controller (:mod:`envdoctor.modelfacts.code_imports`) and checked against what the venv has
installed.

Two ways model code breaks: a module the venv lacks (Kimi's tokenizer needs ``tiktoken``),
and a name an installed library no longer has (old Kimi code imports ``bytes_to_unicode``
from ``transformers.models.gpt2.tokenization_gpt2``, which transformers 5 removed).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import Environment, canonicalize_name
from envdoctor.modelfacts.import_refs import CodeParseError, ImportRef
from envdoctor.modelfacts.model import CodeFile

#: Import names whose distribution is called otherwise.
DISTRIBUTION_OF: dict[str, str] = {
    "yaml": "PyYAML",
    "google.protobuf": "protobuf",
    "google": "protobuf",
    "PIL": "Pillow",
    "cv2": "opencv-python",
    "sklearn": "scikit-learn",
    "bs4": "beautifulsoup4",
    "attr": "attrs",
    "jinja2": "Jinja2",
    "sentencepiece": "sentencepiece",
    "flash_attn": "flash-attn",
    "tiktoken_ext": "tiktoken",
    "dateutil": "python-dateutil",
    "sentence_transformers": "sentence-transformers",
}


@dataclass(frozen=True)
class RemovedName:
    """A name a library dropped: which version dropped it and what still works."""

    distribution: str
    removed_in: str
    works_with: str
    moved_to: str


#: Names model code still imports from where a newer library no longer has them.
REMOVED_NAMES: dict[tuple[str, str], RemovedName] = {
    ("transformers.models.gpt2.tokenization_gpt2", "bytes_to_unicode"): RemovedName(
        "transformers", "5", "transformers<5", "transformers.convert_slow_tokenizer.bytes_to_unicode"
    ),
}


def read_imports(file: str, source: str) -> list[ImportRef]:
    """Every import statement of one source file, with its line (read once per text: the
    user's cache keeps the answer, and libcst is imported only on a miss)."""
    from envdoctor.modelfacts.code_cache import cached_imports

    return cached_imports(file, source)


def distribution_for(module: str) -> str:
    for prefix in (module, module.split(".")[0]):
        if prefix in DISTRIBUTION_OF:
            return DISTRIBUTION_OF[prefix]
    return module.split(".")[0]


def is_stdlib(module: str) -> bool:
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top == "__future__"


@dataclass(frozen=True)
class MissingModule:
    ref: ImportRef
    distribution: str


@dataclass(frozen=True)
class GoneName:
    ref: ImportRef
    name: str
    installed: str
    removed: RemovedName


@dataclass(frozen=True)
class CodeReport:
    imports: tuple[ImportRef, ...]
    missing: tuple[MissingModule, ...]
    gone: tuple[GoneName, ...]
    #: Relative imports of files the model folder does not have.
    missing_files: tuple[ImportRef, ...]
    errors: tuple[str, ...]


def _version_at_least(version: str, floor: str) -> bool:
    try:
        return Version(version) >= Version(floor)
    except InvalidVersion:
        return False


def check_code(files: Sequence[CodeFile], env: Environment, listing: Iterable[str]) -> CodeReport:
    """The model code's imports against the venv's installed distributions."""
    present = set(listing)
    imports: list[ImportRef] = []
    errors: list[str] = []
    for code in files:
        if code.error:
            errors.append(f"{code.name}: {code.error}")
            continue
        if code.source is None:
            errors.append(f"{code.name}: too large to read its imports")
            continue
        try:
            imports.extend(read_imports(code.name, code.source))
        except CodeParseError as exc:
            errors.append(str(exc))
    missing: dict[str, MissingModule] = {}
    gone: list[GoneName] = []
    missing_files: list[ImportRef] = []
    for ref in imports:
        if ref.relative:
            target = (ref.module.split(".")[0] + ".py") if ref.module else None
            if target and target not in present:
                missing_files.append(ref)
            continue
        if not ref.module or is_stdlib(ref.module):
            continue
        dist_name = distribution_for(ref.module)
        dist = env.installed.get(canonicalize_name(dist_name))
        if dist is None:
            if not ref.optional and dist_name not in missing:
                missing[dist_name] = MissingModule(ref, dist_name)
            continue
        for name in ref.names:
            removed = REMOVED_NAMES.get((ref.module, name))
            if removed and canonicalize_name(removed.distribution) == dist.key and _version_at_least(dist.version, removed.removed_in):
                gone.append(GoneName(ref, name, dist.version, removed))
    return CodeReport(tuple(imports), tuple(missing.values()), tuple(gone), tuple(missing_files), tuple(errors))
