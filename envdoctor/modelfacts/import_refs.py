"""An import statement of a model's own code, as a value: what the libcst reader
(:mod:`envdoctor.modelfacts.code_imports`) returns and :mod:`envdoctor.modelfacts.code` judges."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImportRef:
    file: str
    line: int
    module: str
    names: tuple[str, ...]
    #: Inside a try block: the code copes without it (transformers' own check skips these too).
    optional: bool
    #: ``from . import x`` / ``from .x import y``: another file of the model folder.
    relative: bool


class CodeParseError(ValueError):
    pass
