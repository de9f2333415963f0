"""Pure logic of model facts: architecture, drafter settings, tokenizer ids, model code, stage commands."""

from __future__ import annotations

import pytest

from envdoctor.errors import EnvdoctorError, UsageError
from envdoctor.engine.facts import Distribution, Environment
from envdoctor.modelfacts.code import check_code, distribution_for, read_imports
from envdoctor.modelfacts.model import (
    CodeFile,
    ModelConfigError,
    choose_mask_token,
    dflash_target_layer_ids,
    eagle3_target_layer_ids,
    resolve_architecture,
    static_tokenizer,
)
from envdoctor.stages.handoff import command_placeholders, render_command
from tests.kimi_fixture import FIRST_RESERVED, KIMI_CHAT_TEMPLATE, kimi_config, kimi_tokenizer_config


def venv(*dists: tuple[str, str]) -> Environment:
    site = "/v/lib/python3.11/site-packages"
    return Environment(
        prefix="/v", python="/v/bin/python", exists=True, runs=True, version="3.11.7",
        distributions=tuple(Distribution(n, v, (), f"{site}/{n}-{v}.dist-info", site) for n, v in dists),
    )


def test_kimi_architecture_is_read_from_text_config():
    """Kimi K2.5 keeps hidden size, layers and vocab under text_config; they are found there."""
    arch = resolve_architecture(kimi_config())
    assert arch.nested_in == "text_config"
    assert arch.model_type == "kimi_k25" and arch.text_model_type == "kimi_k2" and arch.is_kimi_k2
    assert (arch.get("hidden_size"), arch.get("num_hidden_layers"), arch.get("vocab_size")) == (7168, 61, 163840)
    assert (arch.get("kv_lora_rank"), arch.get("n_routed_experts"), arch.get("num_experts_per_tok")) == (512, 384, 8)


@pytest.mark.parametrize("key", ["language_config", "llm_config"])
def test_other_nested_keys_and_deepseek_spelling(key):
    """language_config and llm_config are nested configs too; deepseek_v3 counts as the Kimi K2 text model."""
    config = {"model_type": "wrapper", key: {"model_type": "deepseek_v3", "hidden_size": 8, "num_hidden_layers": 4,
                                              "vocab_size": 100}}
    arch = resolve_architecture(config)
    assert arch.nested_in == key and arch.is_kimi_k2 and arch.get("num_hidden_layers") == 4


def test_flat_config_is_read_from_the_top():
    """A Llama/Qwen-style config has its fields at the top level."""
    arch = resolve_architecture({"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "vocab_size": 151936})
    assert arch.nested_in is None and arch.get("num_hidden_layers") == 36 and arch.get("kv_lora_rank") is None


@pytest.mark.parametrize("config, words", [
    ([1, 2], "JSON object"),
    ({"text_config": "x"}, "text_config must be an object"),
    ({"text_config": {"num_hidden_layers": "61"}}, "num_hidden_layers must be an integer"),
    ({"architectures": "Kimi"}, "architectures must be a list"),
])
def test_wrong_types_are_clear_errors(config, words):
    """Fields of the wrong type raise ModelConfigError naming the field, never a crash."""
    with pytest.raises(ModelConfigError, match=words):
        resolve_architecture(config)


def test_dflash_layers_spread():
    """DFlash target layers: 61 target layers, 6 drafter layers give [1,12,24,35,47,58]."""
    assert dflash_target_layer_ids(61, 6) == [1, 12, 24, 35, 47, 58]
    assert dflash_target_layer_ids(61, 5) == [1, 15, 30, 44, 58]
    assert dflash_target_layer_ids(36, 1) == [1]


@pytest.mark.parametrize("version, expected", [
    ("0.3.0", [2, 30, 58, 60]),
    ("0.4.0.1", [2, 30, 58, 60]),
    ("0.5.0", [2, 30, 58]),
    ("0.9.0", [2, 30, 58]),
    (None, [2, 30, 58]),
])
def test_eagle3_layers_follow_the_installed_speculators(version, expected):
    """EAGLE-3 capture layers: [2, n//2, n-3, n-1] before speculators 0.5, [2, n//2, n-3] since."""
    ids, rule = eagle3_target_layer_ids(61, version)
    assert ids == expected
    assert (version or "not installed") in rule


def test_static_ids_from_added_tokens_decoder():
    """Without running any code, bos/eos/pad/unk ids come from tokenizer_config.json."""
    tok = static_tokenizer({"tokenizer_config.json": kimi_tokenizer_config()}, KIMI_CHAT_TEMPLATE)
    assert tok.tokenizer_class == "TikTokenTokenizer"
    assert tok.ids == {"bos": 163584, "eos": 163585, "pad": 163839, "unk": 163838, "mask": None}
    assert len(tok.special) == 256


def test_mask_candidate_is_an_unused_reserved_id():
    """Kimi has no mask token: the candidate is the first reserved id, never pad or a named chat token."""
    tok = static_tokenizer({"tokenizer_config.json": kimi_tokenizer_config()}, KIMI_CHAT_TEMPLATE)
    choice = choose_mask_token(tok, 163840)
    assert (choice.token_id, choice.source) == (FIRST_RESERVED, "reserved")
    assert choice.token_id not in (163584, 163585, 163586, 163838, 163839)


def test_mask_candidate_prefers_the_tokenizers_own_and_else_says_what_is_not_known():
    """A tokenizer's own mask token wins; without tokenizer.json, unnamed rows are said to be unknown."""
    own = static_tokenizer({"tokenizer_config.json": {
        "mask_token": "<mask>", "added_tokens_decoder": {"5": {"content": "<mask>"}}}}, None)
    assert choose_mask_token(own, 10).token_id == 5
    qwen = static_tokenizer({"tokenizer_config.json": {
        "pad_token": "<|endoftext|>", "added_tokens_decoder": {"1": {"content": "<|endoftext|>"},
                                                              "2": {"content": "<|im_end|>"}}}}, None)
    choice = choose_mask_token(qwen, 10)
    assert choice.token_id is None and "not known" in choice.message and "must grow" not in choice.message


def test_reserved_token_named_by_the_chat_template_is_not_a_candidate():
    """A reserved-looking token the chat template uses is taken; the next one is chosen."""
    config = {"added_tokens_decoder": {"7": {"content": "<|reserved_token_0|>"}, "8": {"content": "<|reserved_token_1|>"}}}
    tok = static_tokenizer({"tokenizer_config.json": config}, "{{ '<|reserved_token_0|>' }}")
    assert choose_mask_token(tok, 100).token_id == 8


SOURCE = """\
import os
import tiktoken
import yaml
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
from .helpers import thing
try:
    import blobfile
except ImportError:
    blobfile = None
"""


def test_imports_are_read_with_lines():
    """libcst reads every import with its line, marking relative and optional ones."""
    refs = read_imports("tokenization_kimi.py", SOURCE)
    by_module = {r.module: r for r in refs}
    assert by_module["tiktoken"].line == 2
    assert by_module["helpers"].relative and by_module["blobfile"].optional
    assert by_module["transformers.models.gpt2.tokenization_gpt2"].names == ("bytes_to_unicode",)


def test_missing_modules_and_removed_names_against_transformers_5():
    """tiktoken and PyYAML are missing; bytes_to_unicode is gone in transformers 5; blobfile is optional."""
    report = check_code([CodeFile("tokenization_kimi.py", "x", 1, SOURCE)], venv(("transformers", "5.24.0")),
                        ["tokenization_kimi.py"])
    assert sorted(m.distribution for m in report.missing) == ["PyYAML", "tiktoken"]
    assert [g.name for g in report.gone] == ["bytes_to_unicode"] and report.gone[0].removed.works_with == "transformers<5"
    assert [r.module for r in report.missing_files] == ["helpers"]


def test_removed_name_is_fine_with_transformers_4():
    """With transformers 4.x the legacy gpt2 import still works."""
    report = check_code([CodeFile("t.py", "x", 1, SOURCE)],
                        venv(("transformers", "4.57.1"), ("tiktoken", "0.9"), ("PyYAML", "6")), ["t.py", "helpers.py"])
    assert not report.gone and not report.missing and not report.missing_files


def test_import_names_map_to_distributions():
    """Import names that differ from their distribution map to it."""
    assert distribution_for("yaml") == "PyYAML"
    assert distribution_for("google.protobuf.message") == "protobuf"
    assert distribution_for("sentencepiece") == "sentencepiece"
    assert distribution_for("tiktoken.load") == "tiktoken"


def test_code_that_does_not_parse_is_an_error_not_a_crash():
    """A model file that is not valid Python is reported with its name."""
    report = check_code([CodeFile("bad.py", "x", 1, "def (:\n")], venv(), ["bad.py"])
    assert report.errors and report.errors[0].startswith("bad.py")


def test_placeholders_are_quoted():
    """Values are shell-quoted; lists become comma-joined words."""
    command = render_command("{python} -m train --model {model} --layers {dflash_target_layer_ids}",
                             {"python": "/v/bin/python", "model": "/m/a b;rm -rf ~", "dflash_target_layer_ids": [1, 12]})
    assert command == "/v/bin/python -m train --model '/m/a b;rm -rf ~' --layers 1,12"


def test_unknown_placeholder_is_a_usage_error():
    """A placeholder no fact provides is a usage error (exit 2), as is a malformed template."""
    with pytest.raises(UsageError, match="unknown placeholder"):
        command_placeholders("echo {nope}")
    with pytest.raises(UsageError, match="malformed"):
        command_placeholders("echo {python")
    assert command_placeholders("echo {{literal}} {python}") == ["python"]


def test_a_fact_without_value_refuses_to_run():
    """A known placeholder whose fact is missing on this host (no mask token) is an error, not 'None'."""
    with pytest.raises(EnvdoctorError, match="mask_token_id"):
        render_command("train --mask {mask_token_id}", {"mask_token_id": None})
