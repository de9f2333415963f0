"""The hand-off to the job: the facts a stage needs, and running a stage's command.

``envdoctor facts`` turns one probe run into the JSON the next stage reads (absolute
interpreter, tokenizer ids, architecture, drafter settings). ``envdoctor run`` runs the
checks a stage requires and, only when they pass, its command with the venv's absolute
interpreter over the same connection. Placeholders in the command are filled with values
quoted by ``shlex``; a placeholder no fact provides is a usage error before anything runs.
"""

from __future__ import annotations

import os
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from envdoctor.errors import EnvdoctorError, TransportError, UsageError
from envdoctor.facts import Environment, HostFacts
from envdoctor.fleet import FleetSettings, open_transport
from envdoctor.gather import gather_facts
from envdoctor.graph import CheckGraph, RemedySettings
from envdoctor.inventory import HostSpec, Stage
from envdoctor.logsafe import get_logger
from envdoctor.models import (
    ModelConfigError,
    ModelFacts,
    choose_mask_token,
    dflash_target_layer_ids,
    eagle3_target_layer_ids,
    models_from_facts,
)
from envdoctor.results import CheckResult
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
#: Start of the wrapper that runs a stage: the venv's bin first on PATH, as `activate` does.
_STAGE_ENV = 'if [ -n "$1" ]; then VIRTUAL_ENV=$1; PATH=$1/bin:$PATH; export VIRTUAL_ENV PATH; fi; '
#: Runs a stage's command on the host (Python 3.6+, stdlib) in a process group of its own,
#: and stops that group when its stdin closes: over SSH without a pty, a Ctrl-C or a dropped
#: connection would otherwise leave a training job running with nobody watching it.
_SUPERVISOR = r"""
import os, signal, subprocess, sys, threading
venv, command = sys.argv[1], sys.argv[2]
env = dict(os.environ)
if venv:
    env["VIRTUAL_ENV"] = venv
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
child = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, env=env, start_new_session=True)

def stop_when_client_leaves():
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        if child.poll() is not None:
            return
        try:
            os.killpg(child.pid, sig)
        except OSError:
            return
        if grace:
            try:
                child.wait(grace)
            except subprocess.TimeoutExpired:
                pass

threading.Thread(target=stop_when_client_leaves, daemon=True).start()
status = child.wait()
# os._exit: the watcher thread is still blocked in read(); a normal exit would wait on it.
os._exit(128 - status if status < 0 else status)
"""
_DETACH_WRAPPER = _STAGE_ENV + (
    'log=$3; mkdir -p "$(dirname "$log")" || exit 1; '
    'nohup sh -c "$2" > "$log" 2>&1 < /dev/null & echo "$!"'
)


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
        "problems": [],
    }
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
    doc.update({name: arch_fields.get(name) for name in
                ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
                 "kv_lora_rank", "q_lora_rank", "n_routed_experts", "num_experts_per_tok")})
    tok = model.tokenizer()
    doc["tokenizer_class"] = tok.tokenizer_class
    doc["tokenizer_facts_from"] = tok.source
    for role in ("bos", "eos", "pad", "unk", "mask"):
        doc[f"{role}_token"] = tok.tokens.get(role)
        doc[f"{role}_token_id"] = tok.ids.get(role)
    doc["tokenizer_len"] = tok.length
    doc["tokenizer_vocab_size"] = tok.vocab_size
    doc["special_tokens"] = len(tok.special)
    doc["chat_template"] = model.chat_template is not None
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
        "mask_token_candidate": mask.token,
        "mask_token_source": mask.source,
        "mask_token_note": mask.message,
    }
    installed = env.installed.get("speculators") if env else None
    speculators = installed.version if installed else None
    if layers:
        ids, rule = eagle3_target_layer_ids(layers, speculators)
    else:
        ids, rule = None, "no num_hidden_layers"
    doc["eagle3"] = {"target_layer_ids": ids, "speculators_version": speculators, "rule": rule}
    return doc


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
    return fields


def as_word(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def render_command(template: str, values: Mapping[str, Any]) -> str:
    """Fill the placeholders, each value quoted for the shell (lists as 1,12,24)."""
    needed = command_placeholders(template)
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


@dataclass
class StageOutcome:
    """What ``run`` did: refused (with the failing checks), ran (exit status), or detached."""

    results: list[CheckResult] = field(default_factory=list)
    refused: list[CheckResult] = field(default_factory=list)
    command: str = ""
    exit_status: int | None = None
    pid: int | None = None
    log_path: str | None = None


def log_path_for(spec: HostSpec, stage: Stage, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    folder = os.path.join(spec.venv, ".envdoctor", "logs") if spec.venv else "/tmp/envdoctor-logs"
    return os.path.join(folder, f"{stage.name}-{stamp}.log")


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
) -> StageOutcome:
    """Check what the stage requires, then run (or detach) its command on the open transport."""
    command_placeholders(stage.command)
    facts = await gather_or_raise(transport, spec)
    results = graph.evaluate(spec, facts, remedies, only=stage.requires) if stage.requires else []
    refused = [r for r in results if r.status.is_problem]
    if refused:
        return StageOutcome(results=results, refused=refused)
    doc = facts_document(spec, facts, model_for(spec, facts, model), draft_layers)
    command = render_command(stage.command, placeholder_values(spec, stage, doc))
    log.info("stage_start", host=spec.name, stage=stage.name, command=command, detach=detach)
    if detach:
        log_file = log_path_for(spec, stage)
        result = await transport.run(["sh", "-c", _DETACH_WRAPPER, "envdoctor-stage", spec.venv or "", command, log_file],
                                     timeout=60)
        if not result.ok or not result.stdout.strip().isdigit():
            raise EnvdoctorError(f"could not start stage {stage.name} on {spec.name}: {result.stderr_tail(2)}")
        return StageOutcome(results, [], command, 0, int(result.stdout.strip()), log_file)
    supervisor = [doc.get("python") or "python3", "-I", "-c", _SUPERVISOR, spec.venv or "", command]
    status = await transport.stream(supervisor, on_stdout=on_stdout, on_stderr=on_stderr)
    return StageOutcome(results, [], command, status)


async def gather_or_raise(transport: Transport, spec: HostSpec) -> HostFacts:
    facts = await gather_facts(transport, spec)
    if facts.problem is not None:
        raise TransportError(facts.problem.message, hint=facts.problem.hint or None)
    return facts


async def collect_facts_document(
    spec: HostSpec, settings: FleetSettings, model: str | None, draft_layers: int = DEFAULT_DRAFT_LAYERS
) -> dict[str, Any]:
    """Connect, probe once, and build the facts document for one model."""
    async with open_transport(spec, settings) as transport:
        facts = await gather_or_raise(transport, spec)
    return facts_document(spec, facts, model_for(spec, facts, model), draft_layers)


async def run_stage_on_host(spec: HostSpec, stage: Stage, graph: CheckGraph, settings: FleetSettings,
                            **kwargs: Any) -> StageOutcome:
    """run_stage over a connection of its own, closed when the command ends."""
    async with open_transport(spec, settings) as transport:
        return await run_stage(transport, spec, stage, graph, remedies=settings.remedies, **kwargs)
