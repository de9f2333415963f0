"""``envdoctor facts`` output: the JSON document (the contract), a text view, JUnit for CI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from envdoctor.report.envelope import NO_CONFIG, Config, dump_json

#: The keys the text view shows first, in this order; the JSON has them all.
TEXT_KEYS = (
    "host", "python", "model", "architecture", "model_type", "text_model_type", "config_nested_in",
    "hidden_size", "num_hidden_layers", "vocab_size", "kv_lora_rank", "n_routed_experts", "num_experts_per_tok",
    "tokenizer_class", "tokenizer_facts_from", "bos_token_id", "eos_token_id", "eos_token_ids", "pad_token_id",
    "unk_token_id", "mask_token_id", "tokenizer_len", "tokenizer_vocab_size", "vocab_size_difference",
    "special_tokens", "chat_template",
)
#: Long values the text view summarises instead of printing (the JSON has them whole).
SUMMARISED = {"chat_template", "added_tokens", "rendered_chat_template"}


def render_facts_of_hosts(docs: Sequence[Mapping[str, Any]], fmt: str, *, config: Config = NO_CONFIG) -> str:
    """One host: its document as the contract has it. Several: ``{"hosts": [document, ...]}``
    in JSON, one block per host in text, one test suite per host in JUnit."""
    if len(docs) == 1:
        return render_facts(docs[0], fmt, config=config)
    if fmt == "json":
        status = 1 if any(doc.get("problems") for doc in docs) else 0
        return dump_json("facts", status, {"hosts": list(docs)}, sort_keys=True, config=config)
    if fmt == "junit":
        root = ET.Element("testsuites", name="envdoctor facts", tests=str(len(docs)),
                          failures=str(sum(1 for doc in docs if doc.get("problems"))))
        for doc in docs:
            root.append(_suite(doc))
        return ET.tostring(root, encoding="unicode") + "\n"
    return "\n".join(_text(doc) for doc in docs)


def render_facts(doc: Mapping[str, Any], fmt: str, *, config: Config = NO_CONFIG) -> str:
    if fmt == "json":
        return dump_json("facts", 1 if doc.get("problems") else 0, doc, sort_keys=True, config=config)
    if fmt == "junit":
        return _junit(doc)
    return _text(doc)


#: Where the text view names the model; the problems follow at once, before the facts.
_HEAD = ("host", "python", "model")


def _text(doc: Mapping[str, Any]) -> str:
    lines = [f"{key}: {_summary(doc, key) if key in SUMMARISED else _show(doc.get(key))}" for key in TEXT_KEYS if key in doc]
    # A problem (no such folder, a config.json that is not JSON) is what the reader must see
    # first: it is why the facts below are missing.
    head = sum(1 for key in _HEAD if key in doc)
    lines[head:head] = [f"problem: {p}" for p in doc.get("problems", [])]
    for group in ("dflash", "eagle3"):
        for key, value in (doc.get(group) or {}).items():
            lines.append(f"{group}.{key}: {_show(value)}")
    lines += [f"unknown: {key}: {why}" for key, why in (doc.get("unknown") or {}).items()]
    return "\n".join(lines) + "\n"


def _summary(doc: Mapping[str, Any], key: str) -> str:
    value = doc.get(key)
    if value is None or value is False:
        return "-"
    if isinstance(value, dict):
        return f"{len(value)} named templates ({', '.join(value)})" + _source(doc)
    return f"{len(str(value))} characters" + _source(doc)


def _source(doc: Mapping[str, Any]) -> str:
    return f" from {doc['chat_template_source']}" if doc.get("chat_template_source") else ""


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _junit(doc: Mapping[str, Any]) -> str:
    problems = list(doc.get("problems", []))
    root = ET.Element("testsuites", name="envdoctor facts", tests="1", failures=str(min(1, len(problems))))
    root.append(_suite(doc))
    return ET.tostring(root, encoding="unicode") + "\n"


def _suite(doc: Mapping[str, Any]) -> ET.Element:
    problems = list(doc.get("problems", []))
    suite = ET.Element("testsuite", name=str(doc.get("host")), tests="1", failures=str(min(1, len(problems))))
    case = ET.SubElement(suite, "testcase", classname=str(doc.get("host")), name=f"facts {doc.get('model')}")
    if problems:
        ET.SubElement(case, "failure", message=problems[0]).text = "\n".join(problems)
    ET.SubElement(case, "system-out").text = json.dumps(doc, sort_keys=True)
    return suite
