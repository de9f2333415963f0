"""Typed views of what the probe found in model directories, and what follows from them.

Parsing and arithmetic only; no I/O. The probe ships raw JSON and file contents; here the
architecture is resolved (Kimi K2.x keeps it under ``text_config``), the tokenizer's ids
are read from its static files (or from the live load, with consent), and the drafter
settings are derived: DFlash's target layers and mask token, EAGLE-3's capture layers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import HostFacts
from envdoctor.modelfacts.mask_candidates import CandidateInput, explain, find_candidates, named_ids
from envdoctor.modelfacts.tokenizer_static import (
    StaticTokenizer,
    VocabShape,
    from_config_only,
    from_tokenizer_json,
    template_text,
)
from envdoctor.probe.host.model.tokenizer import RESERVED_TOKEN_PATTERN

#: Where multimodal wrappers keep the language model's config (Qwen2.5-Omni nests twice:
#: thinker_config.text_config).
NESTED_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")
#: How deep nested configs are followed: config.json is untrusted input.
MAX_NESTING = 3
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
#: vocab_size of the config classes transformers 5 instantiates, for a config.json that omits
#: it (Gemma 3 keeps none under text_config); checked against AutoConfig.for_model in the tests.
CONFIG_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3_text": {"vocab_size": 262208},
    "gemma3": {"vocab_size": 262208},
    "qwen2_5_vl_text": {"vocab_size": 152064},
    "qwen2_5_omni_thinker": {"vocab_size": 152064},
    "qwen3": {"vocab_size": 151936},
    "deepseek_v3": {"vocab_size": 129280},
    "llama": {"vocab_size": 32000},
    "mistral": {"vocab_size": 32000},
}
#: Config classes that set num_key_value_heads to num_attention_heads when it is absent.
KV_HEADS_FOLLOW_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "kimi_k2",
                                   "qwen2_5_vl_text", "qwen2_vl_text"})

SPECIAL_ROLES = ("bos", "eos", "pad", "unk", "mask")
#: The names of reserved tokens; the pattern lives in the probe module, which the host runs too.
RESERVED_TOKEN = re.compile(RESERVED_TOKEN_PATTERN)


class ModelConfigError(ValueError):
    """config.json is there but cannot describe an architecture (wrong types, no fields)."""


@dataclass(frozen=True)
class Architecture:
    model_type: str | None
    architectures: tuple[str, ...]
    #: The key path the text model's config sits under ("thinker_config.text_config"), or None.
    nested_in: str | None
    text_model_type: str | None
    fields: Mapping[str, int | None]
    #: field -> why its value is not stated (or was taken from the config class's default).
    notes: Mapping[str, str] = field(default_factory=dict)
    #: The text model's config object (the level the fields were read from).
    text: Mapping[str, Any] = field(default_factory=dict)

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


def _text_level(config: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any]]:
    """(key path, config) of the language model: the top level, or a nested text/language/llm/thinker config."""
    path: list[str] = []
    text = config
    for _ in range(MAX_NESTING):
        for key in NESTED_CONFIG_KEYS:
            inner = text.get(key)
            if inner is None:
                continue
            if not isinstance(inner, dict):
                raise ModelConfigError(f"config.json: {'.'.join([*path, key])} must be an object, not {type(inner).__name__}")
            # A wrapper that also states the fields on top (some do, for vLLM) is read from the top.
            if text.get("num_hidden_layers") is None:
                path.append(key)
                text = inner
                break
        else:
            break
    return (".".join(path) or None), text


def resolve_architecture(config: Any) -> Architecture:
    """The language model's shape, from the top level or a nested text/language/llm/thinker config."""
    if not isinstance(config, dict):
        raise ModelConfigError(f"config.json must hold a JSON object, not {type(config).__name__}")
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelConfigError("config.json: architectures must be a list of class names")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ModelConfigError("config.json: model_type must be a string")
    nested_in, text = _text_level(config)
    where = f"config.json {nested_in}." if nested_in else "config.json: "
    fields = {name: _int_field(text, name, where) for name in ARCH_INT_FIELDS}
    notes: dict[str, str] = {}
    if nested_in and fields["vocab_size"] is None and config.get("vocab_size") is not None:
        fields["vocab_size"] = _int_field(config, "vocab_size", "config.json: ")
        notes["vocab_size"] = "from the top level of config.json (the nested config has none)"
    text_type = text.get("model_type") if nested_in else model_type
    text_type = text_type if isinstance(text_type, str) else None
    defaults = CONFIG_DEFAULTS.get(text_type or "", {})
    for name in REQUIRED_ARCH_FIELDS + ("num_attention_heads", "num_key_value_heads"):
        if fields[name] is not None:
            continue
        if name in defaults:
            fields[name] = defaults[name]
            notes[name] = f"config.json does not state it: the default of transformers' {text_type} config class"
        elif name == "num_key_value_heads" and text_type in KV_HEADS_FOLLOW_HEADS and fields["num_attention_heads"]:
            fields[name] = fields["num_attention_heads"]
            notes[name] = f"config.json does not state it: the {text_type} config class uses num_attention_heads"
        else:
            notes[name] = (f"config.json does not state {name}{' under ' + nested_in if nested_in else ''}; "
                           f"its value is the default of the {text_type or '?'} config class, which envdoctor does not know")
    return Architecture(
        model_type=model_type,
        architectures=tuple(archs),
        nested_in=nested_in,
        text_model_type=text_type,
        fields=fields,
        notes=notes,
        text=text,
    )


@dataclass(frozen=True)
class TokenizerFacts:
    """What the tokenizer's files say (``source`` static) or what loading it showed (live)."""

    source: str
    tokenizer_class: str | None
    tokens: Mapping[str, str | None]
    ids: Mapping[str, int | None]
    #: id -> content of every added token the tokenizer declares.
    special: Mapping[int, str]
    #: The text of every chat template (to ask whether a token appears in one), or None.
    chat_template: str | None
    length: int | None = None
    vocab_size: int | None = None
    #: The added tokens marked special.
    special_ids: frozenset[int] = frozenset()
    #: tokenizer.chat_template as transformers sets it: a string, a dict by name, or None.
    chat_template_value: Any = None
    chat_template_source: str | None = None
    vocab: VocabShape = VocabShape(None)
    reserved_vocab: Mapping[int, str] = field(default_factory=dict)
    #: id -> the key of config.json / generation_config.json that names it.
    config_ids: Mapping[int, str] = field(default_factory=dict)
    #: field -> why it is not known without running code.
    unknown: Mapping[str, str] = field(default_factory=dict)
    #: The files the static ids were read from.
    basis: str = ""
    #: tokenizer.all_special_ids, where known.
    all_special_ids: tuple[int, ...] | None = None


def as_tokenizer_facts(st: StaticTokenizer, config_ids: Mapping[int, str] | None = None,
                       chat_template: str | None = None) -> TokenizerFacts:
    text = template_text(st.chat_template) or None
    return TokenizerFacts(
        "static", st.tokenizer_class, dict(st.tokens), dict(st.ids), {t.id: t.content for t in st.added},
        chat_template if chat_template is not None else text, length=st.length, vocab_size=st.vocab_size,
        special_ids=frozenset(t.id for t in st.added if t.special), chat_template_value=st.chat_template,
        chat_template_source=st.chat_template_source, vocab=st.vocab, reserved_vocab=dict(st.reserved_vocab),
        config_ids=dict(config_ids or {}), unknown=dict(st.unknown), basis=st.basis, all_special_ids=st.special_ids,
    )


def static_tokenizer(json_files: Mapping[str, Any], chat_template: str | None) -> TokenizerFacts:
    """Ids from tokenizer_config.json alone (added_tokens_decoder, then special_tokens_map.json)."""
    st = from_config_only(json_files, {}, "no tokenizer.json was read")
    return as_tokenizer_facts(st, chat_template=chat_template)


def live_tokenizer(raw: Mapping[str, Any], static: TokenizerFacts) -> TokenizerFacts:
    """The trusted live load, where it worked; which ids exist beyond the named ones stays static."""
    rendered = raw.get("chat_template")
    texts = [t for t in (static.chat_template, rendered if isinstance(rendered, str) else None) if t]
    unknown = {k: v for k, v in static.unknown.items() if k not in ("tokenizer_len", "tokenizer_vocab_size")}
    special = raw.get("special_tokens")
    if isinstance(special, list) and static.all_special_ids is None:
        unknown["all_special_ids"] = f"the live load names them as tokens: {', '.join(map(str, special[:20]))}"
    return replace(
        static,
        source="live",
        tokenizer_class=str(raw.get("class")),
        tokens={role: raw.get(f"{role}_token") for role in SPECIAL_ROLES},
        ids={role: raw.get(f"{role}_token_id") for role in SPECIAL_ROLES},
        chat_template="\n".join(texts) or None,
        length=raw.get("len"),
        vocab_size=raw.get("vocab_size"),
        unknown=unknown,
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
    #: tokenizer.json as the probe reduced it (envdoctor.probe.host.model.tokenizer), or None.
    tokenizer_json: Mapping[str, Any] | None = None
    #: Chat template files (chat_template.jinja, additional_chat_templates/*.jinja) as text.
    templates: Mapping[str, str] = field(default_factory=dict)

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
            tokenizer_json=raw.get("tokenizer_json") if isinstance(raw.get("tokenizer_json"), dict) else None,
            templates={str(k): v for k, v in (raw.get("templates") or {}).items() if isinstance(v, str)},
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
        """The text of the chat template(s) AutoTokenizer loads, or None."""
        return self.static_tokenizer().chat_template

    @property
    def remote_tokenizer(self) -> str | None:
        """The auto_map reference of a tokenizer that is the model's own code, or None."""
        config = self.json_files.get("tokenizer_config.json")
        auto_map = config.get("auto_map") if isinstance(config, dict) else None
        if isinstance(auto_map, list):  # the legacy spelling: [slow, fast]
            auto_map = {"AutoTokenizer": auto_map}
        ref = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else None
        for item in ref if isinstance(ref, list) else [ref]:
            if isinstance(item, str) and item:
                return item
        return None

    def static_tokenizer(self) -> TokenizerFacts:
        """What AutoTokenizer would report, from the files only (see envdoctor.modelfacts.tokenizer_static)."""
        json_files = self.json_files
        config_ids = named_ids(json_files.get("config.json"), json_files.get("generation_config.json"))
        reduced = self.tokenizer_json
        remote = self.remote_tokenizer
        if remote:
            why = f"the tokenizer is the model's own code ({remote}): only running it (--trust-remote-code) tells"
            ranks = self.ranks or {}
            count = ranks.get("lines") if not ranks.get("error") and (ranks.get("dense") or not ranks.get("verified")) else None
            names = "<|reserved_token_{id}|>" if any(c.source and "reserved_token_" in c.source for c in self.code) else None
            st = from_config_only(json_files, self.templates, why, count, names)
        elif reduced and not reduced.get("error"):
            st = from_tokenizer_json(json_files, reduced, self.templates)
        elif reduced:
            source = reduced.get("source") or "tokenizer.json"
            st = from_config_only(json_files, self.templates, f"{source} cannot be used: {reduced['error']}")
        else:
            other = [n for n in ("vocab.json", "merges.txt", "vocab.txt", "tekken.json", "tiktoken.model") if n in self.listing]
            why = (f"the vocabulary is in {', '.join(other)}, which envdoctor does not read; loading the tokenizer tells"
                   if other else "the folder has no tokenizer.json or tokenizer.model: no tokenizer can be loaded from it")
            st = from_config_only(json_files, self.templates, why)
        return as_tokenizer_facts(st, config_ids)

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
    #: "tokenizer" (its own mask token), "reserved" (an unused reserved token), "unnamed" (an
    #: embedding row no token names), or "none".
    source: str
    message: str
    #: How many ids qualify (reserved tokens + unnamed rows); 0 for the tokenizer's own.
    count: int = 0
    reserved: int = 0
    unnamed: int = 0


def choose_mask_token(tok: TokenizerFacts, vocab_size: int | None) -> MaskChoice:
    """The tokenizer's own mask token, else an unused reserved token, else an unnamed row, else none.

    Never bos/eos/pad/unk, a token the chat template names, or an id config.json or
    generation_config.json names: a drafter trained to predict after the pad token learns
    to see padding everywhere, and loses acceptance (see envdoctor.modelfacts.mask_candidates).
    """
    taken = dict(tok.config_ids)
    taken.update({tok.ids[role]: f"the {role} token" for role in ("bos", "eos", "pad", "unk")
                  if tok.ids.get(role) is not None})
    rows, rows_from = vocab_size, f"config vocab_size {vocab_size}"
    if rows is None and tok.length is not None:
        rows, rows_from = tok.length, f"len(tokenizer) {tok.length}"
    inp = CandidateInput(rows, rows_from, taken, tok.chat_template or "", tok.special, tok.reserved_vocab,
                         tok.vocab.base_size, tok.vocab.gaps, tok.vocab.unnamed_format)
    found = find_candidates(inp)
    if tok.ids.get("mask") is not None:
        return MaskChoice(tok.ids["mask"], tok.tokens.get("mask"), "tokenizer",
                          f"the tokenizer has its own mask token ({found.count} unused reserved or unnamed id(s) besides)",
                          found.count, found.reserved, found.unnamed)
    message = explain(found, inp)
    if found.first is None:
        return MaskChoice(None, None, "none", message)
    slot = found.first
    return MaskChoice(slot.token_id, slot.name, slot.kind, message, found.count, found.reserved, found.unnamed)


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
