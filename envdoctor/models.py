"""Typed views of what the probe found in model directories, and what follows from them.

Parsing and arithmetic only; no I/O. The probe ships raw JSON and file contents; here the
architecture is resolved (Kimi K2.x keeps it under ``text_config``), the tokenizer's ids
are read from its static files (or from the live load, with consent), and the drafter
settings are derived: DFlash's target layers and mask token, EAGLE-3's capture layers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from envdoctor.facts import HostFacts

#: Where multimodal wrappers keep the language model's config.
NESTED_CONFIG_KEYS = ("text_config", "language_config", "llm_config")
#: Integer fields reported for every model; ``None`` when the config lacks them.
ARCH_INT_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "vocab_size",
    "num_attention_heads",
    "num_key_value_heads",
    "kv_lora_rank",
    "q_lora_rank",
    "n_routed_experts",
    "num_experts_per_tok",
)
#: Fields without which no drafter can be sized.
REQUIRED_ARCH_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size")
#: Spellings of the DeepSeek-V3-style text model that Kimi K2.x nests.
KIMI_TEXT_TYPES = frozenset({"kimi_k2", "deepseek_v3"})

SPECIAL_ROLES = ("bos", "eos", "pad", "unk", "mask")
#: Unused special tokens that a vocabulary reserves for later use: safe mask candidates.
RESERVED_TOKEN = re.compile(
    r"^(<\|reserved_token_\d+\|>|<\|reserved_special_token_\d+\|>|\[unused\d+\]|<unused\d+>)$"
)


class ModelConfigError(ValueError):
    """config.json is there but cannot describe an architecture (wrong types, no fields)."""


@dataclass(frozen=True)
class Architecture:
    model_type: str | None
    architectures: tuple[str, ...]
    #: The key the text model's config sits under, or None when it is at the top level.
    nested_in: str | None
    text_model_type: str | None
    fields: Mapping[str, int | None]

    def get(self, name: str) -> int | None:
        return self.fields.get(name)

    @property
    def is_kimi_k2(self) -> bool:
        return (self.text_model_type or self.model_type or "") in KIMI_TEXT_TYPES

    def summary(self) -> str:
        f = self.fields
        kind = self.model_type or "?"
        if self.nested_in:
            kind += f" ({self.nested_in}: {self.text_model_type or '?'})"
        parts = [kind, f"{f.get('num_hidden_layers')} layers", f"hidden {f.get('hidden_size')}", f"vocab {f.get('vocab_size')}"]
        if f.get("kv_lora_rank"):
            parts.append(f"MLA kv_lora_rank {f['kv_lora_rank']}")
        if f.get("n_routed_experts"):
            parts.append(f"MoE {f['n_routed_experts']} experts, top-{f.get('num_experts_per_tok')}")
        return ", ".join(parts)


def _int_field(config: Mapping[str, Any], name: str, where: str) -> int | None:
    value = config.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelConfigError(f"{where}{name} must be an integer, not {type(value).__name__} {value!r}")
    return value


def resolve_architecture(config: Any) -> Architecture:
    """The language model's shape, from the top level or a nested text/language/llm config."""
    if not isinstance(config, dict):
        raise ModelConfigError(f"config.json must hold a JSON object, not {type(config).__name__}")
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelConfigError("config.json: architectures must be a list of class names")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ModelConfigError("config.json: model_type must be a string")
    nested_in = None
    text: Mapping[str, Any] = config
    for key in NESTED_CONFIG_KEYS:
        inner = config.get(key)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            raise ModelConfigError(f"config.json: {key} must be an object, not {type(inner).__name__}")
        # A wrapper that also states the fields on top (some do, for vLLM) is read from the top.
        if config.get("num_hidden_layers") is None:
            nested_in, text = key, inner
        break
    where = f"config.json {nested_in}." if nested_in else "config.json: "
    fields = {name: _int_field(text, name, where) for name in ARCH_INT_FIELDS}
    if nested_in and fields["vocab_size"] is None:
        fields["vocab_size"] = _int_field(config, "vocab_size", "config.json: ")
    text_type = text.get("model_type") if nested_in else model_type
    return Architecture(
        model_type=model_type,
        architectures=tuple(archs),
        nested_in=nested_in,
        text_model_type=text_type if isinstance(text_type, str) else None,
        fields=fields,
    )


def token_content(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


@dataclass(frozen=True)
class TokenizerFacts:
    """What the tokenizer's files say (``source`` static) or what loading it showed (live)."""

    source: str
    tokenizer_class: str | None
    tokens: Mapping[str, str | None]
    ids: Mapping[str, int | None]
    #: id -> content of every special token the tokenizer declares.
    special: Mapping[int, str]
    chat_template: str | None
    length: int | None = None
    vocab_size: int | None = None


def added_tokens(tokenizer_config: Mapping[str, Any]) -> dict[int, str]:
    decoder = tokenizer_config.get("added_tokens_decoder")
    found: dict[int, str] = {}
    if not isinstance(decoder, dict):
        return found
    for key, value in decoder.items():
        content = token_content(value)
        try:
            found[int(key)] = content if content is not None else ""
        except (TypeError, ValueError):
            continue  # a key that is not an id says nothing about ids
    return found


def tokenizer_class_of(tokenizer_config: Mapping[str, Any]) -> str | None:
    auto_map = tokenizer_config.get("auto_map")
    if isinstance(auto_map, dict):
        ref = auto_map.get("AutoTokenizer")
        refs = ref if isinstance(ref, list) else [ref]
        for item in refs:
            if isinstance(item, str) and item:
                return item.rsplit(".", 1)[-1]
    cls = tokenizer_config.get("tokenizer_class")
    return cls if isinstance(cls, str) else None


def static_tokenizer(json_files: Mapping[str, Any], chat_template: str | None) -> TokenizerFacts:
    """Ids from tokenizer_config.json (added_tokens_decoder) and special_tokens_map.json."""
    config = json_files.get("tokenizer_config.json")
    config = config if isinstance(config, dict) else {}
    special_map = json_files.get("special_tokens_map.json")
    special_map = special_map if isinstance(special_map, dict) else {}
    special = added_tokens(config)
    by_content = {content: idx for idx, content in sorted(special.items(), reverse=True)}
    tokens: dict[str, str | None] = {}
    ids: dict[str, int | None] = {}
    for role in SPECIAL_ROLES:
        key = f"{role}_token"
        content = token_content(config.get(key)) or token_content(special_map.get(key))
        tokens[role] = content
        ids[role] = by_content.get(content) if content is not None else None
    return TokenizerFacts("static", tokenizer_class_of(config), tokens, ids, special, chat_template)


def live_tokenizer(raw: Mapping[str, Any], static: TokenizerFacts) -> TokenizerFacts:
    """The trusted live load, where it worked; special ids beyond the named ones stay static."""
    return TokenizerFacts(
        "live",
        str(raw.get("class")),
        {role: raw.get(f"{role}_token") for role in SPECIAL_ROLES},
        {role: raw.get(f"{role}_token_id") for role in SPECIAL_ROLES},
        static.special,
        raw.get("chat_template"),
        length=raw.get("len"),
        vocab_size=raw.get("vocab_size"),
    )


@dataclass(frozen=True)
class CodeFile:
    name: str
    sha256: str | None
    size: int | None
    source: str | None
    error: str | None = None


@dataclass(frozen=True)
class ModelFacts:
    """One model directory as the probe found it."""

    path: str
    error: str | None = None
    listing: tuple[str, ...] = ()
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    json_files: Mapping[str, Any] = field(default_factory=dict)
    json_errors: Mapping[str, str] = field(default_factory=dict)
    ranks: Mapping[str, Any] | None = None
    auto_map: tuple[Mapping[str, str], ...] = ()
    code: tuple[CodeFile, ...] = ()
    live: Mapping[str, Any] | None = None

    @classmethod
    def from_probe(cls, raw: Mapping[str, Any]) -> ModelFacts:
        code = tuple(
            CodeFile(name, v.get("sha256"), v.get("size"), v.get("source"), v.get("error"))
            for name, v in sorted((raw.get("code") or {}).items())
        )
        return cls(
            path=str(raw.get("path", "")),
            error=raw.get("error"),
            listing=tuple(raw.get("listing") or ()),
            files=dict(raw.get("files") or {}),
            json_files=dict(raw.get("json") or {}),
            json_errors=dict(raw.get("json_errors") or {}),
            ranks=raw.get("ranks"),
            auto_map=tuple(raw.get("auto_map") or ()),
            code=code,
            live=raw.get("live"),
        )

    def architecture(self) -> Architecture:
        """Raises ModelConfigError with the reason when config.json cannot be used."""
        if self.error:
            raise ModelConfigError(f"{self.path}: {self.error}")
        if "config.json" in self.json_errors:
            raise ModelConfigError(self.json_errors["config.json"])
        if "config.json" not in self.json_files:
            raise ModelConfigError(f"no config.json in {self.path}")
        return resolve_architecture(self.json_files["config.json"])

    @property
    def chat_template(self) -> str | None:
        """The template text, from tokenizer_config.json or a separate template file."""
        config = self.json_files.get("tokenizer_config.json")
        if isinstance(config, dict):
            template = config.get("chat_template")
            if isinstance(template, str) and template:
                return template
            if isinstance(template, list) and template:
                return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
        for name in ("chat_template.jinja", "chat_template.json"):
            if name in self.files:
                return f"<{name}>"
        return None

    def static_tokenizer(self) -> TokenizerFacts:
        return static_tokenizer(self.json_files, self.chat_template)

    def live_result(self, key: str = "trusted") -> Mapping[str, Any] | None:
        if not self.live or not isinstance(self.live.get(key), dict):
            return None
        return self.live[key]

    def tokenizer(self) -> TokenizerFacts:
        """The live tokenizer when consent was given and it loaded, else the static view."""
        static = self.static_tokenizer()
        trusted = self.live_result()
        if trusted and "error" not in trusted:
            return live_tokenizer(trusted, static)
        return static


def models_from_facts(facts: HostFacts) -> list[ModelFacts]:
    raw = facts.section("models") or []
    return [ModelFacts.from_probe(m) for m in raw if isinstance(m, dict)]


def dflash_target_layer_ids(num_layers: int, draft_layers: int) -> list[int]:
    """DFlash spreads the captured target layers as round(1 + i*(n-4)/(d-1)), i < d."""
    if draft_layers < 1:
        raise ValueError("a drafter has at least one layer")
    if draft_layers == 1:
        return [1]
    # Python's round() is banker's rounding; the spread is defined with half away from zero.
    return [int(1 + i * (num_layers - 4) / (draft_layers - 1) + 0.5) for i in range(draft_layers)]


@dataclass(frozen=True)
class MaskChoice:
    token_id: int | None
    token: str | None
    #: "tokenizer" (its own mask token), "reserved" (an unused reserved id), or "none".
    source: str
    message: str


def choose_mask_token(tok: TokenizerFacts, vocab_size: int | None) -> MaskChoice:
    """The tokenizer's own mask token, else an unused reserved special id, else none.

    Never bos/eos/pad/unk, nor a token the chat template names: a drafter trained to
    predict after the pad token learns to see padding everywhere, and loses acceptance.
    """
    if tok.ids.get("mask") is not None:
        return MaskChoice(tok.ids["mask"], tok.tokens.get("mask"), "tokenizer", "the tokenizer has its own mask token")
    taken = {tok.ids.get(role) for role in ("bos", "eos", "pad", "unk")}
    template = tok.chat_template or ""
    for token_id, content in sorted(tok.special.items()):
        if token_id in taken or not RESERVED_TOKEN.match(content) or content in template:
            continue
        if vocab_size is not None and token_id >= vocab_size:
            continue  # no embedding row for it
        return MaskChoice(token_id, content, "reserved", f"no mask token; {content} ({token_id}) is reserved and unused")
    return MaskChoice(None, None, "none", "no mask token and no unused reserved special id: the vocabulary must grow by one token")


#: EAGLE-3 capture layers by speculators version, read from the released wheels:
#: 0.3-0.4 VllmHiddenStatesGenerator defaults to [2, n//2, n-3, n-1];
#: 0.5 and later resolve_target_layer_ids() picks [2, n//2, n-3].
EAGLE3_RULES: tuple[tuple[str, str], ...] = (("0.5", "[2, n//2, n-3]"), ("0.3", "[2, n//2, n-3, n-1]"))


def eagle3_target_layer_ids(num_layers: int, speculators_version: str | None) -> tuple[list[int], str]:
    """The layers the installed speculators will capture (current versions when it is absent)."""
    current = [2, num_layers // 2, num_layers - 3]
    if speculators_version is None:
        return current, "speculators not installed: the default of current versions, [2, n//2, n-3]"
    try:
        version = Version(speculators_version)
    except InvalidVersion:
        return current, f"speculators {speculators_version} (unparsable version): assumed [2, n//2, n-3]"
    if version >= Version("0.5"):
        return current, f"speculators {speculators_version}: [2, n//2, n-3]"
    if version >= Version("0.3"):
        return [*current, num_layers - 1], f"speculators {speculators_version}: [2, n//2, n-3, n-1]"
    return current, f"speculators {speculators_version} picks no default; [2, n//2, n-3] is the later default"


def tokenizer_needs_ranks(model: ModelFacts) -> bool:
    """Whether the tokenizer's own code reads a tiktoken ranks file."""
    return any(c.source and ("tiktoken" in c.source) for c in model.code)
