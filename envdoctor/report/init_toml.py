"""The ``[hosts.NAME]`` table ``envdoctor init`` writes, and its place in an existing file.

:func:`host_table` renders what init found on a host as TOML: the chosen ``venv``, the
``models``, ``gpus``, ``trust_remote_code`` (or a comment saying what it would allow), and the
other candidates as comments. :func:`splice` puts tables into the text of an inventory: a new
host's table after the last host table (or at the end), a replaced one (``--force``) in place
of its old text, leaving every other line of the file as it was, comments included; the result
is parsed again and must say exactly what the old file said plus the new tables.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envdoctor.errors import ConfigError
from envdoctor.operations.init import HostEntry
from envdoctor.safe_text import escape_line

#: The first line of every table init writes: how the next init recognises its own note.
MARK = "# envdoctor init"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
#: Where the comments after a key line start, so that they line up.
COMMENT_COLUMN = 40


def toml_string(text: str) -> str:
    """A TOML basic string (a JSON string is one, given non-ASCII kept as it is)."""
    return json.dumps(text, ensure_ascii=False)


def toml_key(name: str) -> str:
    return name if _BARE_KEY.match(name) else toml_string(name)


def table_header(host: str) -> str:
    return f"[hosts.{toml_key(host)}]"


def _line(code: str, comment: str = "") -> str:
    if not comment:
        return code
    return f"{code:<{COMMENT_COLUMN - 1}} # {escape_line(comment)}"


def _comment(text: str) -> str:
    return f"# {escape_line(text)}"


@dataclass(frozen=True)
class TableOptions:
    """What the command line adds to what the probe found."""

    trust_remote_code: bool = False
    requires: tuple[str, ...] = ()
    #: Keys of the old table (with --force) that init does not decide, kept as they were:
    #: ssh, scan, skip, and requires when no --require is given.
    kept: Mapping[str, Any] | None = None
    date: str = ""


def host_table(entry: HostEntry, options: TableOptions = TableOptions()) -> str:
    """The table for one host, ending with a newline."""
    spec = entry.spec
    lines = [_comment(f"{MARK[2:]} {spec.name}{f' ({options.date})' if options.date else ''}: "
                      f"what the probe found on {spec.destination}"), table_header(spec.name)]
    kept = dict(options.kept or {})
    for key in ("ssh",):
        if key in kept:
            lines.append(f"{key} = {_toml_value(kept.pop(key))}")
    lines += _venv_lines(entry)
    lines += _model_lines(entry)
    if entry.gpus is not None:
        lines.append(_line(f"gpus = {entry.gpus}", entry.gpu_note))
    else:
        lines.append(_comment(f"gpus: {entry.gpu_note}"))
    lines += _consent_lines(entry, options.trust_remote_code)
    requires = list(dict.fromkeys([*(kept.pop("requires", None) or []), *options.requires]))
    if requires:
        lines.append(f"requires = [{', '.join(toml_string(r) for r in requires)}]")
    for key, value in kept.items():  # scan, skip: the user's, carried over
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _venv_lines(entry: HostEntry) -> list[str]:
    lines = []
    if entry.choice is not None:
        lines.append(_line(f"venv = {toml_string(entry.choice.env.prefix)}", _has(entry.choice.describe())))
    else:
        lines.append(_comment("venv: no environment with transformers, sglang, vllm, speculators or torch was "
                              "found; make one (python3 -m venv ~/venv-job) and set venv here"))
    if entry.system is not None:
        lines.append(_comment(f"python3 on PATH is {entry.system.executable or entry.system.python}, the system's "
                              "own interpreter: not the job's"))
    if entry.others or entry.unranked:
        lines.append(_comment("other environments found (set venv to one of them to choose it):"))
        lines += [_comment(f"  venv = {toml_string(c.env.prefix)}  # {_has(c.describe())}") for c in entry.others]
        lines += [_comment(f"  venv = {toml_string(prefix)}  # none of the stack") for prefix in entry.unranked]
    return lines


def _has(describe: str) -> str:
    """``it has transformers 4.57.1; lacks tiktoken`` from a candidate's ``pass --venv P (...)``."""
    return describe[describe.find("(") + 1:-1] if describe.endswith(")") and "(" in describe else describe


def _model_lines(entry: HostEntry) -> list[str]:
    if not entry.models:
        where = ", ".join(entry.searched) or "~/models, the Hugging Face cache, /data*, /mnt*"
        lines = [_comment(f"models: no model folder (config.json with tokenizer or weight files) found in "
                          f"{where}; add models = [\"/path\"] here")]
    else:
        lines = ["models = ["]
        lines += [_line(f"    {toml_string(m.path)},", m.describe()) for m in entry.models]
        lines.append("]")
    if entry.search_note:
        lines.append(_comment(f"the model search stopped early ({entry.search_note}): add other folders by hand"))
    return lines


def _consent_lines(entry: HostEntry, trust: bool) -> list[str]:
    if trust:
        return [_line("trust_remote_code = true", "consent given with envdoctor init --trust-remote-code")]
    return [
        _comment("trust_remote_code = true would be your consent that the models' own code may run: the "
                 "tokenizer is loaded"),
        _comment("  to check it, fix installs the packages that code imports (e.g. tiktoken) and patches "
                 "loader calls to pass"),
        _comment(f"  trust_remote_code=True. Uncomment it, or run: envdoctor init {entry.spec.name} "
                 "--trust-remote-code --force"),
        _comment("trust_remote_code = true"),
    ]


def _toml_value(value: Any) -> str:
    """A kept value (a string, a bool, an int, a list of strings or of {id, reason} tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {value!r} back as TOML")


# --- the file ------------------------------------------------------------------------------

def _header_path(line: str) -> tuple[str, ...] | None:
    """The key path of a ``[table]`` header line (any quoting TOML allows), or None."""
    stripped = line.strip()
    if not stripped.startswith("[") or stripped.startswith("[["):
        return None
    try:
        parsed = tomllib.loads(stripped)
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    node: Any = parsed
    while isinstance(node, dict) and len(node) == 1:
        key, node = next(iter(node.items()))
        path.append(key)
    return tuple(path) if node == {} else None


def _is_header(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("[[") or _header_path(line) is not None


def _region(lines: Sequence[str], start: int) -> tuple[int, int]:
    """The lines of the table whose header is ``lines[start]``: from its own init note (the
    comments right above it, when init wrote them) to the next header, less the comment block
    that belongs to the next header (comments right above it, after a blank line)."""
    first = start
    while first > 0 and lines[first - 1].startswith("#") and not lines[first].startswith(MARK):
        first -= 1
    if not lines[first].startswith(MARK):
        first = start  # the comments above are the user's: they stay
    end = start + 1
    while end < len(lines) and not _is_header(lines[end]):
        end += 1
    if end < len(lines):
        top = end
        while top > start + 1 and lines[top - 1].lstrip().startswith("#"):
            top -= 1
        if top < end and top > start + 1 and not lines[top - 1].strip():
            end = top
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # trailing blank lines stay between the tables
    return first, end


def splice(text: str, tables: Mapping[str, str]) -> str:
    """``text`` (an inventory, maybe empty) with each host's table put in: replacing the table
    of a host it has, else after the last host table (or at the end). Raises ConfigError when
    a host's entry is not a table init can replace (an inline table, dotted keys)."""
    lines = text.splitlines()
    for host, table in tables.items():
        header = ("hosts", host)
        starts = [i for i, line in enumerate(lines) if _header_path(line) == header]
        new = table.rstrip("\n").split("\n")
        if starts:
            first, end = _region(lines, starts[0])
            lines[first:end] = new
            continue
        hosts = [i for i, line in enumerate(lines) if (_header_path(line) or ())[:1] == ("hosts",)]
        if hosts:
            _, end = _region(lines, hosts[-1])
            lines[end:end] = ["", *new]
        else:
            while lines and not lines[-1].strip():
                lines.pop()
            lines += (["", *new] if lines else new)
    result = "\n".join(lines) + "\n"
    check_splice(text, result, tables)
    return result


def check_splice(old: str, new: str, tables: Mapping[str, str]) -> None:
    """The new file says what the old one said, but for the hosts' tables, which say what
    their own text says: anything else means the old file was shaped in a way init cannot
    edit by lines, and nothing is written."""
    before = tomllib.loads(old) if old.strip() else {}
    expected = {**before, "hosts": {**(before.get("hosts") or {})}}
    for host, table in tables.items():
        expected["hosts"][host] = tomllib.loads(table)["hosts"][host]
    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        after = None
    if after != expected:
        hosts = ", ".join(tables)
        raise ConfigError(f"cannot edit the inventory for {hosts} line by line (an entry is an inline table or "
                          "dotted keys?); nothing was written",
                          hint="write the [hosts.NAME] table by hand from what envdoctor init --dry-run shows")


def defined_elsewhere(text: str, host: str) -> bool:
    """Whether the inventory defines ``host`` other than by a ``[hosts.NAME]`` header line
    (``[hosts]`` with ``ct200 = {...}``, dotted keys): init cannot replace that by lines."""
    data = tomllib.loads(text) if text.strip() else {}
    if host not in (data.get("hosts") or {}):
        return False
    return not any(_header_path(line) == ("hosts", host) for line in text.splitlines())


def old_table(text: str, host: str) -> dict[str, Any]:
    """The host's table as the inventory has it now (empty when it has none)."""
    data = tomllib.loads(text) if text.strip() else {}
    table = (data.get("hosts") or {}).get(host)
    return dict(table) if isinstance(table, dict) else {}
