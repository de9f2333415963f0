"""Text from hosts and model folders, made safe to show.

A tokenizer_config's class name, a file name in site-packages or a pip message is untrusted:
an ESC sequence in it can set a terminal's title, clear the screen or draw a fake ``✓``
line, a newline can start a line of its own, and a control character makes a JUnit file
that is not XML. Text reports escape them (``\\x1b``, ``\\n``); JUnit drops what XML 1.0
forbids.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

#: C0 controls but tab and newline, DEL, C1 controls, and the bidi overrides that reorder text.
_CONTROL = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
_CONTROL_OR_NEWLINE = "[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
#: What a rich console writes for styles (SGR): kept when a report is drawn in colour.
_SGR = r"\x1b\[[0-9;]*m"
#: Characters XML 1.0 does not allow anywhere in a document.
_NOT_XML = "[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    # Compiled on first use: these classes cost ~10 ms to compile, paid only by a report that
    # has text to clean (start-up time of every command).
    return re.compile(pattern)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\n":
        return "\\n"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_line(text: str) -> str:
    """One line of a report: every control character, newline included, shown escaped."""
    return _compiled(_CONTROL_OR_NEWLINE).sub(_escape, text)


def single_line(line: Any) -> Any:
    """A rich ``Text`` that must stay one line, with its control characters and newlines
    shown escaped (styles keep their offsets: only a hostile line's colours may shift)."""
    plain = line.plain
    safe = escape_line(plain)
    if safe != plain:
        line.plain = safe
    return line


def escape_controls(text: str) -> str:
    """A whole text report: control characters escaped, newlines and tabs kept."""
    return _compiled(_CONTROL).sub(_escape, text)


def terminal_safe(text: str) -> str:
    """A rendered text report, maybe in colour: our own SGR style sequences are kept, every
    other control character (an OSC title, a cursor move, a lone ESC) is escaped."""
    if "\x1b" not in text:
        return escape_controls(text)
    parts = []
    last = 0
    for match in _compiled(_SGR).finditer(text):
        parts.append(escape_controls(text[last:match.start()]))
        parts.append(match.group())
        last = match.end()
    parts.append(escape_controls(text[last:]))
    return "".join(parts)


def xml_safe(text: str) -> str:
    """``text`` without the characters XML 1.0 forbids (ElementTree would write them as is)."""
    return _compiled(_NOT_XML).sub("", text)
