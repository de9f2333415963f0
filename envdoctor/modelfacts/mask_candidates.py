"""Ids a DFlash drafter can use as its mask token: in the embedding, used by nothing.

A candidate is a token the vocabulary reserves for later (``<|reserved_special_token_N|>``,
``<|reserved_token_N|>``, ``<unusedN>``, ``[control_N]``, DeepSeek's placeholders ...) or an
id the embedding has a row for but no token of the tokenizer names (Qwen pads its
embedding to 151936 rows for 151669 tokens; Kimi's files name 14 of its 256 special ids).
Never bos/eos/pad/unk, never a token the chat template writes, never an id that config.json
or generation_config.json names (``image_token_id``, ``media_placeholder_token_id``, ...):
a drafter trained on an id the model already uses learns the wrong thing, and a pad token
costs acceptance length. Pure functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from envdoctor.probe.host.model.tokenizer import RESERVED_TOKEN_PATTERN

RESERVED_TOKEN = re.compile(RESERVED_TOKEN_PATTERN)
#: Keys of config.json / generation_config.json whose integers are token ids.
ID_KEY = re.compile(r"(_id|_ids|_index|_indices)$")
#: How deep a config is walked for ids, and how many embedding rows are examined at most.
MAX_DEPTH = 8
MAX_ROWS = 16 * 1024 * 1024


def named_ids(*configs: Any) -> dict[int, str]:
    """id -> the config key that names it, for every ``*_id(s)``/``*_index`` key, nested too."""
    found: dict[int, str] = {}

    def walk(value: Any, path: str, depth: int, is_id: bool) -> None:
        if depth > MAX_DEPTH:
            return
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key), depth + 1, bool(ID_KEY.search(str(key))))
        elif isinstance(value, list):
            for inner in value:
                walk(inner, path, depth + 1, is_id)
        elif is_id and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            found.setdefault(value, path)

    for config in configs:
        walk(config, "", 0, False)
    return found


@dataclass(frozen=True)
class Slot:
    token_id: int
    #: The token's text, or the name the tokenizer's code gives an unnamed id, or None.
    name: str | None
    #: "reserved" (a token named for later use) or "unnamed" (an embedding row no token names).
    kind: str


@dataclass(frozen=True)
class CandidateInput:
    rows: int | None
    rows_from: str
    taken: Mapping[int, str]
    template: str
    added: Mapping[int, str]
    reserved_vocab: Mapping[int, str]
    base_size: int | None
    gaps: tuple[tuple[int, int], ...] = ()
    unnamed_format: str | None = None


def reserved_slots(inp: CandidateInput) -> Iterator[Slot]:
    tokens = dict(inp.reserved_vocab)
    tokens.update(inp.added)
    for token_id in sorted(tokens):
        content = tokens[token_id]
        if inp.rows is not None and token_id >= inp.rows:
            continue  # no embedding row for it
        if token_id in inp.taken or not RESERVED_TOKEN.match(content) or content in inp.template:
            continue
        yield Slot(token_id, content, "reserved")


def unnamed_slots(inp: CandidateInput) -> Iterator[Slot]:
    """Rows below ``rows`` that neither the base vocabulary nor an added token gives a token."""
    if inp.rows is None or inp.base_size is None:
        return
    rows = min(inp.rows, MAX_ROWS)
    ids = [i for a, b in inp.gaps for i in range(a, min(b, rows))] + list(range(inp.base_size, rows))
    for token_id in ids:
        if token_id in inp.added or token_id in inp.taken:
            continue
        name = inp.unnamed_format.format(id=token_id) if inp.unnamed_format else None
        if name is not None and name in inp.template:
            continue
        yield Slot(token_id, name, "unnamed")


@dataclass(frozen=True)
class Candidates:
    first: Slot | None
    reserved: int
    unnamed: int
    #: Why unnamed slots could not be counted, when they could not.
    unnamed_unknown: str | None = None

    @property
    def count(self) -> int:
        return self.reserved + self.unnamed


def find_candidates(inp: CandidateInput) -> Candidates:
    """The first reserved token (else the first unnamed row), and how many of each there are."""
    reserved = list(reserved_slots(inp))
    unnamed = list(unnamed_slots(inp))
    first = reserved[0] if reserved else (unnamed[0] if unnamed else None)
    why = None
    if inp.rows is None:
        why = "the number of embedding rows is not known (no vocab_size from config.json)"
    elif inp.base_size is None:
        why = "which ids the tokenizer gives a token is not known without tokenizer.json or a ranks file"
    return Candidates(first, len(reserved), len(unnamed), why)


def explain(c: Candidates, inp: CandidateInput) -> str:
    """Why the first candidate was chosen, and how many there are."""
    slot = c.first
    counts = f"{c.count} candidate(s): {c.reserved} reserved token(s), {c.unnamed} unnamed row(s)"
    if slot is None and c.unnamed_unknown:
        return (f"no mask token and no unused reserved token; whether the embedding has rows no token names is "
                f"not known: {c.unnamed_unknown}")
    if slot is None:
        return ("no mask token and no unused reserved or unnamed id (bos/eos/pad/unk, the chat template's tokens "
                "and the ids config.json names excluded): the vocabulary must grow by one token")
    if slot.kind == "reserved":
        return f"no mask token; {slot.name} ({slot.token_id}) is reserved and nothing uses it; {counts}"
    named = f" (the tokenizer's code calls it {slot.name})" if slot.name else ""
    return (f"no mask token; id {slot.token_id} has an embedding row ({inp.rows_from}) that no token of the "
            f"tokenizer's files names{named}; {counts}")
