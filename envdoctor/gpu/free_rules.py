"""gpu.free: can the job get its GPUs and its share of their memory? Pure.

For each stage that runs on the host (or the default when none is named), the GPUs it will
see (:mod:`envdoctor.gpu.visible`) are counted against what it starts on, and the free
memory of each GPU it will use against the share it asks for (:mod:`envdoctor.gpu.job`).
vLLM refuses to start when "Free memory on device ... is less than desired GPU memory
utilization"; SGLang's static memory pool fails the same way; a training job runs out of
memory minutes in. The processes holding the memory are named (pid, user, command).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from envdoctor.gpu.job import JobAsk
from envdoctor.gpu.node import NodeFacts
from envdoctor.gpu.smi_xml import GpuState
from envdoctor.gpu.verdicts import Finding
from envdoctor.gpu.visible import Visible, visible_gpus


@dataclass(frozen=True)
class JobView:
    """One stage's view of the node: what it sees, which GPUs it will use, and the findings."""

    ask: JobAsk
    visible: Visible
    used: tuple[int, ...]
    needed: int | None
    findings: tuple[Finding, ...]


def judge_free(node: NodeFacts, asks: Sequence[JobAsk], expected: int | None) -> list[JobView]:
    return [job_view(node, ask, expected, prefix=f"stage `{ask.label}`: " if len(asks) > 1 else "") for ask in asks]


def job_view(node: NodeFacts, ask: JobAsk, expected: int | None, *, prefix: str = "") -> JobView:
    visible = visible_gpus(node.gpus, ask.env, node.env)
    needed = ask.gpus or expected or None
    seen = visible.indices[ask.base_gpu:]
    used = seen[:needed] if needed else seen
    findings = [Finding(f.level, f.part, prefix + f.message, f.remedy) for f in
                visibility(node, ask, visible, needed, len(seen)) + memory(node, ask, used)]
    return JobView(ask, visible, tuple(used), needed, tuple(findings))


def _cvd(visible: Visible) -> str:
    return f"CUDA_VISIBLE_DEVICES={visible.value!r} (set in {visible.source})"


def visibility(node: NodeFacts, ask: JobAsk, visible: Visible, needed: int | None, seen: int) -> list[Finding]:
    out: list[Finding] = []
    total = len(node.gpus)
    fix = ("set CUDA_VISIBLE_DEVICES to the GPUs the job should use (or unset it) in the stage's command or the "
           "host's environment")
    if visible.invalid:
        out.append(Finding("warn", "visible", f"{_cvd(visible)} stops at {visible.invalid[0]!r}, which names no GPU of "
                           f"this node (or one named before): CUDA shows only the {len(visible.indices)} GPU(s) "
                           "listed before it", fix))
    out += [Finding("warn", "visible", note, "set CUDA_DEVICE_ORDER=PCI_BUS_ID beside CUDA_VISIBLE_DEVICES")
            for note in visible.notes]
    base = f" from --base-gpu-id {ask.base_gpu}" if ask.base_gpu else ""
    hidden = f"; {_cvd(visible)} shows {len(visible.indices)} of the node's {total}" if visible.restricted else ""
    if needed and seen < needed:
        wanted = ask.gpus_from or f"gpus = {needed}"
        out.append(Finding("fail", "visible", f"the job starts on {needed} GPU(s) ({wanted}) but sees {seen}{base}"
                           f"{hidden}", fix if visible.restricted else
                           "run the job where it can have enough GPUs, or ask for fewer (tensor/pipeline size)"))
    elif total and not visible.indices:
        out.append(Finding("fail", "visible", f"the job sees no GPU{hidden}", fix))
    return out


def memory(node: NodeFacts, ask: JobAsk, used: Sequence[int]) -> list[Finding]:
    short: list[tuple[GpuState, int]] = []
    unknown = []
    for index in used:
        gpu = node.gpus[index]
        if gpu.mig_enabled:
            continue  # the whole GPU's memory says nothing of a MIG instance's (gpu.health reports MIG)
        if gpu.total_mib is None or gpu.free_mib is None:
            unknown.append(gpu)
            continue
        need = math.ceil(ask.fraction * gpu.total_mib)
        if gpu.free_mib < need:
            short.append((gpu, need))
    out = [Finding("fail", "free", _short_message(node, ask, gpu, need), _remedy(node, ask, gpu, short))
           for gpu, need in short]
    if unknown:
        names = ", ".join(f"GPU {g.index}" for g in unknown)
        out.append(Finding("info", "free", f"free memory of {names} is unknown (nvidia-smi printed none)"))
    return out


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f} GiB"


def _short_message(node: NodeFacts, ask: JobAsk, gpu: GpuState, need: int) -> str:
    holders = node.holders_on(gpu.index)
    asked = f"{ask.fraction:g} ({ask.fraction_from})" if ask.fraction_from != "default" else \
        f"{ask.fraction:g} (default threshold: vLLM's default --gpu-memory-utilization)"
    text = (f"GPU {gpu.index} ({gpu.name}) has {_gib(gpu.free_mib)} free of {_gib(gpu.total_mib)}; the job asks for "
            f"{asked} = {_gib(need)}")
    if holders:
        text += "; held by " + "; ".join(h.describe() for h in holders[:4])
        if len(holders) > 4:
            text += f" and {len(holders) - 4} more"
    elif gpu.used_mib:
        text += (f"; {_gib(gpu.used_mib)} in use by processes nvidia-smi does not list here (another container's, "
                 "or a process this user may not see)")
    return text


def _remedy(node: NodeFacts, ask: JobAsk, gpu: GpuState, short: Sequence[tuple[GpuState, int]]) -> str:
    pids = [h for h in node.holders_on(gpu.index) if h.in_namespace]
    steps = []
    if pids:
        steps.append("stop what holds the memory (" + ", ".join(
            f"kill {h.pid}" + (f" as {h.user}" if h.user else "") for h in pids[:4]) + ", or stop the service that "
            "started it)")
    else:
        steps.append("stop the job that holds the memory (nvidia-smi --query-compute-apps=pid,used_memory "
                     "--format=csv lists it)")
    free_ratio = min((g.free_mib or 0) / g.total_mib for g, _ in short if g.total_mib)
    steps.append("or choose free GPUs with CUDA_VISIBLE_DEVICES")
    if free_ratio >= 0.3:  # a share that small would hold no model: not worth suggesting
        knob = ask.fraction_from.split()[0] if ask.fraction_from != "default" else "--gpu-memory-utilization"
        steps.append(f"or lower {knob} to {math.floor(free_ratio * 100 - 1) / 100:.2f} or less")
    return ", ".join(steps)
