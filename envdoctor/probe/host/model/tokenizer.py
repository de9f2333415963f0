# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "models" section: a tokenizer.json (tens of MB for a 200k vocabulary) is
# reduced here to what the controller needs, so that only a few KB cross the connection:
# the model's kind and size, whether its ids are dense, the added tokens with their ids,
# the ids of the token strings the tokenizer's config files name, and the vocabulary
# entries that look reserved (<unusedN>, [control_N], ...). Shapes are validated: a file
# that is not what a tokenizer.json is becomes an "error", never a crash of the probe.

import json
import os
import re

from envdoctor.probe.host.core import read_regular

#: A tokenizer.json above this is not parsed (the largest real ones are ~35 MB).
MODEL_MAX_TOKENIZER_JSON_BYTES = 128 * 1024 * 1024
#: A chat template file above this is not shipped.
MODEL_MAX_TEMPLATE_BYTES = 1024 * 1024
#: At most this many added tokens, reserved-looking entries and id gaps are shipped.
MODEL_MAX_ADDED = 65536
MODEL_MAX_RESERVED = 16384
MODEL_MAX_GAPS = 1024
MODEL_MAX_TEMPLATES = 16
#: Added tokens are short strings; more text than this in them is not a tokenizer.
MODEL_MAX_ADDED_TEXT = 8 * 1024 * 1024

#: Names vocabularies give to ids kept for later use: candidates for a drafter's mask token.
#: (Not T5's <extra_id_N>: those sentinels are used in pretraining.)
RESERVED_TOKEN_PATTERN = (
    r"^(<\|reserved_special_token_\d+\|>|<\|reserved_token_\d+\|>|<\|reserved_\d+\|>|<reserved_\d+>"
    r"|\[unused\d+\]|<unused\d+>|\[control_\d+\]|<SPECIAL_\d+>|<\|place\u2581holder\u2581no\u2581\d+\|>"
    r"|<\uff5cplace\u2581holder\u2581no\u2581\d+\uff5c>|<\|extra_\d+\|>)$"
)
RESERVED_TOKEN_RE = re.compile(RESERVED_TOKEN_PATTERN)
#: Keys of tokenizer_config.json / special_tokens_map.json that hold token strings.
TOKEN_LIST_KEYS = ("additional_special_tokens", "extra_special_tokens")


def token_text(value):
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def named_token_strings(json_files):
    """Every token string tokenizer_config.json, special_tokens_map.json and added_tokens.json name."""
    names = set()
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        data = json_files.get(name)
        if not isinstance(data, dict):
            continue
        for key, value in data.items():
            if key.endswith("_token") and token_text(value) is not None:
                names.add(token_text(value))
            elif key in TOKEN_LIST_KEYS:
                items = list(value.values()) if isinstance(value, dict) else value
                for item in items if isinstance(items, list) else []:
                    if token_text(item) is not None:
                        names.add(token_text(item))
        decoder = data.get("added_tokens_decoder")
        if isinstance(decoder, dict):
            for value in decoder.values():
                if token_text(value) is not None:
                    names.add(token_text(value))
    added = json_files.get("added_tokens.json")
    if isinstance(added, dict):
        names.update(k for k in added if isinstance(k, str))
    # The defaults of the tokenizer classes transformers picks for common models.
    names.update(["<unk>", "<s>", "</s>", "<bos>", "<eos>", "<pad>", "<mask>", "<|endoftext|>"])
    return names


def vocab_ids(model):
    """(token -> id) of a tokenizer.json model, or an error string for a malformed one."""
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        for token, idx in vocab.items():
            if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
                return "model.vocab maps %r to %r, not an id" % (token[:40], idx)
        return vocab
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        found = {}
        for idx, item in enumerate(vocab):
            if not (isinstance(item, list) and item and isinstance(item[0], str)):
                return "model.vocab[%d] is not [piece, score]" % idx
            found.setdefault(item[0], idx)
        return found
    return "model.vocab is neither an object nor a list"


def id_gaps(ids, upto):
    """Ranges [a, b) of ids below `upto` that no entry uses (bounded)."""
    gaps = []
    expected = 0
    for idx in sorted(ids):
        if idx > expected:
            gaps.append([expected, idx])
            if len(gaps) >= MODEL_MAX_GAPS:
                return gaps, True
        expected = max(expected, idx + 1)
    if upto > expected:
        gaps.append([expected, upto])
    return gaps, False


def has_byte_level(data):
    """Whether a ByteLevel step appears anywhere in the pre-tokenizer or decoder."""
    stack = [data.get("pre_tokenizer"), data.get("decoder")]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "ByteLevel":
                return True
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(item)
    return False


def reduce_tokenizer_json(path, wanted):
    """What the controller needs of a tokenizer.json, validated; {"error": ...} when it cannot be read."""
    try:
        data = json.loads(read_regular(path, MODEL_MAX_TOKENIZER_JSON_BYTES).decode("utf-8"))
    except OSError as exc:
        return {"error": "cannot read tokenizer.json: %s" % (exc.strerror or exc)}
    except UnicodeDecodeError as exc:
        return {"error": "tokenizer.json is not UTF-8 (byte %d)" % exc.start}
    except (ValueError, RecursionError) as exc:
        return {"error": "tokenizer.json is not valid JSON: %s" % exc}
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return {"error": "tokenizer.json has no model object"}
    model = data["model"]
    vocab = vocab_ids(model)
    if isinstance(vocab, str):
        return {"error": "tokenizer.json: " + vocab}
    added_raw = data.get("added_tokens") or []
    if not isinstance(added_raw, list):
        return {"error": "tokenizer.json: added_tokens is not a list"}
    added = []
    text_bytes = 0
    for item in added_raw:
        if not isinstance(item, dict) or not isinstance(item.get("content"), str) \
                or isinstance(item.get("id"), bool) or not isinstance(item.get("id"), int):
            return {"error": "tokenizer.json: an added token lacks an integer id or a content string"}
        text_bytes += len(item["content"])
        if text_bytes > MODEL_MAX_ADDED_TEXT:
            return {"error": "tokenizer.json: its added tokens hold more than %d characters" % MODEL_MAX_ADDED_TEXT}
        added.append([item["id"], item["content"], bool(item.get("special"))])
    padding = data.get("padding")
    result = summarize_vocab(vocab, added, wanted)
    result.update(
        model_type=model.get("type") if isinstance(model.get("type"), str) else None,
        byte_level=has_byte_level(data),
        unk_token=model.get("unk_token") if isinstance(model.get("unk_token"), str) else None,
        padding_pad_token=padding.get("pad_token") if isinstance(padding, dict) else None,
    )
    return result


def summarize_vocab(vocab, added, wanted):
    """The few KB the controller needs of a vocabulary (token -> id) and its added tokens."""
    # Whether each added token is also a vocabulary entry decides len(tokenizer).
    wanted = set(wanted)
    wanted.update(item[1] for item in added)
    ids = set(vocab.values())
    count = len(vocab)
    dense = len(ids) == count and (not ids or (min(ids) == 0 and max(ids) == count - 1))
    gaps, gaps_truncated = ([], False) if dense else id_gaps(ids, 0)
    reserved = []
    for token, idx in vocab.items():
        # Every reserved name starts with "<" or "[": the cheap test spares the regex 99% of a vocabulary.
        if token[:1] in ("<", "[") and len(token) < 64 and RESERVED_TOKEN_RE.match(token):
            reserved.append([idx, token])
    reserved.sort()
    return {
        "vocab_count": count,
        "max_id": max(ids) if ids else -1,
        "gaps": gaps,
        "gaps_truncated": gaps_truncated,
        "added": sorted(added)[:MODEL_MAX_ADDED],
        "added_truncated": len(added) > MODEL_MAX_ADDED,
        "lookup": dict((t, vocab[t]) for t in wanted if t in vocab),
        "reserved": reserved[:MODEL_MAX_RESERVED],
        "reserved_truncated": len(reserved) > MODEL_MAX_RESERVED,
    }


def read_template_file(path):
    """(text, error) of a chat template file, bounded."""
    try:
        return read_regular(path, MODEL_MAX_TEMPLATE_BYTES).decode("utf-8"), None
    except OSError as exc:
        return None, "cannot read %s: %s" % (os.path.basename(path), exc.strerror or exc)
    except UnicodeDecodeError as exc:
        return None, "%s is not UTF-8 (byte %d)" % (os.path.basename(path), exc.start)


def chat_template_files(model_dir):
    """chat_template.jinja and additional_chat_templates/*.jinja (what AutoTokenizer reads), as text."""
    found = {}
    errors = {}
    names = ["chat_template.jinja"]
    extra = os.path.join(model_dir, "additional_chat_templates")
    if os.path.isdir(extra):
        names += sorted("additional_chat_templates/" + n for n in os.listdir(extra) if n.endswith(".jinja"))
    for name in names[:MODEL_MAX_TEMPLATES]:
        path = os.path.join(model_dir, name)
        if not os.path.lexists(path):
            continue  # (one that is there but no regular file is refused, and named, by the reader)
        text, error = read_template_file(path)
        if error:
            errors[name] = error
        else:
            found[name] = text
    return found, errors
