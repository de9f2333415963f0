"""Where the file names in ``ssh -G``'s one-line lists end.

``ssh -G`` prints UserKnownHostsFile and GlobalKnownHostsFile on one line, the files joined by
single spaces and never quoted (readconf.c ``dump_cfg_strarray_oneline``), so a config's
``UserKnownHostsFile "~/My Keys/known hosts" ~/kh2`` comes out as ``/root/My Keys/known hosts
/root/kh2``: splitting at the spaces would read ``/root/My`` and ``Keys/known``, and
accept-new would write to ``/root/My``. The words are recovered from the config itself:
each such line of the files ssh reads (and ssh's default), split as ssh splits a line
(``argv_split``) and expanded as ssh expands it for this destination (``~``, ``${VAR}``,
``%`` tokens for the user files; nothing for the global ones). The line whose expansion,
joined by spaces, is what ssh printed gives the files. When no line does and no file name
written in the config holds a space, the spaces are the separators; otherwise the list is
refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh_config import SYSTEM_CONFIG, lines_read
from envdoctor.transport.target import user_config_path
from envdoctor.transport.ssh_tokens import TokenContext, expand_path

USER, GLOBAL = "userknownhostsfile", "globalknownhostsfile"
DEFAULTS = {USER: ("~/.ssh/known_hosts", "~/.ssh/known_hosts2"),
            GLOBAL: ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")}


@dataclass(frozen=True)
class WrittenLists:
    """Every argument list of UserKnownHostsFile and GlobalKnownHostsFile in the config, ssh's
    defaults first."""

    lists: dict[str, tuple[tuple[str, ...], ...]]


def written_lists(config_file: str | None) -> WrittenLists:
    """The lists as written in the files ssh reads (``-F FILE`` alone, else the user config
    and the system file), whether or not their block applies to a given destination."""
    files = [(config_file, True)] if config_file else [(user_config_path(), True), (SYSTEM_CONFIG, False)]
    found: dict[str, list[tuple[str, ...]]] = {USER: [DEFAULTS[USER]], GLOBAL: [DEFAULTS[GLOBAL]]}
    for line in lines_read(files):
        if line.keyword in found and line.args:
            found[line.keyword].append(line.args)
    return WrittenLists({key: tuple(value) for key, value in found.items()})


def split_list(printed: str, keyword: str, written: WrittenLists | None, context: TokenContext) -> tuple[str, ...]:
    """The files of one list ssh -G printed (``none`` stays ``("none",)``)."""
    if not printed or printed.lower() == "none" or " " not in printed:
        return (printed,) if printed else ()
    candidates: Sequence[tuple[str, ...]] = written.lists.get(keyword, ()) if written else ()
    expand: Callable[[str], str] = (lambda name: expand_path(name, context)) if keyword == USER else str
    matched = set()
    for words in candidates:
        try:
            expanded = tuple(expand(word) for word in words)
        except ConfigError:
            continue  # (a line ssh could not have expanded is not the one it used)
        if " ".join(expanded) == printed:
            matched.add(expanded)
    if len(matched) == 1:
        return matched.pop()
    spaced = any(any(c in " \t" for c in word) for words in candidates for word in words)
    if not matched and not spaced:
        return tuple(printed.split(" "))
    raise ConfigError(f"ssh -G printed {keyword} {printed!r}, and the SSH config does not tell where its file "
                      "names end (ssh prints them joined by spaces)",
                      hint="give each known hosts file a path without spaces, or one UserKnownHostsFile line "
                           "that matches")
