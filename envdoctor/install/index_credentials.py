"""Index URLs reach pip through its environment, never its command line.

``--index-url http://user:pass@mirror/simple`` on pip's argv is readable by every user of
the host (``ps``, ``/proc/PID/cmdline``) for as long as pip runs. A command remedy keeps
the options in its ``argv`` (that is what the report shows, with the userinfo redacted);
when it is started, :func:`index_options_to_env` takes them out and they travel on the
command's stdin to a small ``sh`` wrapper that exports them as ``PIP_INDEX_URL``,
``PIP_EXTRA_INDEX_URL`` and ``PIP_FIND_LINKS`` and execs pip (for ``uv pip install``, into a
venv without pip: ``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL`` and ``UV_FIND_LINKS``). A process's
environment is readable only by its owner (and root).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

#: pip option -> the environment variable pip reads for it (several values: space-separated).
PIP_INDEX_OPTIONS = {
    "--index-url": "PIP_INDEX_URL",
    "-i": "PIP_INDEX_URL",
    "--extra-index-url": "PIP_EXTRA_INDEX_URL",
    "--find-links": "PIP_FIND_LINKS",
    "-f": "PIP_FIND_LINKS",
}

#: The same for uv, and how each of its variables separates several values.
UV_INDEX_OPTIONS = {
    "--index-url": "UV_INDEX_URL",
    "-i": "UV_INDEX_URL",
    "--extra-index-url": "UV_EXTRA_INDEX_URL",
    "--find-links": "UV_FIND_LINKS",
    "-f": "UV_FIND_LINKS",
}
SEPARATORS = {"UV_FIND_LINKS": ","}
SINGLE = frozenset({"PIP_INDEX_URL", "UV_INDEX_URL"})

#: Reads NAME=value lines from stdin up to an empty line, exports them, execs "$@".
ENV_FROM_STDIN = 'while IFS= read -r kv && [ -n "$kv" ]; do export "$kv"; done; exec "$@"'


def index_options_to_env(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(argv without pip's index options, the PIP_* variables that replace them). A value
    with whitespace (a find-links folder with a space) stays on argv: pip splits the
    variable on whitespace."""
    if len(argv) >= 3 and list(argv[1:3]) == ["-m", "pip"]:
        options = PIP_INDEX_OPTIONS
    elif len(argv) >= 3 and posixpath.basename(argv[0]) == "uv" and list(argv[1:3]) == ["pip", "install"]:
        options = UV_INDEX_OPTIONS
    else:
        return list(argv), {}
    kept: list[str] = []
    values: dict[str, list[str]] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        word = items[i]
        name, eq, inline = word.partition("=")
        option = name if eq and name.startswith("--") else word
        variable = options.get(option)
        if variable is not None:
            value = inline if eq else (items[i + 1] if i + 1 < len(items) else None)
            if (value is not None and not any(c.isspace() for c in value) and "\n" not in value
                    and SEPARATORS.get(variable, " ") not in value):
                values.setdefault(variable, []).append(value)
                i += 1 if eq else 2
                continue
        kept.append(word)
        i += 1
    env = {}
    for variable, found in values.items():
        # One index URL is taken; a repeated --index-url keeps the last, as on the command line.
        env[variable] = found[-1] if variable in SINGLE else SEPARATORS.get(variable, " ").join(found)
    return kept, env


def wrapped_command(argv: Sequence[str]) -> tuple[list[str], bytes | None]:
    """The argv to start and the stdin to send: pip's index options moved to its environment."""
    kept, env = index_options_to_env(argv)
    if not env:
        return list(argv), None
    stdin = "".join(f"{name}={value}\n" for name, value in env.items()) + "\n"
    return ["sh", "-c", ENV_FROM_STDIN, "envdoctor-pip", *kept], stdin.encode("utf-8")
