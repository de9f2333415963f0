"""Can the compiled stack run on this host's GPUs? Driver floors, kernels per GPU, extension ABI.

Decided from files the probe read (the driver's version files, nvidia-smi's answer,
torch/version.py, the ELF headers of torch's libraries and of every extension module),
never by importing torch. The three failures it finds otherwise show up only minutes into
a job: "CUDA driver version is insufficient", "no kernel image is available for execution
on the device", and an ImportError "undefined symbol" from an extension built for another
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envdoctor.checks._common import findings_result
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, errored

if TYPE_CHECKING:
    from envdoctor.gpu.stack import GpuStack
    from envdoctor.gpu.verdicts import Verdict

SECTION = "gpu-stack"


@check(
    "gpu.stack",
    facts=(SECTION,),
    title="GPU stack: driver, kernels for each GPU, extension ABI",
    requires=["host.python"],
    why="a driver below the CUDA floor, an extension without kernels for this GPU or built for another torch "
        "fails the job only after minutes of start-up",
)
def gpu_stack(ctx: CheckContext) -> CheckResult:
    from envdoctor.gpu.demangle import demangle  # (the GPU tables load only when this check runs)
    from envdoctor.gpu.stack import GpuStack
    from envdoctor.gpu.verdicts import judge

    if unread := ctx.section_failed(SECTION, "the probe could not read the GPU stack"):
        return unread
    raw = ctx.facts.section(SECTION)
    if not isinstance(raw, dict):
        return errored("the probe returned no GPU stack facts")
    try:
        stack = GpuStack.from_probe(raw)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a host's answer is untrusted input
        return errored(f"the probe's GPU stack facts are malformed ({type(exc).__name__}: {exc})")
    # c++filt runs on the controller, for the message only (a local, deterministic translation).
    verdict = judge(stack, getattr(ctx.spec, "gpus", None), demangle)
    return result_of(stack, verdict)


def result_of(stack: GpuStack, verdict: Verdict) -> CheckResult:
    from envdoctor.gpu.document import gpu_document

    details: dict[str, Any] = {"gpu": gpu_document(stack)}
    if verdict.skipped:
        details["skipped"] = verdict.skipped
    return findings_result(verdict.findings, _summary(stack, verdict), details)


def _summary(stack: GpuStack, verdict: Verdict) -> str:
    parts = []
    if stack.torch_version:
        parts.append(f"torch {stack.torch_version}" + (f" (CUDA {stack.torch_cuda})" if stack.torch_cuda else ""))
    else:
        parts.append("no torch in the environment")
    checked = [b for b in stack.binaries if b.kind == "extension"]
    abi = sum(1 for b in checked if b.needed and any(n.startswith(("libc10", "libtorch")) for n in b.needed))
    parts.append(f"{len(checked)} extension module(s), {abi} linked against torch: ABI consistent")
    if verdict.skipped:
        parts.append(verdict.skipped)
    else:
        gpus = ", ".join(sorted({f"{g.name} (CC {g.cc_text})" for g in stack.gpus}))
        parts.append(f"driver {stack.driver.version}; {len(stack.gpus)} GPU(s): {gpus}: kernels for every GPU")
    return "; ".join(parts)
