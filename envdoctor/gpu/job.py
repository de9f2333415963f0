"""What a stage's command asks of the node: how many GPUs, what share of each GPU's memory,
and the environment it sets for itself (``CUDA_VISIBLE_DEVICES=0,1 {python} -m ...``,
``env NCCL_SOCKET_IFNAME=eth0 ...``, ``export X=y && ...``). Pure: read from the command's
words with shlex, never run.

The knobs are the engines' own flags:

- vLLM: ``--gpu-memory-utilization`` (default 0.9: vLLM refuses to start when a GPU's free
  memory is below that share of its total), ``--tensor-parallel-size``/``-tp``,
  ``--pipeline-parallel-size``/``-pp``, ``--data-parallel-size``/``-dp``;
- SGLang: ``--mem-fraction-static``, ``--tp-size``/``--tp``, ``--pp-size``, ``--dp-size``/
  ``--dp`` (not multiplied in with ``--enable-dp-attention``, where DP ranks share the TP
  GPUs), ``--base-gpu-id``;
- torchrun: ``--nproc-per-node``/``--nproc_per_node``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The share of memory asked for when no stage says (vLLM's default utilization).
DEFAULT_FRACTION = 0.9
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_SEPARATORS = {";", "&&", "||", "&", "|", "(", ")"}
_SIZES = {
    "tp": ("--tensor-parallel-size", "-tp", "--tp-size", "--tp"),
    "pp": ("--pipeline-parallel-size", "-pp", "--pp-size"),
    "dp": ("--data-parallel-size", "-dp", "--dp-size", "--dp"),
    "nproc": ("--nproc-per-node", "--nproc_per_node"),
}
_FRACTIONS = ("--gpu-memory-utilization", "--mem-fraction-static")


@dataclass(frozen=True)
class JobAsk:
    """One stage's demand (or the default when no stage is named)."""

    label: str
    #: GPUs the job starts on (None: the command does not say).
    gpus: int | None = None
    #: Share of each GPU's total memory the job needs free, and the flag that set it.
    fraction: float = DEFAULT_FRACTION
    fraction_from: str = "default"
    base_gpu: int = 0
    #: Variables the command sets for itself (they win over the host's environment).
    env: dict[str, str] = field(default_factory=dict)
    #: Where the GPU count came from ("--tensor-parallel-size 8", ...).
    gpus_from: str = ""


def words_of(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def command_env(words: Sequence[str]) -> dict[str, str]:
    """Assignments the command makes for what it runs: ``export A=b`` segments, and leading
    ``A=b`` words (after an optional ``env``) of the segments that run a program."""
    env: dict[str, str] = {}
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        rest = segment[1:] if segment[:1] in (["export"], ["env"]) else segment
        for item in rest:
            match = _ASSIGNMENT.match(item)
            if not match:
                break
            env[match.group(1)] = match.group(2)
        segment = []
    return env


def option(words: Sequence[str], names: Sequence[str]) -> tuple[str, str] | None:
    """(the flag as written, its value) for the last of `names` present (``--x v`` or ``--x=v``)."""
    found = None
    for index, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag in names:
            if eq:
                found = (flag, value)
            elif index + 1 < len(words):
                found = (flag, words[index + 1])
    return found


def _number(found: tuple[str, str] | None, kind: type) -> tuple[float | int | None, str]:
    if found is None:
        return None, ""
    try:
        return kind(found[1]), f"{found[0]} {found[1]}"
    except ValueError:
        return None, ""


def job_ask(command: str) -> JobAsk:
    words = words_of(command)
    label = " ".join(w for w in words if not _ASSIGNMENT.match(w))[:80]
    sizes = {k: _number(option(words, names), int) for k, names in _SIZES.items()}
    gpus, sources = None, []
    if sizes["nproc"][0]:
        gpus, sources = int(sizes["nproc"][0]), [sizes["nproc"][1]]
    elif any(sizes[k][0] for k in ("tp", "pp", "dp")):
        gpus = 1
        for key in ("tp", "pp", "dp"):
            value, text = sizes[key]
            if value and not (key == "dp" and "--enable-dp-attention" in words):
                gpus *= int(value)
                sources.append(text)
    fraction, fraction_text = _number(option(words, _FRACTIONS), float)
    base, _text = _number(option(words, ("--base-gpu-id",)), int)
    return JobAsk(label=label, gpus=gpus if gpus and gpus > 0 else None,
                  fraction=float(fraction) if fraction and 0 < fraction <= 1 else DEFAULT_FRACTION,
                  fraction_from=fraction_text if fraction and 0 < fraction <= 1 else "default",
                  base_gpu=int(base) if base and base > 0 else 0, env=command_env(words),
                  gpus_from=" x ".join(sources))


def job_asks(stage_commands: Sequence[str], expected_gpus: int | None) -> list[JobAsk]:
    """The stages' demands; with none, the default: the expected GPU count (``gpus = N``),
    else every GPU the job sees, each with DEFAULT_FRACTION free."""
    asks = [job_ask(c) for c in stage_commands]
    if not asks:
        return [JobAsk(label="no stage named", gpus=expected_gpus or None,
                       gpus_from=f"gpus = {expected_gpus}" if expected_gpus else "")]
    return asks
