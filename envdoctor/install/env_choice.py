"""Which environment of a host suits the job, when the user named none.

fix never installs into an interpreter the user did not choose, so without ``--venv`` the
report has to say which one to choose. The job's needs are what it asked for (``--require``),
what the models' own code imports, what the stages' commands run (``python -m sglang...``,
``vllm serve``, ``torchrun``), and the serving/training stack. Environments are ranked by
the needs they meet, then by how much of the stack they have; one that another user owns
(or anyone may write) comes last, since choosing it hands that user the job. Pure: the
environments were read by the probe (discovered ones from their files only).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from envdoctor.engine.facts import Environment, HostFacts, canonicalize_name
from envdoctor.engine.host_paths import same_environment
from envdoctor.inventory import HostSpec

if TYPE_CHECKING:
    from packaging.requirements import Requirement

#: What serving and drafter training run on: reported for every candidate that has them.
STACK = ("transformers", "sglang", "vllm", "speculators", "torch")
#: Programs a stage command may start, and the distribution each comes from.
PROGRAMS = {"vllm": "vllm", "sglang": "sglang", "torchrun": "torch", "accelerate": "accelerate",
            "deepspeed": "deepspeed", "speculators": "speculators"}
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


@dataclass(frozen=True)
class Need:
    """One thing the job needs from its environment, and why (for the report)."""

    requirement: str
    source: str

    @property
    def name(self) -> str:
        req = parse_requirement(self.requirement)
        return req.name if req is not None else self.requirement


@dataclass(frozen=True)
class Candidate:
    env: Environment
    met: tuple[Need, ...]
    unmet: tuple[Need, ...]
    stack: tuple[str, ...]

    @property
    def score(self) -> tuple[int, int, int]:
        return (len(self.met), len(self.stack), 0 if self.env.foreign else 1)

    def describe(self) -> str:
        """``pass --venv P (it has transformers 5.24, sglang 0.5.2; lacks tiktoken)``."""
        have_names = list(dict.fromkeys([n.name for n in self.met] + list(self.stack)))
        have = [f"{name} {self.version(name)}" for name in have_names]
        parts = [f"it has {', '.join(have)}"] if have else ["it has none of the stack"]
        if self.unmet:
            parts.append(f"lacks {', '.join(dict.fromkeys(n.name for n in self.unmet))}")
        if self.env.foreign:
            parts.append("another user owns it or anyone may write it")
        return f"pass --venv {shlex.quote(self.env.prefix)} ({'; '.join(parts)})"

    def version(self, name: str) -> str:
        dist = self.env.installed.get(canonicalize_name(name))
        return dist.version if dist else "?"


def parse_requirement(text: str) -> Requirement | None:
    """A PEP 508 requirement, or None if it is not one (packaging's parser is imported only
    when a job needs something: 20 ms of start-up)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def meets(env: Environment, need: Need) -> bool:
    req = parse_requirement(need.requirement)
    if req is None:
        return False
    if req.marker is not None and env.markers and not req.marker.evaluate({**env.markers, "extra": ""}):
        return True
    dist = env.installed.get(canonicalize_name(req.name))
    if dist is None:
        return False
    if not req.specifier:
        return True
    try:
        return req.specifier.contains(Version(dist.version), prereleases=True)
    except InvalidVersion:
        return True


def stage_distributions(command: str) -> list[str]:
    """Distributions a stage command runs: ``-m pkg.mod`` modules and known programs."""
    try:
        words = shlex.split(_PLACEHOLDER.sub("X", command))
    except ValueError:
        words = command.split()
    found = []
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            found.append(words[i + 1].split(".")[0])
        elif posixpath.basename(word) in PROGRAMS:  # a host path: POSIX whatever the controller is
            found.append(PROGRAMS[posixpath.basename(word)])
    return found


def job_needs(spec: HostSpec, facts: HostFacts, stage_commands: Iterable[str] = ()) -> list[Need]:
    """What the job needs, in the order the report names them."""
    needs = [Need(r, "--require") for r in spec.requires]
    needs += [Need(name, "the model's code") for name in model_code_distributions(facts)]
    for command in stage_commands:
        needs += [Need(name, "a stage command") for name in stage_distributions(command)]
    unique: dict[str, Need] = {}
    for need in needs:
        req = parse_requirement(need.requirement)
        if req is not None:
            unique.setdefault(str(req), need)
    return list(unique.values())


def model_code_distributions(facts: HostFacts) -> list[str]:
    """The distributions the models' own code imports (read, never run); empty without models."""
    if not facts.section("models"):
        return []  # (and the model readers are not even imported)
    from envdoctor.modelfacts.code import check_code
    from envdoctor.modelfacts.model import models_from_facts

    nothing = Environment(prefix="", python="", exists=False, runs=False)
    names: list[str] = []
    for model in models_from_facts(facts):
        if model.code:
            names += [m.distribution for m in check_code(model.code, nothing, model.listing).missing]
    return list(dict.fromkeys(names))


def rank(envs: Sequence[Environment], needs: Sequence[Need]) -> list[Candidate]:
    """Candidates, best first (stable for ties: the order the probe found them)."""
    candidates = []
    for env in envs:
        if not env.exists or env.not_a_venv:
            continue
        met = tuple(n for n in needs if meets(env, n))
        unmet = tuple(n for n in needs if n not in met)
        stack = tuple(s for s in STACK if canonicalize_name(s) in env.installed)
        candidates.append(Candidate(env, met, unmet, stack))
    return sorted(candidates, key=lambda c: c.score, reverse=True)


def others_than(default: Environment | None, envs: Iterable[Environment]) -> list[Environment]:
    """The environments that are not the default interpreter's, judged as the host resolves
    their paths (host_paths.py), never by this machine's file system."""
    return [e for e in envs if default is None or not same_environment(e, default)]
