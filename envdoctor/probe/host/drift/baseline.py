# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# The known-good provider of a drift pair: when a consumer's own Requires-Dist (also under an
# extra) pins the provider to versions the installed one is outside of, another environment
# of the host that holds a pinned version is the code the consumer was written against; the
# drift section resolves the same uses there too (envdoctor/probe/host/drift/section.py) so the
# controller can tell a break of this upgrade from code that never worked. Found by reading
# directory listings only; nothing is run.

import os
import re

from envdoctor.probe.host.core import canonical_name, site_dirs, site_entries
from envdoctor.probe.host.env.discovery import discover_envs

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;()]*)\)?\s*(?:;(.*))?$")
_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+)\s*$")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")
_RELEASE = re.compile(r"^v?(\d+(?:\.\d+)*)$")


def baseline_release(text):
    """'0.11.0' -> (0, 11), trailing zeros dropped; None for a pre-, post- or dev release (not
    compared here: the controller's packaging would, and a guess must not pick a baseline)."""
    match = _RELEASE.match(text.strip().split("+")[0])
    if not match:
        return None
    parts = [int(p) for p in match.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def baseline_clause_holds(version, op, wanted):
    """One specifier clause for a plain release; None when it cannot be told here."""
    if op in ("==", "!=") and wanted.endswith(".*"):
        have, prefix = baseline_release(version), baseline_release(wanted[:-2])
        if have is None or prefix is None:
            return None
        width = len(wanted[:-2].split("."))
        padded = tuple(list(have) + [0] * width)[:width]
        same = padded == tuple(list(prefix) + [0] * width)[:width]
        return same if op == "==" else not same
    have, want = baseline_release(version), baseline_release(wanted)
    if have is None or want is None:
        return None
    if op in ("==", "==="):
        return have == want
    if op == "!=":
        return have != want
    if op == "~=":
        width = len(wanted.split(".")) - 1
        top = baseline_release(".".join(wanted.split(".")[:width])) or ()
        return have >= want and have[:len(top)] == top if top else None
    return {"<": have < want, "<=": have <= want, ">": have > want, ">=": have >= want}[op]


def baseline_satisfies(version, specifier):
    """Whether a version meets every clause of 'a,b'; None when one cannot be told."""
    verdict = True
    for clause in specifier.split(","):
        if not clause.strip():
            continue
        match = _CLAUSE.match(clause)
        if not match:
            return None
        holds = baseline_clause_holds(version, match.group(1), match.group(2))
        if holds is None:
            return None
        verdict = verdict and holds
    return verdict


def baseline_pins(requires, provider):
    """(specifier, extra, requirement text) of each Requires-Dist naming the provider with a version."""
    pins = []
    for text in requires:
        match = _REQUIREMENT.match(text)
        if not match or canonical_name(match.group(1)) != canonical_name(provider):
            continue
        specifier = match.group(2).strip()
        if not specifier:
            continue
        extra = _EXTRA.search(match.group(3) or "")
        pins.append((specifier, extra.group(1) if extra else "", text.strip()))
    return pins


def baseline_missing(named):
    """The named environments that are not folders on this host."""
    return [path for path in named if not os.path.isdir(path)]


def baseline_candidates(named, prefix, discover):
    """Environments that may hold a known-good provider: those named, then those discovered
    (never the checked one)."""
    found = []
    seen = set([os.path.realpath(prefix)] if prefix else [])
    for path in list(named) + (discover_envs(exclude=[prefix] if prefix else []) if discover else []):
        real = os.path.realpath(path)
        if real not in seen and os.path.isdir(path):
            seen.add(real)
            found.append(path)
    return found


def baseline_find(candidates, provider, specifier):
    """(prefix, site folders, version) of the first candidate holding a provider version that
    meets the specifier, by its dist-info folder's name; None."""
    wanted = canonical_name(provider)
    for prefix in candidates:
        sites = site_dirs(prefix)
        for _site, entry in site_entries(sites):
            if not entry.endswith(".dist-info"):
                continue
            name, _, version = entry[:-len(".dist-info")].rpartition("-")
            if canonical_name(name) == wanted and baseline_satisfies(version, specifier) is True:
                return prefix, sites, version
    return None
