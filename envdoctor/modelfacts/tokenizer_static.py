"""What ``AutoTokenizer.from_pretrained(dir)`` reports, computed from the model's files alone.

No I/O and no model code: the probe shipped the JSON files and a reduced tokenizer.json
(:mod:`envdoctor.probe.host.model.tokenizer`). The rules follow transformers 5 and are checked
against it over a corpus of model layouts (tests/e2e/test_model_layouts.py):

- Token strings: ``tokenizer_config.json``'s ``<role>_token``. When that file has no
  ``added_tokens_decoder`` (older saves), ``special_tokens_map.json`` overrides it, as
  transformers' legacy path does. A role the config does not name takes the default of the
  tokenizer class transformers picks (``GemmaTokenizer``'s ``<mask>``, ``Qwen2Tokenizer``'s
  ``<|endoftext|>``), then tokenizer.json's padding token.
- Ids: a string is looked up in the vocabulary, then in the added tokens
  (``added_tokens_decoder``; without it ``added_tokens.json`` and tokenizer.json's
  ``added_tokens``). A named token found nowhere is appended by transformers at load.
- ``len(tokenizer)`` = vocabulary entries + added tokens outside it (+ appended ones);
  ``vocab_size`` = vocabulary entries (the base model, without added tokens).
- The chat template: ``chat_template.jinja`` (and ``additional_chat_templates/*.jinja``,
  then a dict by name) over ``tokenizer_config.json``'s ``chat_template``;
  ``chat_template.json`` is the processor's and not what AutoTokenizer loads.

What cannot be known without running code (a tokenizer class from ``auto_map``, a
sentencepiece-only folder) is named in ``unknown`` with the reason, never a silent null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ROLES = ("bos", "eos", "pad", "unk", "mask")
#: Role defaults of the tokenizer classes transformers 5 instantiates for common models
#: (their ``__init__`` signatures); used only for a role tokenizer_config.json does not name.
CLASS_DEFAULTS: dict[str, dict[str, str | None]] = {
    "GemmaTokenizer": {"unk": "<unk>", "bos": "<bos>", "eos": "<eos>", "pad": "<pad>", "mask": "<mask>"},
    "Qwen2Tokenizer": {"unk": "<|endoftext|>", "bos": None, "eos": "<|endoftext|>", "pad": "<|endoftext|>"},
}
#: Classes that take tokenizer.json as it is and add no role defaults.
#: (Names without their "Fast" suffix: PreTrainedTokenizerFast is "PreTrainedTokenizer" here.
#: LlamaTokenizer: transformers loads a byte-level or Mistral tokenizer.json as it is.)
BACKEND_CLASSES = frozenset({"PreTrainedTokenizer", "TokenizersBackend", "LlamaTokenizer"})


def token_content(value: Any) -> str | None:
    """A special token as the config files write it: a string or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool


@dataclass(frozen=True)
class VocabShape:
    """Which ids the tokenizer gives a token: a base vocabulary (dense, minus gaps) plus added ids."""

    base_size: int | None
    gaps: tuple[tuple[int, int], ...] = ()
    #: How the tokenizer's own code names an id the files leave unnamed ("<|reserved_token_{id}|>").
    unnamed_format: str | None = None

    def covers(self, token_id: int) -> bool:
        if self.base_size is None or token_id >= self.base_size:
            return False
        return not any(a <= token_id < b for a, b in self.gaps)


@dataclass(frozen=True)
class StaticTokenizer:
    tokenizer_class: str | None
    tokens: Mapping[str, str | None]
    ids: Mapping[str, int | None]
    added: tuple[AddedToken, ...]
    length: int | None
    vocab_size: int | None
    chat_template: str | dict[str, str] | None
    chat_template_source: str | None
    vocab: VocabShape
    #: Reserved-looking entries of the base vocabulary (id -> token): <unusedN>, [control_N].
    reserved_vocab: Mapping[int, str] = field(default_factory=dict)
    #: field -> why its value is not known without running code.
    unknown: Mapping[str, str] = field(default_factory=dict)
    #: Where the ids came from: "tokenizer.json", "tokenizer_config.json" (remote code), "none".
    basis: str = "tokenizer.json"
    #: tokenizer.all_special_ids: the roles' ids and the extra special tokens' (None: not known).
    special_ids: tuple[int, ...] | None = None


def chat_template_of(tokenizer_config: Mapping[str, Any], templates: Mapping[str, str]) -> tuple[Any, str | None]:
    """(template, where it came from), as AutoTokenizer sets ``tokenizer.chat_template``."""
    named: dict[str, str] = {}
    if "chat_template.jinja" in templates:
        named["default"] = templates["chat_template.jinja"]
    for name, text in sorted(templates.items()):
        if name.startswith("additional_chat_templates/"):
            named[name.split("/", 1)[1].removesuffix(".jinja")] = text
    if list(named) == ["default"]:
        return named["default"], "chat_template.jinja"
    if named:
        return named, "chat_template.jinja and additional_chat_templates/"
    value = tokenizer_config.get("chat_template")
    if isinstance(value, str):
        return value, "tokenizer_config.json"
    if isinstance(value, list):
        table = {t["name"]: t["template"] for t in value
                 if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)}
        return (table or None), ("tokenizer_config.json" if table else None)
    return None, None


def template_text(template: str | dict[str, str] | None) -> str:
    """Every template's text, for asking whether a token appears in any of them."""
    if isinstance(template, dict):
        return "\n".join(template.values())
    return template or ""


def class_name(tokenizer_config: Mapping[str, Any]) -> str | None:
    cls = tokenizer_config.get("tokenizer_class")
    return cls.removesuffix("Fast") if isinstance(cls, str) else None


def _added_tokens(tokenizer_config: Mapping[str, Any], added_json: Any, reduced: Mapping[str, Any]) -> list[AddedToken]:
    decoder = tokenizer_config.get("added_tokens_decoder")
    found: dict[int, AddedToken] = {}
    if isinstance(decoder, dict):
        for key, value in decoder.items():
            content = token_content(value)
            try:
                idx = int(key)
            except (TypeError, ValueError):
                continue
            if content is not None and idx >= 0:
                special = bool(value.get("special", True)) if isinstance(value, dict) else True
                found[idx] = AddedToken(idx, content, special)
    else:
        if isinstance(added_json, dict):
            for content, idx in added_json.items():
                if _int(idx) is not None:
                    found[idx] = AddedToken(idx, content, False)
        for idx, content, special in reduced.get("added") or ():
            found[idx] = AddedToken(idx, content, special)
    return [found[i] for i in sorted(found)]


def role_tokens(tokenizer_config: Mapping[str, Any], special_map: Mapping[str, Any], cls: str | None,
                reduced: Mapping[str, Any]) -> tuple[dict[str, str | None], dict[str, str]]:
    """The token string of each role, and the roles whose string depends on code not modelled here."""
    legacy = "added_tokens_decoder" not in tokenizer_config
    tokens: dict[str, str | None] = {}
    unknown: dict[str, str] = {}
    defaults = CLASS_DEFAULTS.get(cls or "", {})
    if reduced.get("source") == "tokenizer.model":
        defaults = spm_defaults(cls, reduced.get("spm") or {})
    for role in ROLES:
        key = f"{role}_token"
        if legacy and key in special_map:
            tokens[role] = token_content(special_map[key])
        elif key in tokenizer_config:
            tokens[role] = token_content(tokenizer_config[key])
        elif role in defaults:
            tokens[role] = defaults[role]
        elif role == "pad" and isinstance(reduced.get("padding_pad_token"), str):
            tokens[role] = reduced["padding_pad_token"]
        else:
            tokens[role] = None
            if cls and cls not in BACKEND_CLASSES and cls not in CLASS_DEFAULTS and not defaults:
                unknown[f"{role}_token_id"] = (f"tokenizer_config.json names no {role} token, and the class {cls} "
                                              "may give one by default (not modelled)")
    return tokens, unknown


def spm_defaults(cls: str | None, spec: Mapping[str, Any]) -> dict[str, str | None]:
    """Role defaults when transformers converts a sentencepiece tokenizer.model at load.

    LlamaTokenizer's ``__init__`` names <unk>, <s> and </s>; the generic backend takes the
    trainer spec's pieces for the roles whose id is set (sentencepiece's defaults: unk 0,
    bos 1, eos 2).
    """
    if cls == "LlamaTokenizer":
        return {"unk": "<unk>", "bos": "<s>", "eos": "</s>"}
    if cls in CLASS_DEFAULTS:
        return CLASS_DEFAULTS[cls]
    found: dict[str, str | None] = {}
    for role, default_id, default_piece in (("unk", 0, "<unk>"), ("bos", 1, "<s>"), ("eos", 2, "</s>")):
        if int(spec.get(f"{role}_id", default_id)) >= 0:
            found[role] = str(spec.get(f"{role}_piece") or default_piece)
    return found


def extra_special_tokens(tokenizer_config: Mapping[str, Any], special_map: Mapping[str, Any]) -> list[str]:
    """additional_special_tokens / extra_special_tokens (a list, or a dict by name), as transformers 5 reads them."""
    value = tokenizer_config.get("extra_special_tokens") or tokenizer_config.get("additional_special_tokens")
    if value is None and "added_tokens_decoder" not in tokenizer_config:
        value = special_map.get("extra_special_tokens") or special_map.get("additional_special_tokens")
    items = list(value.values()) if isinstance(value, dict) else value
    return [c for c in (token_content(v) for v in items or ()) if c is not None] if isinstance(items, list) else []


def from_tokenizer_json(json_files: Mapping[str, Any], reduced: Mapping[str, Any],
                        templates: Mapping[str, str]) -> StaticTokenizer:
    """The tokenizer transformers builds from tokenizer.json and the config files beside it."""
    config = json_files.get("tokenizer_config.json")
    config = config if isinstance(config, dict) else {}
    special_map = json_files.get("special_tokens_map.json")
    special_map = special_map if isinstance(special_map, dict) else {}
    cls = class_name(config)
    added = _added_tokens(config, json_files.get("added_tokens.json"), reduced)
    lookup: dict[str, int] = dict(reduced.get("lookup") or {})
    base = int(reduced.get("vocab_count") or 0)
    # A class that takes tokenizer.json as it is keeps its added tokens beside the config's.
    extra = [AddedToken(i, c, s) for i, c, s in reduced.get("added") or ()] if cls in BACKEND_CLASSES or cls is None else []
    by_content: dict[str, int] = {}
    for tok in [*extra, *added]:
        by_content.setdefault(tok.content, lookup.get(tok.content, tok.id))
    tokens, unknown = role_tokens(config, special_map, cls, reduced)
    next_id = base + sum(1 for c in by_content if c not in lookup)
    ids: dict[str, int | None] = {}
    for role in ROLES:
        content = tokens[role]
        if content is None:
            ids[role] = None
        elif content in lookup:
            ids[role] = lookup[content]
        elif content in by_content:
            ids[role] = by_content[content]
        else:  # transformers appends a named special token that exists nowhere
            by_content[content] = ids[role] = next_id
            next_id += 1
    length = next_id
    all_added = {t.id: t for t in extra}
    all_added.update({t.id: t for t in added})
    template, source = chat_template_of(config, templates)
    gaps = tuple((a, b) for a, b in reduced.get("gaps") or ())
    extra_names = extra_special_tokens(config, special_map)
    if reduced.get("source") == "tokenizer.model":  # the converter makes the control pieces the extra specials
        extra_names = [c for _i, c, special in reduced.get("added") or () if special]
    special_ids = {i for i in ids.values() if i is not None}
    special_ids.update(by_content[c] if c in by_content else lookup[c] for c in extra_names
                       if c in by_content or c in lookup)
    return StaticTokenizer(
        tokenizer_class=config.get("tokenizer_class") if isinstance(config.get("tokenizer_class"), str) else None,
        special_ids=tuple(sorted(special_ids)),
        tokens=tokens, ids=ids, added=tuple(all_added[i] for i in sorted(all_added)), length=length,
        vocab_size=base, chat_template=template, chat_template_source=source,
        vocab=VocabShape(base, gaps), reserved_vocab={int(i): t for i, t in reduced.get("reserved") or ()},
        unknown=unknown, basis=str(reduced.get("source") or "tokenizer.json"),
    )


def from_config_only(json_files: Mapping[str, Any], templates: Mapping[str, str], why: str,
                     ranks_count: int | None = None, unnamed_format: str | None = None) -> StaticTokenizer:
    """Ids from tokenizer_config.json alone: the tokenizer is the model's own code, or has no tokenizer.json.

    Role strings resolve through ``added_tokens_decoder`` only; the length and vocabulary
    size are what the code computes, so they are named unknown with ``why``.
    """
    config = json_files.get("tokenizer_config.json")
    config = config if isinstance(config, dict) else {}
    special_map = json_files.get("special_tokens_map.json")
    special_map = special_map if isinstance(special_map, dict) else {}
    added = _added_tokens(config, json_files.get("added_tokens.json"), {})
    by_content: dict[str, int] = {}
    for tok in reversed(added):
        by_content[tok.content] = tok.id  # the lowest id wins for a repeated content
    tokens: dict[str, str | None] = {}
    ids: dict[str, int | None] = {}
    unknown: dict[str, str] = {"tokenizer_len": why, "tokenizer_vocab_size": why, "all_special_ids": why}
    for role in ROLES:
        key = f"{role}_token"
        content = token_content(config.get(key)) if key in config else token_content(special_map.get(key))
        tokens[role] = content
        ids[role] = by_content.get(content) if content is not None else None
        if content is not None and ids[role] is None:
            unknown[f"{role}_token_id"] = f"{content} is not among tokenizer_config.json's added tokens; {why}"
    template, source = chat_template_of(config, templates)
    auto_map = config.get("auto_map")
    cls = None
    if isinstance(auto_map, dict):
        ref = auto_map.get("AutoTokenizer")
        for item in ref if isinstance(ref, list) else [ref]:
            if isinstance(item, str) and item:
                cls = item.rsplit(".", 1)[-1]
                break
    if cls is None and isinstance(config.get("tokenizer_class"), str):
        cls = config["tokenizer_class"]
    return StaticTokenizer(
        tokenizer_class=cls, tokens=tokens, ids=ids, added=tuple(added), length=None, vocab_size=None,
        chat_template=template, chat_template_source=source,
        vocab=VocabShape(ranks_count, (), unnamed_format), unknown=unknown, basis="tokenizer_config.json",
    )
