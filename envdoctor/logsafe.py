"""Logging set-up for the CLI, with secrets kept out of every event.

Library modules only call ``get_logger(__name__)`` (structlog's logger, imported at the first
log call) and bind ``host=``/``check=``; ``configure_logging`` (called by the CLI alone)
decides where events go and scrubs them first.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

#: Names whose values are never shown (matched anywhere in the key, any case).
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL", re.IGNORECASE)
#: Values that are secrets whatever their name.
SECRET_VALUE = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)"
    r"|\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,})\b"
    r"|(?<=://)[^/\s@]+(?=@)",  # a URL's userinfo: user:password@, and TOKEN@ (a token as the user)
    re.DOTALL,
)
#: `NAME=value` inside a string, as in a command line or an environment dump.
SECRET_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
REDACTED = "***"


def redact_text(text: str) -> str:
    text = SECRET_VALUE.sub(REDACTED, text)
    return SECRET_ASSIGNMENT.sub(
        lambda m: f"{m[1]}={REDACTED}" if SECRET_NAME.search(m[1]) else m[0], text
    )


#: Where a SECRET_VALUE match can begin: a key's BEGIN line, a token's prefix, a URL's ``://``.
#: Each starts with a literal, which the regex engine finds without trying every position.
_SECRET_STARTS = re.compile(r"-----BEGIN |hf_|sk-|gh[pousr]_|://")
_WORD = re.compile(r"\w")


def redact_secret_values(text: str) -> str:
    """Only the values that are secrets whatever their name (key material, tokens, URL
    passwords): safe on a whole rendered report, where names like ``mask_token_id`` are
    facts, not secrets.

    A fleet's report is megabytes; SECRET_VALUE tries its three forms at every position of
    it. It runs only when a match can begin somewhere: a key's BEGIN line, a URL's ``://``,
    or a token prefix at a word boundary (``sk-`` in ``mask-token`` is not one)."""
    # Tried only where a match can begin (a report is megabytes, with URLs all over it): the
    # same result as SECRET_VALUE.sub over the whole text (tests/unit/test_properties.py).
    kept: list[str] = []
    last = 0
    for found in _SECRET_STARTS.finditer(text):
        start, kind = found.start(), found.group()
        if kind not in ("-----BEGIN ", "://") and start and _WORD.match(text, start - 1):
            continue  # a token prefix inside a word (`sk-` in `mask-token`)
        at = found.end() if kind == "://" else start  # (a URL's userinfo follows its ://)
        if at < last:
            continue
        secret = SECRET_VALUE.match(text, at)
        if secret is not None and secret.end() > secret.start():
            kept += (text[last:secret.start()], REDACTED)
            last = secret.end()
    return "".join(kept) + text[last:] if kept else text


def redact(value: Any, name: str = "") -> Any:
    if name and SECRET_NAME.search(name):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def redact_event(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: scrub every field of an event."""
    for key in list(event):
        event[key] = redact(event[key], "" if key == "event" else key)
    return event


#: The verbosity configure_logging was given; structlog itself is set up at the first log call.
_requested: dict[str, int] = {}
#: The verbosity of this run once the CLI configured it (absent: a library caller's own setup).
_verbosity: dict[str, int] = {}
#: Calls that print nothing without -v: they need neither structlog nor their arguments.
_QUIET_WITHOUT_V = frozenset({"debug", "info"})


def _ignore(*_args: Any, **_kwargs: Any) -> None:
    return None


class LazyLogger:
    """A module's structlog logger, imported at its first call.

    structlog pulls in rich (about 60 ms of start-up), and a run without problems logs
    nothing at the default level, so most runs never need it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._logger is None:
            if attribute in _QUIET_WITHOUT_V and _verbosity.get("level", 1) <= 0:
                return _ignore  # filtered out anyway: a fleet run logs an info line per host
            self._logger = _structlog().get_logger(self._name)
        return getattr(self._logger, attribute)


def get_logger(name: str) -> LazyLogger:
    return LazyLogger(name)


def _structlog() -> Any:
    import structlog

    verbosity = _requested.pop("verbosity", None)
    if verbosity is not None:
        _configure_structlog(structlog, verbosity)
    return structlog


def configure_logging(verbosity: int) -> None:
    _requested["verbosity"] = verbosity
    _verbosity["level"] = verbosity
    if "structlog" in sys.modules:  # already in use: apply now
        _structlog()
    _configure_stdlib(verbosity)


def _configure_structlog(structlog: Any, verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info if verbosity >= 2 else _drop_exc_info,
            redact_event,
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def _configure_stdlib(verbosity: int) -> None:
    # asyncssh logs through the standard library; keep it quiet unless asked.
    logging.basicConfig(level=logging.WARNING if verbosity < 2 else logging.DEBUG, stream=sys.stderr)
    # asyncssh's own debug lines quote whole command lines (an index URL's password too).
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    logging.getLogger("asyncssh").setLevel(logging.WARNING if verbosity < 2 else logging.INFO)
    # asyncio warns "socket.send() raised exception." once per write after a dropped
    # connection; the host's result already says the connection dropped, once.
    logging.getLogger("asyncio").setLevel(logging.ERROR if verbosity < 2 else logging.DEBUG)


class RedactingFilter(logging.Filter):
    """Scrubs standard-library log records (asyncssh's) the way redact_event scrubs ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(record.getMessage())
        record.args = ()
        return True


def _drop_exc_info(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    exc = event.pop("exc_info", None)
    if exc:
        event["error"] = repr(sys.exc_info()[1])
    return event
