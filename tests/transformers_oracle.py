"""What real transformers loads from model folders: run by a venv's interpreter, prints JSON.

``python tests/transformers_oracle.py [--trust] DIR...``. For each folder: the tokenizer as
``AutoTokenizer.from_pretrained(dir)`` gives it (ids, length, vocab size, added tokens, chat
template), the config as ``AutoConfig`` gives it (the text config's fields, the token ids),
and ``GenerationConfig``'s token ids. Errors are reported per part, never raised.
"""

import json
import sys

FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
          "kv_lora_rank", "q_lora_rank", "n_routed_experts", "num_experts_per_tok")


def describe_tokenizer(tok):
    out = {"class": type(tok).__name__, "len": len(tok), "vocab_size": tok.vocab_size,
           "chat_template": tok.chat_template}
    for role in ("bos", "eos", "pad", "unk", "mask"):
        out[role + "_token"] = None if getattr(tok, role + "_token") is None else str(getattr(tok, role + "_token"))
        out[role + "_token_id"] = getattr(tok, role + "_token_id")
    out["added_tokens"] = {str(i): [str(t), bool(t.special)] for i, t in tok.added_tokens_decoder.items()}
    out["all_special_ids"] = sorted(tok.all_special_ids)
    return out


def load(path, trust):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    result = {}
    try:
        result["tokenizer"] = describe_tokenizer(AutoTokenizer.from_pretrained(path, trust_remote_code=trust))
    except Exception as exc:
        result["tokenizer"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        text = config.get_text_config()
        result["config"] = {name: getattr(text, name, None) for name in FIELDS}
        result["config"]["model_type"] = config.model_type
        result["config"]["text_model_type"] = text.model_type
        for role in ("bos", "eos", "pad"):
            result["config"][role + "_token_id"] = getattr(text, role + "_token_id", None)
    except Exception as exc:
        result["config"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        gen = GenerationConfig.from_pretrained(path)
        result["generation"] = {r + "_token_id": getattr(gen, r + "_token_id") for r in ("bos", "eos", "pad")}
    except Exception as exc:
        result["generation"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    return result


if __name__ == "__main__":
    args = sys.argv[1:]
    trust = "--trust" in args
    dirs = [a for a in args if a != "--trust"]
    print(json.dumps({d: load(d, trust) for d in dirs}, default=str))
