"""The tokenizer and mask-token parts of the ``envdoctor facts`` document.

Which source wins for which field (the same rules the README states):

- ``bos/eos/pad/unk/mask_token_id``: what ``AutoTokenizer.from_pretrained(dir)`` gives as
  ``tokenizer.<role>_token_id``: one integer or null, never a list (see
  :mod:`envdoctor.modelfacts.tokenizer_static`); with ``--trust-remote-code``, the live load's.
- ``eos_token_ids``: every id generation stops on, a list: ``generation_config.json``'s
  ``eos_token_id`` (Llama 3.1: ``[128001, 128008, 128009]``), else config.json's, else the
  tokenizer's eos.
- ``generation_config`` and ``config_token_ids``: the ids those files state, as written
  (a list stays a list).
- ``vocab_size``: config.json's (the embedding's rows; the text config's when nested);
  ``tokenizer_len`` is ``len(tokenizer)``, ``tokenizer_vocab_size`` the tokenizer's base
  vocabulary, ``vocab_size_difference`` the rows no token of the tokenizer uses.
- ``unknown``: field -> why its value cannot be known without running code; a null that
  is not explained there means "the model has none".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envdoctor.modelfacts.model import Architecture, MaskChoice, ModelFacts, TokenizerFacts

#: At most this many added tokens are listed (Llama 3 has 256, DeepSeek-V3 818, Gemma 3 thousands);
#: the probe ships no more than this either.
MAX_LISTED_TOKENS = 65536
ROLES = ("bos", "eos", "pad", "unk", "mask")


def _ids(value: Any) -> int | list[int] | None:
    """An id or a list of ids as a config file states it; anything else is None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _as_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def stated_ids(config: Any) -> dict[str, int | list[int]]:
    """bos/eos/pad/decoder_start ids a config object states at its own level."""
    if not isinstance(config, dict):
        return {}
    found = {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        value = _ids(config.get(key))
        if value is not None:
            found[key] = value
    return found


def tokenizer_section(model: ModelFacts, tok: TokenizerFacts, arch: Architecture | None) -> dict[str, Any]:
    """The tokenizer's ids, sizes, added tokens and chat template, and what could not be known."""
    doc: dict[str, Any] = {"tokenizer_class": tok.tokenizer_class, "tokenizer_facts_from": tok.source,
                           "tokenizer_files": tok.basis or None}
    for role in ROLES:
        doc[f"{role}_token"] = tok.tokens.get(role)
        doc[f"{role}_token_id"] = tok.ids.get(role)
    config_vocab = arch.get("vocab_size") if arch else None
    doc["tokenizer_len"] = tok.length
    doc["tokenizer_vocab_size"] = tok.vocab_size
    doc["config_vocab_size"] = config_vocab
    doc["vocab_size_difference"] = config_vocab - tok.length if config_vocab is not None and tok.length is not None else None
    listed = sorted(tok.special.items())[:MAX_LISTED_TOKENS]
    doc["special_tokens"] = len(tok.special)
    doc["added_tokens"] = [{"id": i, "content": c, "special": i in tok.special_ids} for i, c in listed]
    doc["added_tokens_truncated"] = len(tok.special) > MAX_LISTED_TOKENS
    doc["all_special_ids"] = list(tok.all_special_ids) if tok.all_special_ids is not None else None
    doc["chat_template"] = tok.chat_template_value
    doc["chat_template_source"] = tok.chat_template_source
    processor = model.json_files.get("chat_template.json")
    if isinstance(processor, dict) and isinstance(processor.get("chat_template"), str):
        doc["processor_chat_template"] = processor["chat_template"]
    generation = stated_ids(model.json_files.get("generation_config.json"))
    config_ids = stated_ids(arch.text if arch else None) or stated_ids(model.json_files.get("config.json"))
    doc["generation_config"] = generation
    doc["config_token_ids"] = config_ids
    doc["eos_token_ids"] = (_as_list(generation.get("eos_token_id")) or _as_list(config_ids.get("eos_token_id"))
                            or _as_list(tok.ids.get("eos")))
    named: dict[str, list[int]] = {}
    for token_id, key in sorted(tok.config_ids.items()):
        named.setdefault(key, []).append(token_id)
    doc["config_named_ids"] = dict(sorted(named.items()))
    unknown = dict(tok.unknown)
    defaults: dict[str, str] = {}
    if arch is not None:
        for name, note in arch.notes.items():
            (unknown if arch.get(name) is None else defaults)[name] = note
    doc["unknown"] = unknown
    doc["config_defaults_used"] = defaults
    return doc


def mask_section(mask: MaskChoice) -> Mapping[str, Any]:
    """The mask-token fields of the dflash object beside mask_token_id_candidate."""
    return {
        "mask_token_candidate": mask.token,
        "mask_token_source": mask.source,
        "mask_token_note": mask.message,
        "mask_token_candidates": mask.count,
        "mask_token_reserved_candidates": mask.reserved,
        "mask_token_unnamed_candidates": mask.unnamed,
    }
