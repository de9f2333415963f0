"""The hand-off to the job: the facts a stage needs, and running a stage's command.

``envdoctor facts`` turns one probe run into the JSON the next stage reads (absolute
interpreter, tokenizer ids, architecture, drafter settings). ``envdoctor run`` runs the
checks a stage requires and, only when they pass, its command with the venv's absolute
interpreter over the same connection. Placeholders in the command are filled with values
quoted by ``shlex``; a placeholder no fact provides is a usage error before anything runs,
and so is one inside quotes (its quoting would be undone). Facts read from model files are
validated first (ids are integers, class names identifiers) and are also passed to the
command as ``ENVDOCTOR_<NAME>`` environment variables.
"""

from __future__ import annotations

import json
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envdoctor.engine.executor import FleetSettings, Progress, execute
from envdoctor.engine.facts import Environment, HostFacts, Problem
from envdoctor.engine.graph import CheckGraph, RemedySettings
from envdoctor.engine.results import CheckResult
from envdoctor.errors import EnvdoctorError, TransportError, UsageError
from envdoctor.gpu.document import gpu_facts
from envdoctor.gpu.node_document import node_documents
from envdoctor.inventory import HostSpec, Stage
from envdoctor.logsafe import get_logger
from envdoctor.modelfacts.document import mask_section, tokenizer_section
from envdoctor.modelfacts.model import (
    ModelConfigError,
    ModelFacts,
    choose_mask_token,
    dflash_target_layer_ids,
    eagle3_target_layer_ids,
    models_from_facts,
)
from envdoctor.operations.gather import gather_facts, resolve_venv
from envdoctor.stages.programs import DETACHER, SUPERVISOR
from envdoctor.transport.interface import OutputSink, Transport

log = get_logger(__name__)

DEFAULT_DRAFT_LAYERS = 5

#: Placeholders every stage may use, beside the facts of the model.
BASE_PLACEHOLDERS = ("python", "venv", "model", "host", "stage")
#: Facts placeholders, each a key of the facts document (dotted keys: nested objects).
FACT_PLACEHOLDERS: dict[str, str] = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_hidden_layers",
    "bos_token_id": "bos_token_id",
    "eos_token_id": "eos_token_id",
    "pad_token_id": "pad_token_id",
    "unk_token_id": "unk_token_id",
    "mask_token_id": "mask_token_id",
    "tokenizer_class": "tokenizer_class",
    "model_type": "model_type",
    "architecture": "architecture",
    "draft_layers": "dflash.draft_layers",
    "dflash_target_layer_ids": "dflash.target_layer_ids",
    "dflash_mask_token_id": "dflash.mask_token_id_candidate",
    "mask_token_id_candidate": "dflash.mask_token_id_candidate",
    "eagle3_target_layer_ids": "eagle3.target_layer_ids",
}
#: Facts whose values are numbers (ids, sizes, counts) or lists of numbers.
_INT_FACTS = ("vocab_size", "hidden_size", "num_hidden_layers", "bos_token_id", "eos_token_id", "pad_token_id",
              "unk_token_id", "mask_token_id", "draft_layers", "dflash_mask_token_id", "mask_token_id_candidate")
_INT_LIST_FACTS = ("dflash_target_layer_ids", "eagle3_target_layer_ids")
#: Facts that are names: a class name is an identifier; a model type may have '-' and '.'.
_NAME_FACTS = {"tokenizer_class": re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z"),
               "architecture": re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z"),
               "model_type": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")}
ENV_PREFIX = "ENVDOCTOR_"


def target_environment(spec: HostSpec, facts: HostFacts) -> Environment | None:
    return facts.env_at(spec.venv) if spec.venv else facts.default_env


def absolute_python(spec: HostSpec, facts: HostFacts) -> str | None:
    env = target_environment(spec, facts)
    if env is None or not env.runs:
        return None
    return env.python if spec.venv else (env.executable or env.python)


def model_for(spec: HostSpec, facts: HostFacts, model: str | None) -> ModelFacts | None:
    """The probed model the user named (the only one when they named none)."""
    models = models_from_facts(facts)
    if not spec.models:
        return None
    index = spec.models.index(model) if model in spec.models else 0
    if model is None and len(spec.models) > 1:
        raise UsageError(f"{spec.name} has {len(spec.models)} models; name one with --model")
    return models[index] if index < len(models) else None


def facts_document(spec: HostSpec, facts: HostFacts, model: ModelFacts | None, draft_layers: int) -> dict[str, Any]:
    """What the next stage reads: interpreter, tokenizer ids, architecture, drafter settings."""
    env = target_environment(spec, facts)
    doc: dict[str, Any] = {
        "host": spec.name,
        "python": absolute_python(spec, facts),
        "venv": spec.venv,
        "python_version": env.version if env else None,
        "model": model.path if model else None,
        "gpu": gpu_facts(facts.section("gpu-stack")),
        "problems": [],
    }
    node_gpu, node_host = node_documents(facts.section("node"), spec.stage_commands, spec.gpus)
    if node_gpu is not None:
        doc["gpu"] = {**(doc["gpu"] or {}), **node_gpu}
    doc["node"] = node_host
    if model is None:
        doc["problems"].append("no model directory given (--model DIR)")
        return doc
    arch_fields: Mapping[str, int | None] = {}
    try:
        arch = model.architecture()
    except ModelConfigError as exc:
        doc["problems"].append(str(exc))
        arch = None
    if arch is not None:
        arch_fields = arch.fields
        doc.update(
            architecture=arch.architectures[0] if arch.architectures else None,
            architectures=list(arch.architectures),
            model_type=arch.model_type,
            text_model_type=arch.text_model_type,
            config_nested_in=arch.nested_in,
        )
        doc["architecture_support"] = architecture_support(spec, facts, model)
    doc.update({name: arch_fields.get(name) for name in
                ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
                 "kv_lora_rank", "q_lora_rank", "n_routed_experts", "num_experts_per_tok")})
    tok = model.tokenizer()
    doc.update(tokenizer_section(model, tok, arch))
    if model.live is not None:
        trusted = model.live_result("trusted") or {}
        doc["rendered_chat_template"] = trusted.get("chat_template")
        doc["transformers"] = model.live.get("transformers")
    trusted_error = (model.live_result("trusted") or {}).get("error") or (model.live or {}).get("error")
    if trusted_error:
        doc["problems"].append(f"the tokenizer did not load with trust_remote_code=True: {trusted_error.splitlines()[-1]}")
    doc["ranks"] = model.ranks
    doc["files"] = {name: {k: v for k, v in entry.items() if k in ("sha256", "size")}
                    for name, entry in model.files.items()}
    doc["code_files"] = {c.name: c.sha256 for c in model.code}
    layers = arch_fields.get("num_hidden_layers")
    mask = choose_mask_token(tok, arch_fields.get("vocab_size"))
    doc["dflash"] = {
        "draft_layers": draft_layers,
        "target_layer_ids": dflash_target_layer_ids(layers, draft_layers) if layers else None,
        "mask_token_id_candidate": mask.token_id,
        **mask_section(mask),
    }
    installed = env.installed.get("speculators") if env else None
    speculators = installed.version if installed else None
    if layers:
        ids, rule = eagle3_target_layer_ids(layers, speculators)
    else:
        ids, rule = None, "no num_hidden_layers"
    doc["eagle3"] = {"target_layer_ids": ids, "speculators_version": speculators, "rule": rule}
    drop_invalid_facts(doc)
    return doc


def architecture_support(spec: HostSpec, facts: HostFacts, model: ModelFacts) -> dict[str, Any] | None:
    """Per installed engine (transformers, vllm, sglang): whether it loads the model, as which
    class and via which path (``architecture`` stays the class name config.json gives: the
    ``{architecture}`` placeholder of stage commands)."""
    from envdoctor.modelfacts.engines import ENGINES, judge_model

    section = facts.section("architecture")
    if not isinstance(section, dict) or not section.get("engines"):
        return None
    consent = dict.fromkeys(ENGINES, spec.trust_remote_code)
    try:
        return {engine: answer.to_json() for engine, answer in judge_model(section, model, consent).items()}
    except ModelConfigError:
        return None


def drop_invalid_facts(doc: dict[str, Any]) -> None:
    """A fact read from model files that lacks its shape (an id that is not an integer, a
    class name that is not an identifier) becomes null, with a problem saying why."""
    for name, key in FACT_PLACEHOLDERS.items():
        _value, why = valid_fact(name, lookup(doc, key))
        if why is None:
            continue
        *parents, last = key.split(".")
        holder: Any = doc
        for part in parents:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder[last] = None
        problem = f"the model's {why}; left out"
        if problem not in doc["problems"]:
            doc["problems"].append(problem)


def lookup(doc: Mapping[str, Any], dotted: str) -> Any:
    value: Any = doc
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def command_placeholders(template: str) -> list[str]:
    """The placeholder names a command uses; a malformed template is a usage error."""
    try:
        fields = [name for _, name, _spec, _conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise UsageError(f"stage command {template!r} is malformed: {exc}", hint="write a literal brace as {{ or }}") from None
    for name in fields:
        if name not in BASE_PLACEHOLDERS and name not in FACT_PLACEHOLDERS:
            known = ", ".join(sorted((*BASE_PLACEHOLDERS, *FACT_PLACEHOLDERS)))
            raise UsageError(f"unknown placeholder {{{name}}} in the stage command", hint=f"known placeholders: {known}")
    quoted = quoted_placeholders(template)
    if quoted:
        name = quoted[0]
        raise UsageError(
            f"the stage command puts {{{name}}} inside quotes (or after a backslash), where envdoctor's own "
            "quoting would be undone",
            hint=f"write {{{name}}} without quotes (envdoctor quotes every value), or use \"${env_name(name)}\"",
        )
    return fields


def quoted_placeholders(template: str) -> list[str]:
    """Placeholders that sit inside '...' or "..." of a POSIX shell command, or right after a
    backslash: a value quoted by shlex.quote there would close the quotes (or lose its
    opening one) and could open a command substitution instead."""
    found: list[str] = []
    state = ""  # "", "'" or '"'
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        escaped = False
        for char in literal:
            if escaped:
                escaped = False
            elif state == "'":
                state = "" if char == "'" else state
            elif char == "\\":
                escaped = True
            elif state == '"':
                state = "" if char == '"' else state
            elif char in "'\"":
                state = char
        if name is not None and (state or escaped):
            found.append(name)
    return found


def env_name(placeholder: str) -> str:
    return ENV_PREFIX + placeholder.upper()


def valid_fact(name: str, value: Any) -> tuple[Any, str | None]:
    """(value, None) when a fact read from model files has the shape it must have, else
    (None, why): ids are ints, class names identifiers, so that a hostile tokenizer_config
    cannot smuggle shell text into a command."""
    if value is None:
        return None, None
    if name in _INT_FACTS and (isinstance(value, bool) or not isinstance(value, int)):
        return None, f"{{{name}}} is {value!r}, not an integer"
    if name in _INT_LIST_FACTS and not (isinstance(value, (list, tuple))
                                        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return None, f"{{{name}}} is {value!r}, not a list of integers"
    pattern = _NAME_FACTS.get(name)
    if pattern is not None and not (isinstance(value, str) and pattern.match(value)):
        return None, f"{{{name}}} is {value!r}, not a plain name"
    return value, None


def as_word(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def render_command(template: str, values: Mapping[str, Any]) -> str:
    """Fill the placeholders, each value quoted for the shell (lists as 1,12,24)."""
    needed = command_placeholders(template)
    for name in dict.fromkeys(needed):
        _value, why = valid_fact(name, values.get(name))
        if why:
            raise EnvdoctorError(f"refusing to run the stage: the model's {why}",
                                 hint="the model's files hold a value no real model has; inspect them")
    empty = [name for name in dict.fromkeys(needed) if values.get(name) is None]
    if empty:
        raise EnvdoctorError(
            f"the stage needs {', '.join('{' + n + '}' for n in empty)}, which this host's facts do not provide",
            hint="`envdoctor facts HOST --model DIR` shows what is known",
        )
    return template.format_map({name: shlex.quote(as_word(values[name])) for name in needed})


def placeholder_values(spec: HostSpec, stage: Stage, doc: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {"python": doc.get("python"), "venv": spec.venv, "model": doc.get("model"),
                              "host": spec.name, "stage": stage.name}
    values.update({name: lookup(doc, key) for name, key in FACT_PLACEHOLDERS.items()})
    return values


def stage_environment(values: Mapping[str, Any]) -> dict[str, str]:
    """``ENVDOCTOR_<NAME>`` for every known, valid value: the safe way for a command to read facts."""
    env = {}
    for name, value in values.items():
        value, why = valid_fact(name, value)
        if value is not None and why is None:
            env[env_name(name)] = as_word(value)
    return env


@dataclass
class StageOutcome:
    """What ``run`` did: refused (with the failing checks), ran (exit status), or detached."""

    results: list[CheckResult] = field(default_factory=list)
    refused: list[CheckResult] = field(default_factory=list)
    command: str = ""
    exit_status: int | None = None
    pid: int | None = None
    log_path: str | None = None
    #: Why the host could not be checked (unreachable, timed out): nothing ran.
    problem: Problem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.refused


async def run_stage(
    transport: Transport,
    spec: HostSpec,
    stage: Stage,
    graph: CheckGraph,
    *,
    remedies: RemedySettings = RemedySettings(),
    model: str | None = None,
    draft_layers: int = DEFAULT_DRAFT_LAYERS,
    detach: bool = False,
    on_stdout: OutputSink,
    on_stderr: OutputSink,
    checks_timeout: float | None = None,
) -> StageOutcome:
    """Check what the stage requires, then run (or detach) its command on the open transport.
    ``checks_timeout`` bounds the checks (--timeout); the command itself runs as long as it runs."""
    import asyncio  # (run always streams over an event loop)

    command_placeholders(stage.command)
    async with asyncio.timeout(checks_timeout):
        spec = await resolve_venv(transport, spec)
        facts = await gather_or_raise(transport, spec)
    results = graph.evaluate(spec, facts, remedies, only=stage.requires) if stage.requires else []
    refused = [r for r in results if r.status.is_problem]
    if refused:
        from envdoctor.install.uv_remedy import with_host_installer  # (only when refused: start-up)

        results = with_host_installer(results, facts.uv)  # a venv without pip: the host's uv, as fix shows
        return StageOutcome(results=results, refused=[r for r in results if r.status.is_problem])
    doc = facts_document(spec, facts, model_for(spec, facts, model), draft_layers)
    values = placeholder_values(spec, stage, doc)
    for name in dict.fromkeys(command_placeholders(stage.command)):
        invalid = [p for p in doc.get("problems", []) if f"{{{name}}} is " in p]
        if invalid:  # the model's value was dropped as invalid: say so, not just "not provided"
            raise EnvdoctorError(f"refusing to run the stage: {invalid[0]}",
                                 hint="the model's files hold a value no real model has; inspect them")
    command = render_command(stage.command, values)
    log.info("stage_start", host=spec.name, stage=stage.name, command=command, detach=detach)
    python = doc.get("python") or "python3"
    args = [spec.venv or "", command, stage.name, json.dumps(stage_environment(values))]
    if detach:
        result = await transport.run([python, "-I", "-S", "-c", DETACHER, *args], timeout=60)
        try:
            started = json.loads(result.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
            pid, log_file = int(started["pid"]), str(started["log"])
        except (ValueError, IndexError, KeyError, TypeError):
            raise EnvdoctorError(f"could not start stage {stage.name} on {spec.name}: {result.stderr_tail(2)}") from None
        return StageOutcome(results, [], command, 0, pid, log_file)
    supervisor = [python, "-I", "-S", "-c", SUPERVISOR, *args]
    status = await transport.stream(supervisor, on_stdout=on_stdout, on_stderr=on_stderr)
    return StageOutcome(results, [], command, status)


async def gather_or_raise(transport: Transport, spec: HostSpec) -> HostFacts:
    facts = await gather_facts(transport, spec)
    if facts.problem is not None:
        raise TransportError(facts.problem.message, hint=facts.problem.hint or None)
    return facts


@dataclass(frozen=True)
class FactsOutcome:
    """One host's facts document (for a host that could not be probed: why, in ``problems``)."""

    doc: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.doc.get("problems")


def unavailable_document(spec: HostSpec, problem: Problem) -> dict[str, Any]:
    """The document of a host whose facts could not be gathered: who, and why."""
    return {"host": spec.name, "python": None, "venv": spec.venv, "model": None,
            "problems": [problem.message],
            "error": {"kind": problem.kind, "message": problem.message, "hint": problem.hint}}


def collect_facts(specs: Sequence[HostSpec], settings: FleetSettings, model: str | None,
                  draft_layers: int = DEFAULT_DRAFT_LAYERS, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Probe every host once and build its facts document for ``model`` (None: the host's one
    model); a host that cannot be probed gets a document that says why."""

    async def work(spec: HostSpec, transport: Transport) -> FactsOutcome:
        spec = await resolve_venv(transport, spec)
        facts = await gather_facts(transport, spec)
        if facts.problem is not None:
            return FactsOutcome(unavailable_document(spec, facts.problem))
        return FactsOutcome(facts_document(spec, facts, model_for(spec, facts, model), draft_layers))

    def on_problem(spec: HostSpec, problem: Problem) -> FactsOutcome:
        return FactsOutcome(unavailable_document(spec, problem))

    return [o.doc for o in execute(specs, settings, work, on_problem=on_problem, progress=progress)]


def run_stage_on_host(spec: HostSpec, stage: Stage, graph: CheckGraph, settings: FleetSettings,
                      **kwargs: Any) -> StageOutcome:
    """run_stage over a connection of its own (through the executor: a host that cannot be
    reached or checked in time is the outcome's ``problem``), closed when the command ends."""

    async def work(spec: HostSpec, transport: Transport) -> StageOutcome:
        return await run_stage(transport, spec, stage, graph, remedies=settings.remedies,
                               checks_timeout=settings.timeout, **kwargs)

    def on_problem(_spec: HostSpec, problem: Problem) -> StageOutcome:
        return StageOutcome(problem=problem)

    # The stage's command runs as long as it runs: --timeout bounds only its checks (above).
    (outcome,) = execute([spec], replace(settings, timeout=None), work, on_problem=on_problem, blocking_here=False)
    return outcome
