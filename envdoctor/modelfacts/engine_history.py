"""The first release of each engine that knows a model, for the models envdoctor's users run.

Data, each row with its source: the registry file of the release named, read from its
PyPI artifact, the release before it lacking the entry (found by bisecting releases; see
docs/job-code.md). A model outside this table gets no version advice, only what the
installed registries say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FirstRelease:
    engine: str
    #: An architecture (config.json's `architectures`) or a model type (`model_type`).
    key: str
    version: str
    source: str


_VLLM = "vllm/model_executor/models/registry.py"
_SGLANG = "sglang/srt/models/ (EntryClass)"
_HF = "transformers/models/auto CONFIG_MAPPING_NAMES"

FIRST_RELEASES: tuple[FirstRelease, ...] = (
    # Kimi K2.5/K2.6 (model_type kimi_k25, text_config deepseek_v3/kimi_k2)
    FirstRelease("vllm", "KimiK25ForConditionalGeneration", "0.15.0", f"{_VLLM} of the 0.15.0 wheel; not in 0.14.1"),
    FirstRelease("sglang", "KimiK25ForConditionalGeneration", "0.5.9", f"{_SGLANG} of the 0.5.9 wheel; not in 0.5.8.post1"),
    FirstRelease("transformers", "kimi_k25", "5.13.0", f"{_HF} of the 5.13.0 wheel; not in 5.12.1"),
    # DeepSeek-V3 and its relatives
    FirstRelease("vllm", "DeepseekV3ForCausalLM", "0.6.6", f"{_VLLM} of the 0.6.6 sdist; not in 0.6.5"),
    FirstRelease("sglang", "DeepseekV3ForCausalLM", "0.4.1", f"{_SGLANG} of the 0.4.1 wheel; not in 0.4.0"),
    FirstRelease("transformers", "deepseek_v3", "4.51.0", f"{_HF} of the 4.51.0 wheel; not in 4.50.3"),
    # Qwen3 (dense and MoE)
    FirstRelease("vllm", "Qwen3ForCausalLM", "0.8.4", f"{_VLLM} of the 0.8.4 sdist; not in 0.8.3"),
    FirstRelease("vllm", "Qwen3MoeForCausalLM", "0.8.4", f"{_VLLM} of the 0.8.4 sdist; not in 0.8.3"),
    FirstRelease("sglang", "Qwen3ForCausalLM", "0.4.6", f"{_SGLANG} of the 0.4.6 wheel; not in 0.4.5"),
    FirstRelease("transformers", "qwen3", "4.51.0", f"{_HF} of the 4.51.0 wheel; not in 4.50.3"),
)

_NAMES = {"transformers": "transformers", "vllm": "vLLM", "sglang": "SGLang"}


def versions_that_know(engine: str, model_type: str | None, architectures: Sequence[str]) -> str:
    """'vLLM >= 0.15.0 registers KimiK25ForConditionalGeneration (source)', or ''."""
    for row in FIRST_RELEASES:
        if row.engine == engine and (row.key in architectures or row.key == model_type):
            what = "knows model type" if row.key == model_type else "registers"
            return f"{_NAMES[engine]} >= {row.version} {what} {row.key} ({row.source})"
    return ""
