"""What a login shell's rc files print before a command is not the command's output."""

from __future__ import annotations

import asyncio

from envdoctor.transport.ssh import BEGIN_MARK, _AfterBeginMark, read_after_begin_mark, with_begin_mark

BANNER = b"Welcome to the GPU cluster\nno newline at the end"


def test_the_command_is_preceded_by_an_echo_of_the_mark():
    assert with_begin_mark("'/v/bin/python' -I -c x") == f"echo {BEGIN_MARK.decode()}; '/v/bin/python' -I -c x"
    assert BEGIN_MARK.startswith(b"envdoctor-begin-") and len(BEGIN_MARK) == len("envdoctor-begin-") + 16


def read_all(data: bytes, limit: int = 1 << 20) -> tuple[bytes, bool]:
    async def run() -> tuple[bytes, bool]:
        stream = asyncio.StreamReader()
        stream.feed_data(data)
        stream.feed_eof()
        return await read_after_begin_mark(stream, limit)

    return asyncio.run(run())


def test_output_after_the_mark_only():
    assert read_all(BANNER + BEGIN_MARK + b"\n" + b'{"done": true}\n') == (b'{"done": true}\n', False)
    assert read_all(BEGIN_MARK + b"\n") == (b"", False)
    # The command's own output may hold the mark later: only the first one is the shell's.
    assert read_all(BEGIN_MARK + b"\n" + BEGIN_MARK + b"\n") == (BEGIN_MARK + b"\n", False)
    # No mark at all (a ForceCommand ran instead): the output is kept whole.
    assert read_all(b"forced\n") == (b"forced\n", False)


def test_the_cap_counts_the_commands_own_bytes():
    """The output cap counts what follows the mark: neither the mark nor a banner eats into it."""
    assert read_all(BANNER + BEGIN_MARK + b"\n" + b"x" * 100, limit=100) == (b"x" * 100, False)
    assert read_all(BANNER + BEGIN_MARK + b"\n" + b"x" * 101, limit=100) == (b"x" * 100, True)


def test_a_stream_holds_back_until_the_mark_even_when_it_is_split():
    got: list[bytes] = []
    sink = _AfterBeginMark(got.append)
    whole = BANNER + BEGIN_MARK + b"\n" + b"line one\nline two\n"
    for at in range(0, len(whole), 7):
        sink(whole[at:at + 7])
    sink.close()
    assert b"".join(got) == b"line one\nline two\n"


def test_a_stream_without_the_mark_passes_everything_on_at_the_end():
    got: list[bytes] = []
    sink = _AfterBeginMark(got.append)
    sink(b"forced ")
    sink(b"output\n")
    assert got == []
    sink.close()
    assert b"".join(got) == b"forced output\n"
