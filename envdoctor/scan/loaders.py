"""What the scanner looks for: the model loaders, by every name they are importable as, and
the states a call site can be in (the JSON contract's names).

Shared by the stdlib side (:mod:`envdoctor.scan.scanner`) and the libcst side
(:mod:`envdoctor.scan.sites`), so neither imports the other to learn them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# States of a site, as the JSON contract names them.
OK, EXPLICIT_FALSE, PARAMETERIZED, KWARGS, MISSING = "ok", "explicit-false", "parameterized", "kwargs", "missing"
STATES = (MISSING, EXPLICIT_FALSE, PARAMETERIZED, KWARGS, OK)
#: States that are a gap: the call will not pass trust_remote_code=True.
GAPS = frozenset({MISSING, EXPLICIT_FALSE})

KEYWORD = "trust_remote_code"

_AUTO_CLASS = re.compile(r"^(?:TF|Flax)?Auto[A-Z]\w*$")
#: Auto classes whose ``from_config`` builds a model (and so runs its code): not the
#: config, tokenizer or processor classes, which have no such method.
_FROM_CONFIG_CLASS = re.compile(r"^(?:TF|Flax)?Auto(?:Model\w*|Backbone)$")

#: vLLM entry points, by every module path they are importable from -> the name we report.
VLLM_CALLEES: dict[str, str] = {
    "vllm.LLM": "vllm.LLM",
    "vllm.entrypoints.llm.LLM": "vllm.LLM",
    "vllm.EngineArgs": "vllm.EngineArgs",
    "vllm.engine.arg_utils.EngineArgs": "vllm.EngineArgs",
    "vllm.AsyncEngineArgs": "vllm.AsyncEngineArgs",
    "vllm.engine.arg_utils.AsyncEngineArgs": "vllm.AsyncEngineArgs",
    "vllm.config.ModelConfig": "vllm.config.ModelConfig",
    "vllm.config.model.ModelConfig": "vllm.config.ModelConfig",
}

#: Last names of the vLLM entry points, and the Auto-class methods that load a model's code.
VLLM_NAMES = frozenset(name.rsplit(".", 1)[1] for name in VLLM_CALLEES)
LOADER_METHODS = frozenset({"from_pretrained", "from_config"})


@dataclass(frozen=True)
class Site:
    """One model-loading call and whether it passes trust_remote_code=True."""

    path: str
    line: int
    column: int
    callee: str
    state: str

    @property
    def is_gap(self) -> bool:
        return self.state in GAPS

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column, "callee": self.callee, "state": self.state}


@dataclass(frozen=True)
class ScanError:
    """A file that could not be scanned (not decodable as Python reads it, does not parse, unreadable)."""

    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def canonical_callee(qualified: str) -> str | None:
    """The reported name of a resolved callee, or None when it is not a model loader.

    ``Auto*.from_config`` builds a model from a config and runs the model's own code as
    ``from_pretrained`` does: it is a site of its own kind (``transformers.AutoModel.from_config``).
    """
    if qualified in VLLM_CALLEES:
        return VLLM_CALLEES[qualified]
    parts = qualified.split(".")
    if len(parts) < 3 or parts[0] != "transformers":
        return None
    if parts[-1] == "from_pretrained" and _AUTO_CLASS.match(parts[-2]):
        return f"transformers.{parts[-2]}.from_pretrained"
    if parts[-1] == "from_config" and _FROM_CONFIG_CLASS.match(parts[-2]):
        return f"transformers.{parts[-2]}.from_config"
    return None
