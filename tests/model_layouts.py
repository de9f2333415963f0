"""A corpus of model folders in the common layouts, written with the ``tokenizers`` library.

Run as a script by a venv that has ``tokenizers`` and ``sentencepiece``
(``python tests/model_layouts.py ROOT``):
the test process itself needs neither tokenizers nor transformers. Vocabularies are filler
tokens, but every special token sits at the id the real model gives it, with the real
structure around it: Llama 3.1 (256 reserved special tokens, an eos list), Qwen3 (config
vocab_size above the tokenizer: unnamed padding slots), DeepSeek-V3 (placeholder tokens,
MLA/MoE fields, no added_tokens_decoder), Gemma 3 (nested text_config without vocab_size,
``<unusedN>``), Mistral v0.3 (``[control_N]``) and tekken (``<SPECIAL_N>``), Qwen2.5-VL (vision_config beside
text_config, media ids in config.json, chat_template.jinja), Llama 2 and Mistral v0.3 with only a
sentencepiece ``tokenizer.model`` (Mistral's [control_N] as control pieces). No weights, no hub.

``build`` also writes ``ROOT/expect.json`` (outside the model folders): per layout, what the
test expects beyond transformers' own answer (the mask candidate and the rule that chose it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Layout name -> builder; the names are folder names.
LAYOUTS: dict = {}


def layout(fn):
    LAYOUTS[fn.__name__.replace("_", "-")] = fn
    return fn


def _byte_alphabet() -> list[str]:
    """The 256 characters GPT-2's byte-level BPE uses for single bytes."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_tokenizer(folder: Path, base_size: int, low: dict[int, str], added: list[tuple[int, str, bool]],
                    *, byte_level: bool = True) -> None:
    """tokenizer.json: a BPE vocab of ``base_size`` ids (``low`` names some of them), then ``added``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab: dict[str, int] = {}
    for idx, content in low.items():
        vocab[content] = idx
    fill = iter(_byte_alphabet())
    n = 0
    for idx in range(base_size):
        if idx in low:
            continue
        token = next(fill, None) or f"tok{n}"
        n += 1
        vocab[token] = idx
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
    # Tokens already in the vocab keep their vocab id; new ones are appended in order.
    specials = [(i, c, s) for i, c, s in sorted(added)]
    for idx, content, special in specials:
        token = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        got = tok.token_to_id(content)
        if got != idx:
            raise SystemExit(f"{folder.name}: {content} got id {got}, not {idx}")
    tok.save(str(folder / "tokenizer.json"))


def decoder_entries(added: list[tuple[int, str, bool]]) -> dict[str, dict]:
    return {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": s} for i, c, s in sorted(added)}


def dump(folder: Path, name: str, data) -> None:
    (folder / name).write_text(json.dumps(data, indent=2, ensure_ascii=False))


LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- if message.role == 'ipython' %}{{- '<|python_tag|>' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
    "{#- <|eom_id|> ends a tool call turn #}"
)


@layout
def llama3_1(folder: Path) -> dict:
    names = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128004: "<|finetune_right_pad_id|>",
             128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128008: "<|eom_id|>",
             128009: "<|eot_id|>", 128010: "<|python_tag|>"}
    added, reserved = [], 0
    for idx in range(128000, 128256):
        if idx in names:
            added.append((idx, names[idx], True))
        else:
            added.append((idx, f"<|reserved_special_token_{reserved}|>", True))
            reserved += 1
    write_tokenizer(folder, 128000, {}, added)
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": decoder_entries(added), "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
        "chat_template": LLAMA3_TEMPLATE, "clean_up_tokenization_spaces": True, "model_max_length": 131072,
        "model_input_names": ["input_ids", "attention_mask"], "tokenizer_class": "PreTrainedTokenizerFast"})
    dump(folder, "special_tokens_map.json", {"bos_token": {"content": "<|begin_of_text|>"},
                                             "eos_token": {"content": "<|eot_id|>"}})
    dump(folder, "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}})
    dump(folder, "generation_config.json", {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
                                            "do_sample": True, "temperature": 0.6, "top_p": 0.9})
    return {"mask_candidate": 128002, "mask_source": "reserved", "candidates": 248}


QWEN_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
              "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
              "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
              "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
QWEN3_EXTRA = ["<tool_response>", "</tool_response>", "<think>", "</think>"]
QWEN_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def qwen_added(names: list[str]) -> list[tuple[int, str, bool]]:
    # Qwen marks its tool/fim/think tokens as not special: they stay in decoded text.
    not_special = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                   "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", *QWEN3_EXTRA}
    return [(151643 + i, name, name not in not_special) for i, name in enumerate(names)]


@layout
def qwen3(folder: Path) -> dict:
    added = qwen_added(QWEN_ADDED + QWEN3_EXTRA)
    write_tokenizer(folder, 151643, {}, added)
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": decoder_entries(added), "additional_special_tokens": [
            "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
            "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
            "<|video_pad|>"],
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "chat_template": QWEN_TEMPLATE, "errors": "replace", "model_max_length": 131072, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer"})
    dump(folder, "config.json", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645, "tie_word_embeddings": False,
        "max_position_embeddings": 40960, "rope_theta": 1000000, "torch_dtype": "bfloat16"})
    dump(folder, "generation_config.json", {"bos_token_id": 151643, "eos_token_id": [151645, 151643],
                                            "pad_token_id": 151643, "do_sample": True, "temperature": 0.6})
    return {"mask_candidate": 151669, "mask_source": "unnamed", "candidates": 151936 - 151669}


DEEPSEEK_TAIL = ["<think>", "</think>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜User｜>", "<｜Assistant｜>",
                 "<|EOT|>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                 "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
                 "<｜tool▁sep｜>"]
DEEPSEEK_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{{ '<｜User｜>' + message['content'] }}{%- else %}{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}"
)


@layout
def deepseek_v3(folder: Path) -> dict:
    low = {0: "<｜begin▁of▁sentence｜>", 1: "<｜end▁of▁sentence｜>", 2: "<｜▁pad▁｜>"}
    names = [f"<｜place▁holder▁no▁{i}｜>" for i in range(798)] + DEEPSEEK_TAIL
    added = [(i, c, True) for i, c in low.items()] + [(128000 + i, c, True) for i, c in enumerate(names)]
    write_tokenizer(folder, 128000, low, added)

    def token(content: str) -> dict:
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True, "rstrip": False,
                "single_word": False}

    # DeepSeek-V3 writes no added_tokens_decoder: transformers takes tokenizer.json's added tokens.
    dump(folder, "tokenizer_config.json", {
        "add_bos_token": True, "add_eos_token": False, "bos_token": token(low[0]), "eos_token": token(low[1]),
        "pad_token": token(low[1]), "unk_token": None, "legacy": True, "model_max_length": 131072,
        "clean_up_tokenization_spaces": False, "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizerFast",
        "chat_template": DEEPSEEK_TEMPLATE})
    dump(folder, "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "vocab_size": 129280, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4,
        "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    dump(folder, "generation_config.json", {"bos_token_id": 0, "eos_token_id": 1, "do_sample": True,
                                            "temperature": 0.6, "top_p": 0.95})
    return {"mask_candidate": 128000, "mask_source": "reserved", "candidates": 798 + 129280 - 128815}


GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{{ '<start_of_turn>' + (message['role'] | replace('assistant', 'model')) + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}{%- else -%}"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


@layout
def gemma3(folder: Path) -> dict:
    low = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 5: "[@BOS@]"}
    low.update({6 + i: f"<unused{i}>" for i in range(99)})
    low.update({105: "<start_of_turn>", 106: "<end_of_turn>", 255999: "<start_of_image>", 256000: "<end_of_image>"})
    added = [(i, c, True) for i, c in low.items()] + [(262144, "<image_soft_token>", True)]
    write_tokenizer(folder, 262144, low, added, byte_level=False)
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": decoder_entries(added), "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
        "unk_token": "<unk>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>", "extra_special_tokens": {
            "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
        "chat_template": GEMMA_TEMPLATE, "model_max_length": 1000000000000000019884624838656,
        "spaces_between_special_tokens": False, "tokenizer_class": "GemmaTokenizer", "use_default_system_prompt": False})
    # The processor's template: AutoTokenizer does not read this file.
    dump(folder, "chat_template.json", {"chat_template": GEMMA_TEMPLATE})
    dump(folder, "config.json", {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
        "eos_token_id": [1, 106], "mm_tokens_per_image": 256, "initializer_range": 0.02,
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                        "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
                        "head_dim": 256, "sliding_window": 1024, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 896,
                          "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27,
                          "patch_size": 14, "vision_use_head": False}})
    dump(folder, "generation_config.json", {"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
                                            "cache_implementation": "hybrid", "top_k": 64, "top_p": 0.95})
    return {"mask_candidate": 4, "mask_source": "tokenizer", "candidates": None}


MISTRAL_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{%- if tools is not none and loop.last %}{{- '[AVAILABLE_TOOLS] ' + tools | tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{{- '[INST] ' + message['content'] + '[/INST]' }}{%- elif message['role'] == 'tool' %}"
    "{{- '[TOOL_RESULTS] ' + message['content'] + '[/TOOL_RESULTS]' }}{%- elif message.tool_calls is defined %}"
    "{{- '[TOOL_CALLS] ' + message.tool_calls | tojson + eos_token }}{%- else %}{{- ' ' + message['content'] + eos_token }}"
    "{%- endif %}{%- endfor %}"
)


MISTRAL_NAMES = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[TOOL_CALLS]", 6: "[AVAILABLE_TOOLS]",
                 7: "[/AVAILABLE_TOOLS]", 8: "[TOOL_RESULTS]", 9: "[/TOOL_RESULTS]"}


@layout
def mistral_v0_3(folder: Path) -> dict:
    low = dict(MISTRAL_NAMES)
    low.update({10 + i: f"[control_{8 + i}]" for i in range(761)})
    added = [(i, c, True) for i, c in low.items()]
    write_tokenizer(folder, 32768, low, added, byte_level=False)
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": decoder_entries(added), "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False, "model_max_length": 1000000,
        "spaces_between_special_tokens": False, "tokenizer_class": "LlamaTokenizer", "chat_template": MISTRAL_TEMPLATE})
    dump(folder, "special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    dump(folder, "config.json", {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32768,
        "bos_token_id": 1, "eos_token_id": 2, "sliding_window": None, "rope_theta": 1000000.0,
        "tie_word_embeddings": False})
    dump(folder, "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    return {"mask_candidate": 10, "mask_source": "reserved", "candidates": 761}


TEKKEN_NAMED = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]


@layout
def mistral_tekken(folder: Path) -> dict:
    """Mistral-Nemo style (tekken converted to tokenizer.json): 1000 special ids, <SPECIAL_N> unused."""
    low = {i: (TEKKEN_NAMED[i] if i < len(TEKKEN_NAMED) else f"<SPECIAL_{i}>") for i in range(1000)}
    added = [(i, c, True) for i, c in low.items()]
    write_tokenizer(folder, 131072, low, added)
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": decoder_entries(added), "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "clean_up_tokenization_spaces": False, "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": MISTRAL_TEMPLATE})
    dump(folder, "config.json", {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336,
        "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 131072, "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 1024000})
    dump(folder, "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    return {"mask_candidate": 20, "mask_source": "reserved", "candidates": 980}


QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@layout
def qwen2_5_vl(folder: Path) -> dict:
    added = qwen_added(QWEN_ADDED)
    write_tokenizer(folder, 151643, {}, added)
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": decoder_entries(added), "additional_special_tokens": [
            "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
            "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
            "<|video_pad|>"],
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "errors": "replace", "model_max_length": 131072, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "processor_class": "Qwen2_5_VLProcessor"})
    # The template in its own file, as transformers now saves it.
    (folder / "chat_template.jinja").write_text(QWEN_VL_TEMPLATE)
    dump(folder, "config.json", {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
        "vision_end_token_id": 151653, "vision_token_id": 151654, "tie_word_embeddings": False,
        "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": 3584, "intermediate_size": 18944,
                        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                        "vocab_size": 152064, "bos_token_id": 151643, "eos_token_id": 151645,
                        "max_position_embeddings": 128000, "rope_theta": 1000000.0},
        "vision_config": {"model_type": "qwen2_5_vl", "depth": 32, "hidden_size": 1280, "out_hidden_size": 3584,
                          "num_heads": 16, "patch_size": 14, "spatial_merge_size": 2}})
    dump(folder, "generation_config.json", {"bos_token_id": 151643, "eos_token_id": [151645, 151643],
                                            "pad_token_id": 151643, "do_sample": True, "temperature": 0.1})
    return {"mask_candidate": 151665, "mask_source": "unnamed", "candidates": 152064 - 151665}


LLAMA2_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'] "
    "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)
SPM_TEXT = [
    "The quick brown fox jumps over the lazy dog.", "A tokenizer turns text into ids and back again.",
    "Speculative decoding drafts tokens that the target model verifies.", "Mask tokens need an embedding row.",
] * 50


@layout
def llama2_spm(folder: Path) -> dict:
    """Only a sentencepiece tokenizer.model (no tokenizer.json): transformers converts it at load."""
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_TEXT), model_prefix=str(folder / "tokenizer"), vocab_size=400, model_type="bpe",
        byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, hard_vocab_limit=False, minloglevel=2)
    (folder / "tokenizer.vocab").unlink()
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model")).get_piece_size()
    specials = {0: "<unk>", 1: "<s>", 2: "</s>"}
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for i, c in specials.items()},
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": None, "legacy": False, "model_max_length": 4096, "tokenizer_class": "LlamaTokenizer",
        "chat_template": LLAMA2_TEMPLATE})
    dump(folder, "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": pieces,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    dump(folder, "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    # Every row has a token and none is reserved: the vocabulary must grow.
    return {"mask_candidate": None, "mask_source": "none", "candidates": 0}


@layout
def mistral_spm(folder: Path) -> dict:
    """Mistral v0.3 as a sentencepiece tokenizer.model only: [INST]... and [control_N] are control pieces 3..770."""
    import sentencepiece

    controls = [MISTRAL_NAMES[i] for i in range(3, 10)] + [f"[control_{8 + i}]" for i in range(761)]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_TEXT), model_prefix=str(folder / "tokenizer"), vocab_size=1100, model_type="bpe",
        byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, control_symbols=controls,
        hard_vocab_limit=False, minloglevel=2)
    (folder / "tokenizer.vocab").unlink()
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model")).get_piece_size()
    specials = {0: "<unk>", 1: "<s>", 2: "</s>", **{3 + i: c for i, c in enumerate(controls)}}
    dump(folder, "tokenizer_config.json", {
        "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for i, c in specials.items()},
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "legacy": False, "model_max_length": 32768, "tokenizer_class": "LlamaTokenizer", "chat_template": MISTRAL_TEMPLATE})
    dump(folder, "config.json", {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": pieces,
        "bos_token_id": 1, "eos_token_id": 2})
    dump(folder, "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    return {"mask_candidate": 10, "mask_source": "reserved", "candidates": 761}


def build(root: Path, names: list[str] | None = None) -> dict[str, Path]:
    built, expect = {}, {}
    for name, fn in LAYOUTS.items():
        if names and name not in names:
            continue
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        expect[name] = fn(folder)
        built[name] = folder
    (root / "expect.json").write_text(json.dumps(expect, indent=2))
    return built


if __name__ == "__main__":
    for name, path in build(Path(sys.argv[1]), sys.argv[2:]).items():
        print(name, path)
