""""Did you mean ...?" for a name that names nothing: a check id, a patch id, a host alias.

One ranking everywhere: by edit distance (Levenshtein, case ignored), then a name the typed
word is the start of (``ct20`` is more likely ``ct200`` cut short than ``ct21`` mistyped),
then natural order (``ct9`` before ``ct10``, so ``ct200`` before ``ct202``). Only the names at
the smallest distance are offered, and only when that distance is small for the word's
length: a suggestion that is not close is noise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The most names one suggestion offers.
MAX_SUGGESTIONS = 3


def edit_distance(a: str, b: str) -> int:
    """Insertions, deletions and substitutions that turn ``a`` into ``b`` (Levenshtein)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """``ct9`` before ``ct10``: runs of digits compare as numbers."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", name.lower()))


def _close_enough(word: str, distance: int) -> bool:
    """At most a third of the word's length (at least 2), and never the whole word."""
    return distance <= max(2, len(word) // 3) and distance < len(word)


def closest(word: str, names: Iterable[str], limit: int = MAX_SUGGESTIONS) -> list[str]:
    """The names ``word`` was most likely meant to be, best first; none when none is close."""
    typed = word.lower()
    ranked = []
    for name in dict.fromkeys(names):
        if name == word:
            continue
        distance = edit_distance(typed, name.lower())
        if _close_enough(word, distance):
            ranked.append((distance, not name.lower().startswith(typed), natural_key(name), name))
    if not ranked:
        return []
    ranked.sort()
    best = ranked[0][0]
    return [name for distance, _, _, name in ranked if distance == best][:limit]


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`` (did you mean 'a' or 'b'?)`` to end a message with, or ``""``."""
    found = closest(word, names)
    if not found:
        return ""
    quoted = [repr(name) for name in found]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f" (did you mean {listed}?)"
