"""``envdoctor init``: what each host has for the job, found in one probe run per host.

The probe reads the host (python3, GPUs), its environments (discovered from their files, never
started) and the model folders under the usual places (a bounded search; nothing of a model
runs). :func:`entry_from_facts` turns that into a :class:`HostEntry`: the environment that
ranks first for the job (envdoctor.install.env_choice: what ``--require`` and the stages ask
for, then the stack it has), the others, the models, the GPU count. Writing the inventory is
the CLI's (envdoctor.report.init_toml renders the table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envdoctor.engine.executor import FleetSettings, Progress, execute
from envdoctor.engine.facts import Environment, HostFacts, Problem
from envdoctor.install.env_choice import Candidate, job_needs, others_than, rank
from envdoctor.inventory import HostSpec
from envdoctor.operations.gather import gather_facts
from envdoctor.transport.interface import Transport

#: One probe run: the host (python3, GPUs), its environments, the model folders.
INIT_SECTIONS = ("host", "venvs", "model-search")
#: Other environments and models named as comments, at most.
MAX_OTHERS = 8


@dataclass(frozen=True)
class FoundModel:
    """A model folder the search found: config.json and tokenizer or weight files."""

    path: str
    source: str = ""
    model_type: str = ""
    repo: str = ""
    weight_files: int = 0
    #: config.json could not be read (the folder still counts: the checks will say why).
    config_error: str = ""

    @classmethod
    def from_probe(cls, raw: dict[str, Any]) -> FoundModel:
        return cls(str(raw["path"]), str(raw.get("source", "")), str(raw.get("model_type", "")),
                   str(raw.get("repo", "")), int(raw.get("weight_files", 0)), str(raw.get("config_error", "")))

    def describe(self) -> str:
        """``kimi_k25, no weights`` or ``hub: moonshotai/Kimi-K2.6, qwen3, 8 weight files``."""
        parts = [f"hub: {self.repo}"] if self.repo else []
        parts.append(self.model_type or self.config_error or "no model_type")
        parts.append(f"{self.weight_files} weight file(s)" if self.weight_files else "no weights")
        return ", ".join(parts)


@dataclass(frozen=True)
class HostEntry:
    """What init found on one host: the values of its ``[hosts.NAME]`` table, and why."""

    spec: HostSpec
    problem: Problem | None = None
    #: The environment that ranks first for the job (None: none has any of the stack).
    choice: Candidate | None = None
    others: tuple[Candidate, ...] = ()
    #: Environments found that have none of the stack (prefixes).
    unranked: tuple[str, ...] = ()
    #: The default python3 when it is the system's own interpreter (said, never chosen).
    system: Environment | None = None
    models: tuple[FoundModel, ...] = ()
    #: Where the model search stopped early, and why ("" when it searched everything).
    search_note: str = ""
    searched: tuple[str, ...] = ()
    #: GPUs counted (0 without nvidia-smi); None when nvidia-smi failed: then nothing is written.
    gpus: int | None = None
    gpu_note: str = ""
    #: The job's stated needs that ranked the environments (--require, stage commands).
    needs: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.problem is None


def entry_from_facts(spec: HostSpec, facts: HostFacts) -> HostEntry:
    """Choose what the host's table says, from one probe answer (pure)."""
    if facts.problem is not None:
        return HostEntry(spec, problem=facts.problem)
    needs = job_needs(spec, facts, spec.stage_commands)
    default = facts.default_env
    pool = others_than(default, facts.envs)
    if default is not None and default.runs and default.prefix and not default.is_system:
        pool.append(default)  # a conda base or pyenv python3 on PATH with the stack is a candidate too
    ranked = rank(pool, needs)
    useful = [c for c in ranked if c.met or c.stack]
    # Another user's environment (or one anyone may write) is named, never chosen: choosing it
    # would hand that user the job.
    choice = next((c for c in useful if not c.env.foreign), None)
    others = tuple(c for c in useful if c is not choice)[:MAX_OTHERS]
    unranked = tuple(c.env.prefix for c in ranked if not (c.met or c.stack))[:MAX_OTHERS]
    gpus, gpu_note = gpu_count(facts)
    search = facts.section("model-search") or {}
    search_error = facts.probe.errors.get("model-search")
    note = str(search.get("truncated") or "")
    if search_error:
        note = f"the model search failed: {(search_error.strip().splitlines() or ['no detail'])[-1]}"
    return HostEntry(
        spec, choice=choice, others=others, unranked=unranked,
        system=default if default is not None and default.is_system else None,
        models=tuple(FoundModel.from_probe(m) for m in search.get("models") or ()),
        search_note=note, searched=tuple(search.get("searched") or ()),
        gpus=gpus, gpu_note=gpu_note, needs=tuple(n.requirement for n in needs),
    )


def gpu_count(facts: HostFacts) -> tuple[int | None, str]:
    """The GPUs to expect (``gpus = N``) and what the count rests on. No nvidia-smi: 0, so that
    a CPU-only host's gate can pass; nvidia-smi failing: nothing (0 would hide a broken driver)."""
    if not facts.nvidia_smi:
        return 0, "no nvidia-smi on PATH: no NVIDIA driver, a CPU-only host"
    if facts.gpu_error or not facts.gpus:
        return None, f"{facts.nvidia_smi} -L failed ({facts.gpu_error or 'no GPU listed'}): set gpus by hand"
    names = sorted({g.split(":", 1)[-1].split("(UUID")[0].strip() for g in facts.gpus})
    return len(facts.gpus), f"counted by nvidia-smi -L: {', '.join(names)}"


async def probe_for_init(spec: HostSpec, transport: Transport) -> HostEntry:
    """One probe run on a connected host, as if nothing were configured: environments are
    discovered and ranked, not the inventory's venv inspected."""
    fresh = replace(spec, venv=None, models=())
    facts = await gather_facts(transport, fresh, sections=INIT_SECTIONS)
    return entry_from_facts(spec, facts)


def init_hosts(specs: Sequence[HostSpec], settings: FleetSettings, *,
               progress: Progress | None = None) -> list[HostEntry]:
    """Every host at once through the executor; one entry per host, in order."""
    return execute(specs, settings, probe_for_init, on_problem=lambda spec, problem: HostEntry(spec, problem=problem),
                   progress=progress)
