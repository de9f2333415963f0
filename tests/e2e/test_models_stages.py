"""Stage plumbing without a host: streaming transports, facts placeholders."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence

import pytest

from envdoctor.errors import CommandTimeout
from envdoctor.inventory import HostSpec, Stage
from envdoctor.stages.handoff import FACT_PLACEHOLDERS, lookup, placeholder_values
from envdoctor.transport.interface import CommandResult, Transport
from envdoctor.transport import local
from envdoctor.transport.local import LocalTransport


class RecordedTransport(Transport):
    """A transport that cannot stream: the interface's fallback must still deliver everything."""

    name = "fake"

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  env: Mapping[str, str] | None = None, timeout: float | None = None) -> CommandResult:
        return CommandResult(tuple(argv), 4, b"out\n", b"err\n")


def test_stream_fallback_delivers_output_and_status():
    """Transport.stream's default hands over run()'s output at the end and returns its status."""
    out: list[bytes] = []
    err: list[bytes] = []
    status = asyncio.run(RecordedTransport().stream(["x"], on_stdout=out.append, on_stderr=err.append))
    assert (status, out, err) == (4, [b"out\n"], [b"err\n"])


def test_local_stream_passes_chunks_in_order_and_exit_status():
    """LocalTransport.stream gives stdout and stderr as they come and returns the exit status."""
    out: list[bytes] = []
    err: list[bytes] = []
    code = "import sys\nfor i in range(3): print(i, flush=True)\nprint('e', file=sys.stderr)\nsys.exit(5)"
    status = asyncio.run(LocalTransport().stream([sys.executable, "-c", code], on_stdout=out.append, on_stderr=err.append))
    assert status == 5
    assert b"".join(out) == b"0\n1\n2\n" and b"".join(err) == b"e\n"


def test_local_stream_timeout_kills_the_command(monkeypatch):
    """A streamed command past its timeout raises CommandTimeout (and is killed, not left behind)."""
    monkeypatch.setattr(local, "STREAM_GRACE_SECONDS", 0.1)
    with pytest.raises(CommandTimeout):
        asyncio.run(LocalTransport().stream([sys.executable, "-c", "import time; time.sleep(30)"],
                                            on_stdout=lambda _: None, on_stderr=lambda _: None, timeout=0.5))


def test_every_fact_placeholder_reads_the_facts_document():
    """Each facts placeholder names a key the document has (nested ones through dflash/eagle3)."""
    doc = {"python": "/v/bin/python", "model": "/m", "vocab_size": 10, "dflash": {"target_layer_ids": [1, 2]},
           "eagle3": {"target_layer_ids": [2, 3]}}
    values = placeholder_values(HostSpec("h", None, venv="/v"), Stage("s", "h", (), "x"), doc)
    assert values["python"] == "/v/bin/python" and values["venv"] == "/v" and values["vocab_size"] == 10
    assert values["dflash_target_layer_ids"] == [1, 2] and values["eagle3_target_layer_ids"] == [2, 3]
    assert lookup(doc, "dflash.nope.deeper") is None
    assert set(FACT_PLACEHOLDERS) <= set(values)
