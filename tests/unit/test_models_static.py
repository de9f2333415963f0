"""Static tokenizer facts and mask candidates: pure rules over small in-memory files, and the
host-side reduction of tokenizer.json on real files (no tokenizers library needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envdoctor.modelfacts.mask_candidates import named_ids
from envdoctor.modelfacts.model import ModelFacts, choose_mask_token, resolve_architecture
from envdoctor.probe.host.model import tokenizer as reduce
from envdoctor.probe.host.model import files as probe
from envdoctor.modelfacts.tokenizer_static import chat_template_of


def tokenizer_json(path: Path, base: int, added: list[tuple[int, str, bool]], vocab_names: dict[int, str] = {},
                   padding: str | None = None, gap: tuple[int, int] | None = None) -> Path:
    """A tokenizer.json as the tokenizers library writes one (BPE, filler vocabulary)."""
    vocab = {vocab_names.get(i, f"t{i}"): i for i in range(base) if not (gap and gap[0] <= i < gap[1])}
    data = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []},
            "added_tokens": [{"id": i, "content": c, "special": s} for i, c, s in added],
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}]},
            "padding": {"pad_token": padding} if padding else None}
    path.write_text(json.dumps(data))
    return path


def static(tmp_path: Path, files: dict[str, object], base: int, added, **kw):
    tokenizer_json(tmp_path / "tokenizer.json", base, added, **kw)
    for name, data in files.items():
        (tmp_path / name).write_text(data if isinstance(data, str) else json.dumps(data))
    return ModelFacts.from_probe(probe.inspect_model(str(tmp_path), {}))


def test_llama3_style_ids_resolve_through_added_tokens(tmp_path):
    """Strings in tokenizer_config.json resolve to added-token ids; len counts added tokens past the vocab."""
    added = [(100, "<|begin|>", True), (101, "<|end|>", True), (102, "<|reserved_special_token_0|>", True)]
    model = static(tmp_path, {"tokenizer_config.json": {
        "bos_token": "<|begin|>", "eos_token": "<|end|>", "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {str(i): {"content": c, "special": s} for i, c, s in added}},
        "config.json": {"vocab_size": 103, "hidden_size": 8, "num_hidden_layers": 4}}, 100, added)
    tok = model.static_tokenizer()
    assert (tok.ids["bos"], tok.ids["eos"], tok.ids["pad"], tok.length, tok.vocab_size) == (100, 101, None, 103, 100)
    assert tok.unknown == {}
    choice = choose_mask_token(tok, 103)
    assert (choice.token_id, choice.source, choice.count) == (102, "reserved", 1)


def test_legacy_config_takes_special_tokens_map_and_tokenizer_json_added_tokens(tmp_path):
    """Without added_tokens_decoder, special_tokens_map.json overrides and tokenizer.json's added tokens count."""
    added = [(0, "<s>", True), (1, "</s>", True), (50, "<x>", True)]
    model = static(tmp_path, {"tokenizer_config.json": {"eos_token": "<s>", "tokenizer_class": "LlamaTokenizerFast"},
                              "special_tokens_map.json": {"eos_token": {"content": "</s>"}}},
                   50, added, vocab_names={0: "<s>", 1: "</s>"})
    tok = model.static_tokenizer()
    assert tok.ids["eos"] == 1 and tok.length == 51 and sorted(tok.special) == [0, 1, 50]


def test_class_defaults_and_appended_special_token(tmp_path):
    """GemmaTokenizer's default <mask> is found in the vocabulary; a named token found nowhere is appended."""
    model = static(tmp_path, {"tokenizer_config.json": {"tokenizer_class": "GemmaTokenizer", "added_tokens_decoder": {},
                                                        "pad_token": "<newpad>"}},
                   10, [], vocab_names={0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>"})
    tok = model.static_tokenizer()
    assert (tok.ids["mask"], tok.ids["bos"], tok.ids["pad"], tok.length) == (4, 2, 10, 11)
    assert choose_mask_token(tok, 12).source == "tokenizer"


def test_unknown_class_default_is_said_not_guessed(tmp_path):
    """A class whose defaults are not modelled: a role it may fill is named in unknown, with the class."""
    model = static(tmp_path, {"tokenizer_config.json": {"tokenizer_class": "BloomTokenizerFast", "eos_token": "t1"}}, 5, [])
    tok = model.static_tokenizer()
    assert tok.ids["eos"] == 1 and "BloomTokenizer" in tok.unknown["pad_token_id"]


def test_padding_slots_are_candidates_and_config_ids_are_not(tmp_path):
    """Qwen-style: rows past len(tokenizer) are candidates, except ids config.json names (nested too)."""
    added = [(10, "<|endoftext|>", True), (11, "<|im_end|>", True)]
    config = {"vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 2, "eos_token_id": 11,
              "vision_config": {"media_placeholder_token_id": 12}, "image_token_index": [13]}
    model = static(tmp_path, {"tokenizer_config.json": {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>",
                                                        "added_tokens_decoder": {str(i): {"content": c} for i, c, _ in added}},
                              "config.json": config}, 10, added)
    tok = model.static_tokenizer()
    assert tok.ids["pad"] == 10 and tok.ids["unk"] == 10  # Qwen2Tokenizer's defaults
    choice = choose_mask_token(tok, 16)
    assert (choice.token_id, choice.source, choice.unnamed) == (14, "unnamed", 2)


def test_template_tokens_and_role_ids_are_never_candidates(tmp_path):
    """A reserved token the chat template writes is skipped, and so is one that is the pad token."""
    added = [(5, "<unused0>", True), (6, "<unused1>", True), (7, "<unused2>", True)]
    model = static(tmp_path, {"tokenizer_config.json": {
        "pad_token": "<unused1>", "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "{{ '<unused0>' }}",
        "added_tokens_decoder": {str(i): {"content": c} for i, c, _ in added}}}, 5, added)
    choice = choose_mask_token(model.static_tokenizer(), 8)
    assert (choice.token_id, choice.count) == (7, 1)


def test_no_candidate_says_the_vocabulary_must_grow(tmp_path):
    """When every row has a used token, and only then, the note says the vocabulary must grow."""
    model = static(tmp_path, {"tokenizer_config.json": {"eos_token": "t1", "tokenizer_class": "PreTrainedTokenizerFast"}},
                   4, [])
    choice = choose_mask_token(model.static_tokenizer(), 4)
    assert choice.token_id is None and "must grow" in choice.message


def test_vocabulary_gaps_are_unnamed_rows(tmp_path):
    """An id the vocabulary skips (a gap) is an unnamed row like those past its end."""
    model = static(tmp_path, {"tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"}}, 10, [], gap=(3, 4))
    tok = model.static_tokenizer()
    assert tok.vocab.gaps == ((3, 4),) and choose_mask_token(tok, 10).token_id == 3


def test_kimi_k26_candidate_is_an_unnamed_special_id_avoiding_config_ids():
    """Remote-code tiktoken layout: rows past the ranks not named by added_tokens_decoder or config.json."""
    raw = {"path": "/m", "listing": ["tiktoken.model", "tokenization_kimi.py"],
           "json": {"tokenizer_config.json": {
               "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
               "bos_token": "[BOS]", "eos_token": "[EOS]",
               "added_tokens_decoder": {"8": {"content": "[BOS]"}, "9": {"content": "[EOS]"}, "11": {"content": "<x>"}}},
               "config.json": {"media_placeholder_token_id": 10, "text_config": {"vocab_size": 14}}},
           "ranks": {"lines": 8, "verified": True, "dense": True},
           "code": {"tokenization_kimi.py": {"source": "names = '<|reserved_token_%d|>' % i"}}}
    tok = ModelFacts.from_probe(raw).static_tokenizer()
    assert (tok.ids["bos"], tok.ids["eos"], tok.length) == (8, 9, None)
    assert "--trust-remote-code" in tok.unknown["tokenizer_len"]
    choice = choose_mask_token(tok, 14)
    assert (choice.token_id, choice.token, choice.count) == (12, "<|reserved_token_12|>", 2)


def test_named_ids_walks_nested_configs_and_lists():
    """Every *_id/*_ids/*_index integer is found, nested and in lists; other integers are not."""
    found = named_ids({"eos_token_id": [1, 2], "hidden_size": 7, "text_config": {"pad_token_id": 3},
                       "vision_config": {"image_token_index": 4, "flag_ids": [True]}}, {"bos_token_id": 5})
    assert found == {1: "eos_token_id", 2: "eos_token_id", 3: "text_config.pad_token_id",
                     4: "vision_config.image_token_index", 5: "bos_token_id"}


def test_chat_template_sources_in_transformers_order():
    """chat_template.jinja beats tokenizer_config.json; several files become a dict; a list becomes a dict."""
    assert chat_template_of({"chat_template": "a"}, {"chat_template.jinja": "b"}) == ("b", "chat_template.jinja")
    both, _ = chat_template_of({}, {"chat_template.jinja": "b", "additional_chat_templates/tool_use.jinja": "c"})
    assert both == {"default": "b", "tool_use": "c"}
    listed, _ = chat_template_of({"chat_template": [{"name": "default", "template": "d"}]}, {})
    assert listed == {"default": "d"}


def test_thinker_config_nesting_is_followed_twice():
    """Qwen2.5-Omni keeps the text model under thinker_config.text_config."""
    arch = resolve_architecture({"model_type": "qwen2_5_omni", "thinker_config": {
        "model_type": "qwen2_5_omni_thinker", "text_config": {"model_type": "qwen2_5_omni_text", "hidden_size": 8,
                                                              "num_hidden_layers": 2, "vocab_size": 20}}})
    assert arch.nested_in == "thinker_config.text_config" and arch.get("num_hidden_layers") == 2


def test_missing_config_field_takes_a_known_default_or_says_unknown():
    """Gemma 3's text_config has no vocab_size: the class default, noted; an unknown type's absence is explained."""
    arch = resolve_architecture({"text_config": {"model_type": "gemma3_text", "hidden_size": 8, "num_hidden_layers": 2}})
    assert arch.get("vocab_size") == 262208 and "default" in arch.notes["vocab_size"]
    other = resolve_architecture({"model_type": "mystery", "hidden_size": 8, "num_hidden_layers": 2})
    assert other.get("vocab_size") is None and "does not know" in other.notes["vocab_size"]


@pytest.mark.parametrize("content, words", [
    ("[1, 2]", "no model object"),
    ('{"model": {"vocab": {"a": "x"}}}', "not an id"),
    ('{"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": "1", "content": "b"}]}', "integer id"),
    ('{"model": {"vocab": 5}}', "neither an object nor a list"),
    ("{", "not valid JSON"),
])
def test_malformed_tokenizer_json_is_an_error_value(tmp_path, content, words):
    """A tokenizer.json of the wrong shape becomes an error string, never a probe crash."""
    path = tmp_path / "tokenizer.json"
    path.write_text(content)
    assert words in reduce.reduce_tokenizer_json(str(path), set())["error"]


def test_oversized_tokenizer_json_is_not_parsed(tmp_path, monkeypatch):
    """A tokenizer.json above the bound is refused by size, before it is read."""
    path = tokenizer_json(tmp_path / "tokenizer.json", 10, [])
    monkeypatch.setattr(reduce, "MODEL_MAX_TOKENIZER_JSON_BYTES", 10)
    assert "more than the 10 bytes read" in reduce.reduce_tokenizer_json(str(path), set())["error"]


def test_reduction_ships_little_for_a_large_vocabulary(tmp_path):
    """A 150k-entry tokenizer.json is reduced to a few KB: counts, added tokens, the named strings' ids."""
    added = [(150000 + i, f"<|special_{i}|>", True) for i in range(20)]
    path = tokenizer_json(tmp_path / "tokenizer.json", 150000, added, vocab_names={7: "<unused0>"})
    reduced = reduce.reduce_tokenizer_json(str(path), {"t5", "<unused0>", "absent"})
    assert reduced["vocab_count"] == 150000 and reduced["gaps"] == [] and reduced["byte_level"]
    assert reduced["lookup"] == {"t5": 5, "<unused0>": 7} and reduced["reserved"] == [[7, "<unused0>"]]
    assert len(json.dumps(reduced)) < 4096 < path.stat().st_size


def _pb(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: a varint, or length-delimited bytes."""
    def varint(n: int) -> bytes:
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload if payload >= 0 else payload + (1 << 64))
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_sentencepiece_pieces_are_the_vocabulary(tmp_path):
    """tokenizer.model: ids are positions, control pieces are added specials, the trainer spec names roles."""
    pieces = [("<unk>", 2), ("<s>", 3), ("</s>", 3), ("[control_8]", 3), ("\u2581a", 1)]
    proto = b"".join(_pb(1, _pb(1, p.encode()) + _pb(3, kind)) for p, kind in pieces)
    proto += _pb(2, _pb(3, 2) + _pb(40, 0) + _pb(41, 1) + _pb(42, 2) + _pb(43, -1))
    (tmp_path / "tokenizer.model").write_bytes(proto)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    model = ModelFacts.from_probe(probe.inspect_model(str(tmp_path), {}))
    assert model.tokenizer_json["spm"] == {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}
    tok = model.static_tokenizer()
    assert (tok.ids["bos"], tok.ids["eos"], tok.ids["unk"], tok.length, tok.basis) == (1, 2, 0, 5, "tokenizer.model")
    assert choose_mask_token(tok, 5).token_id == 3


def test_a_file_that_is_not_sentencepiece_is_an_error_value(tmp_path):
    """A tokenizer.model with a truncated field is reported as not a sentencepiece model."""
    from envdoctor.probe.host.model.spm import reduce_sentencepiece

    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"\x0a\xff\xff\x01abc")
    assert "not a sentencepiece model" in reduce_sentencepiece(str(path), set())["error"]


@pytest.mark.parametrize("token, reserved", [
    ("<|reserved_special_token_0|>", True), ("<|reserved_token_163589|>", True), ("<unused42>", True),
    ("[unused3]", True), ("[control_8]", True), ("<SPECIAL_20>", True), ("<｜place▁holder▁no▁0｜>", True),
    ("<|im_end|>", False), ("<mask>", False), ("<extra_id_0>", False), ("[INST]", False), ("<unused>", False),
])
def test_reserved_names(token, reserved):
    """The names vocabularies give unused ids match; tokens with a use (T5 sentinels, chat markers) do not."""
    from envdoctor.modelfacts.mask_candidates import RESERVED_TOKEN

    assert bool(RESERVED_TOKEN.match(token)) is reserved


def test_all_special_ids_are_roles_and_extra_special_tokens(tmp_path):
    """all_special_ids: the roles' ids and the extra special tokens' (a list, or a dict by name), as transformers 5."""
    added = [(10, "<|endoftext|>", True), (11, "<|im_start|>", True), (12, "<|im_end|>", True), (13, "<x>", True)]
    model = static(tmp_path, {"tokenizer_config.json": {
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"],
        "added_tokens_decoder": {str(i): {"content": c} for i, c, _ in added}}}, 10, added)
    assert model.static_tokenizer().all_special_ids == (10, 11, 12)
