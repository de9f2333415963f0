"""Model directories imitating Kimi K2.5/K2.6 (and a flat Qwen-style model), built by tests.

No weights and no hub: config.json with the architecture nested under ``text_config``,
``tokenizer_config.json`` whose ``auto_map`` points to our own tiktoken-based tokenizer
class, a ``tiktoken.model`` ranks file of 163584 entries (so the special ids are the real
ones), and a chat template. The tokenizer module writes a mark file when it is imported,
so a test can prove that without consent the model's code never ran.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

NUM_RANKS = 163584
VOCAB_SIZE = 163840
NAMED_SPECIAL = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: "<|im_end|>",
    163587: "<|im_user|>",
    163588: "<|im_assistant|>",
    163590: "<|start_header_id|>",
    163591: "<|end_header_id|>",
    163593: "[EOT]",
    163594: "<|im_system|>",
    163601: "<|im_middle|>",
    163838: "[UNK]",
    163839: "[PAD]",
}
#: The first special id no named token uses: the mask candidate envdoctor should pick.
FIRST_RESERVED = 163589
#: More names Kimi K2.6's tokenizer_config.json gives (14 named, 242 unnamed special ids).
K26_NAMED = {163595: "<|tool_calls_section_begin|>", 163596: "<|tool_calls_section_end|>"}
#: Ids config.json names that no token of the tokenizer files names (Kimi K2.5's media placeholder).
CONFIG_ONLY_IDS = {"media_placeholder_token_id": 163605}

KIMI_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- elif message['role'] == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- else -%}<|im_system|>system<|im_middle|>{%- endif -%}"
    "{{ message['content'] }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)

# Our own tiktoken-based tokenizer (not Kimi's code): the shape of tokenization_kimi.py.
TOKENIZER_SOURCE = '''\
import os
{legacy_import}
from typing import Dict, List, Optional

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from transformers import PreTrainedTokenizer

with open({mark!r}, "a") as _mark:
    _mark.write("imported\\n")

PAT_STR = r"""[^\\r\\n\\p{{L}}\\p{{N}}]?\\p{{L}}+|\\p{{N}}{{1,3}}| ?[^\\s\\p{{L}}\\p{{N}}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"""
NUM_RESERVED_SPECIAL = 256


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {{"vocab_file": "tiktoken.model"}}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, bos_token="[BOS]", eos_token="[EOS]", unk_token="[UNK]",
                 pad_token="[PAD]", added_tokens_decoder=None, **kwargs):
        ranks = load_tiktoken_bpe(vocab_file)
        base = len(ranks)
        decoder = added_tokens_decoder or {{}}
        names = {{i: "<|reserved_token_%d|>" % i for i in range(base, base + NUM_RESERVED_SPECIAL)}}
        for idx, token in decoder.items():
            names[int(idx)] = str(token)
        self.special_tokens = {{name: idx for idx, name in names.items()}}
        self.model = tiktoken.Encoding(name=os.path.basename(vocab_file), pat_str=PAT_STR,
                                       mergeable_ranks=ranks, special_tokens=self.special_tokens)
        self.n_words = self.model.n_vocab
        self.decoder = {{rank: token for token, rank in ranks.items()}}
        self.decoder.update({{idx: name.encode() for name, idx in self.special_tokens.items()}})
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token,
                         pad_token=pad_token, added_tokens_decoder=decoder, **kwargs)

    @property
    def vocab_size(self) -> int:
        return self.n_words

    def get_vocab(self) -> Dict[str, int]:
        vocab = {{self._convert_id_to_token(i): i for i in range(self.n_words)}}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text, **kwargs) -> List[str]:
        return [self._convert_id_to_token(i) for i in self.model.encode(text, allowed_special="all")]

    def _convert_token_to_id(self, token: str) -> int:
        if token in self.special_tokens:
            return self.special_tokens[token]
        return self.model.encode_single_token(token.encode("latin-1"))

    def _convert_id_to_token(self, index: int) -> str:
        return self.decoder[index].decode("latin-1")

    def convert_tokens_to_string(self, tokens: List[str]) -> str:
        return b"".join(t.encode("latin-1") for t in tokens).decode("utf-8", "replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: Optional[str] = None):
        return ()
'''

LEGACY_IMPORT = "from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode"


def write_ranks(path: Path, count: int = NUM_RANKS) -> None:
    """`base64(token) rank` lines: the 256 single bytes, then distinct multi-byte tokens."""
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)]
    lines += [f"{base64.b64encode(b't%d' % i).decode()} {256 + i}\n" for i in range(count - 256)]
    path.write_text("".join(lines))


def kimi_config() -> dict:
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "auto_map": {
            "AutoConfig": "configuration_kimi_k25.KimiK25Config",
            "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
        },
        "text_config": {
            "model_type": "kimi_k2",
            "hidden_size": 7168,
            "num_hidden_layers": 61,
            "vocab_size": VOCAB_SIZE,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "kv_lora_rank": 512,
            "q_lora_rank": 1536,
            "n_routed_experts": 384,
            "num_experts_per_tok": 8,
            "bos_token_id": 163584,
            "eos_token_id": 163585,
        },
        "vision_config": {"model_type": "moonvit"},
    }


def kimi_tokenizer_config(chat_template: bool = True, named_only: bool = False) -> dict:
    """``named_only``: as Kimi K2.6 ships it, added_tokens_decoder lists only the named ids
    (the tokenizer's code names the others <|reserved_token_ID|>)."""
    decoder = {}
    named = {**NAMED_SPECIAL, **K26_NAMED} if named_only else NAMED_SPECIAL
    for idx in range(NUM_RANKS, VOCAB_SIZE):
        if named_only and idx not in named:
            continue
        content = named.get(idx, f"<|reserved_token_{idx - NUM_RANKS}|>")
        decoder[str(idx)] = {"content": content, "lstrip": False, "normalized": False,
                             "rstrip": False, "single_word": False, "special": True}
    config = {
        "added_tokens_decoder": decoder,
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "tokenizer_class": "TikTokenTokenizer",
        "model_max_length": 262144,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template:
        config["chat_template"] = KIMI_CHAT_TEMPLATE
    return config


def _model_code_stub(name: str, cls: str) -> str:
    return f'"""Stand-in for {name}: never imported by these tests."""\nfrom transformers import PretrainedConfig\n\n\nclass {cls}(PretrainedConfig):\n    model_type = "kimi_k25"\n'


def build_kimi(path: Path, *, mark: Path, ranks_source: Path | None = None, legacy_import: bool = False,
               chat_template: bool = True, ranks: bool = True, named_only: bool = False,
               model_code: bool = True) -> Path:
    """A Kimi K2.5/K2.6-shaped model folder; ``ranks_source`` reuses an already written ranks file.

    ``named_only``: the K2.6 layout (only named special ids in added_tokens_decoder, and
    config.json naming media ids); ``model_code=False`` leaves out the modeling files
    auto_map names.
    """
    path.mkdir(parents=True, exist_ok=True)
    config = kimi_config()
    if named_only:
        config.update(CONFIG_ONLY_IDS, pad_token_id=163839, bos_token_id=163584, eos_token_id=163585)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "tokenizer_config.json").write_text(json.dumps(kimi_tokenizer_config(chat_template, named_only), indent=2))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 163584, "eos_token_id": 163585}))
    (path / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]"}))
    (path / "tokenization_kimi.py").write_text(TOKENIZER_SOURCE.format(
        mark=str(mark), legacy_import=LEGACY_IMPORT if legacy_import else ""))
    if model_code:
        (path / "configuration_kimi_k25.py").write_text(_model_code_stub("configuration_kimi_k25", "KimiK25Config"))
        (path / "modeling_kimi_k25.py").write_text(_model_code_stub("modeling_kimi_k25", "KimiK25ForConditionalGeneration"))
    if ranks:
        if ranks_source is not None:
            shutil.copyfile(ranks_source, path / "tiktoken.model")
        else:
            write_ranks(path / "tiktoken.model")
    return path


def build_flat(path: Path) -> Path:
    """A flat Qwen/Llama-style model: everything at the top of config.json, no model code."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": 36, "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 8,
    }))
    decoder = {"151643": {"content": "<|endoftext|>", "special": True},
               "151644": {"content": "<|im_start|>", "special": True},
               "151645": {"content": "<|im_end|>", "special": True}}
    (path / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": decoder, "tokenizer_class": "Qwen2Tokenizer",
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
    }))
    return path


def build_broken_config(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"model_type": "kimi_k25", "text_config": {')
    return path
