"""Which bare names the user's OpenSSH config defines as hosts: the unknown-host guard.

A name counts when a ``Host`` line names it with a pattern that is not negated and is not
only wildcards (``*`` alone names every string, so it names nothing), and no negated
pattern of that same line excludes it; or when ``Match originalhost`` lists it literally.
Files are read with the same lexer as the fallback resolver (comments, quotes, Include), so
``Host prod  # replaces staging`` names ``prod`` only. An unbalanced quote is a ConfigError
naming the file and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from envdoctor.transport.ssh_config import include_paths, match_pattern, read_config, strdelim_words

MAX_DEPTH = 16
WILDCARDS = frozenset("*?")


@dataclass(frozen=True)
class ConfigHostNames:
    """The Host lines (their patterns) and the literal names of an OpenSSH config."""

    host_lines: tuple[tuple[str, ...], ...] = ()
    literal_names: tuple[str, ...] = field(default_factory=tuple)
    #: The names ``Match originalhost`` lists literally.
    match_names: tuple[str, ...] = field(default_factory=tuple)

    def names(self, name: str) -> bool:
        if name in self.literal_names:
            return True
        for patterns in self.host_lines:
            positive = [p for p in patterns if not p.startswith("!") and not set(p) <= WILDCARDS]
            negated = [p[1:] for p in patterns if p.startswith("!")]
            if any(match_pattern(name, p) for p in positive) and not any(match_pattern(name, p) for p in negated):
                return True
        return False

    def names_literally(self, name: str) -> bool:
        """Whether a Host line names exactly ``name`` (a pattern without wildcards, not negated
        by that line) or ``Match originalhost`` lists it: what makes ``gpu1:2222`` an alias
        rather than host and port (``Host gpu*`` also matches it in ssh, but was written for
        ``gpu1``)."""
        for patterns in self.host_lines:
            if name in patterns and not any(match_pattern(name, p[1:]) for p in patterns if p.startswith("!")):
                return True
        return name in self.match_names


def config_host_names(files: Sequence[tuple[str, bool]]) -> ConfigHostNames:
    """Scan ``(path, is user config)`` files, following Include, for the names they define."""
    host_lines: list[tuple[str, ...]] = []
    literal: list[str] = []
    matched: list[str] = []
    seen: set[str] = set()

    def read(path: str, user_config: bool, depth: int) -> None:
        if path in seen or depth > MAX_DEPTH:
            return
        seen.add(path)
        for line in read_config(path):
            if line.keyword == "host":
                host_lines.append(line.args)
                literal.extend(p for p in line.args if not p.startswith("!") and not set(p) & WILDCARDS)
            elif line.keyword == "match":
                words = strdelim_words(line.raw)  # as ssh reads Match: `originalhost=web` too
                for attribute, value in zip(words, words[1:]):
                    if attribute.lower() == "originalhost":
                        names = [p for p in value.split(",") if p and not p.startswith("!") and not set(p) & WILDCARDS]
                        literal.extend(names)
                        matched.extend(names)
            elif line.keyword == "include":
                for pattern in line.args:
                    for included in include_paths(pattern, user_config=user_config):
                        read(included, user_config, depth + 1)

    for path, user_config in files:
        read(path, user_config, 0)
    return ConfigHostNames(tuple(host_lines), tuple(dict.fromkeys(literal)), tuple(dict.fromkeys(matched)))
