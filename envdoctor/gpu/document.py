"""The ``gpu`` object of ``facts --format json`` and of the gpu.stack check's details."""

from __future__ import annotations

from typing import Any

from envdoctor.gpu.stack import GpuStack, usability


def gpu_document(stack: GpuStack) -> dict[str, Any]:
    """Driver, GPUs, torch and, per binary with GPU code, its archs and what each GPU can run
    (``yes``, ``partial``, ``ptx`` when only through JIT, ``no``)."""
    driver = stack.driver
    binaries = []
    for binary in stack.binaries:
        entry: dict[str, Any] = {
            "path": binary.path, "relpath": binary.relpath, "role": binary.role,
            "distribution": binary.distribution, "version": binary.version,
        }
        if binary.has_fatbin:
            entry.update(sass=binary.sass, ptx=binary.ptx, containers=sum(c.count for c in binary.containers))
            runs = {}
            for gpu in stack.gpus:
                if gpu.cc is None:
                    runs[str(gpu.index)] = "unknown"
                    continue
                use = usability(binary, gpu.cc, driver.version)
                runs[str(gpu.index)] = ("no" if use.none else "partial" if use.partial
                                        else "ptx" if use.ptx_only else "yes")
            entry["runnable"] = runs
        if binary.kind == "extension":
            entry.update(torch_pin=binary.torch_pin, missing_symbols=list(binary.missing),
                         missing_count=binary.missing_count, torch_libs_absent=list(binary.torch_libs_absent))
        if binary.error:
            entry["error"] = binary.error
        binaries.append(entry)
    return {
        "driver": {"version": driver.version, "source": driver.source or None, "kernel_module": driver.kernel,
                   "libcuda": driver.user_space, "cuda_compat": driver.compat, "notes": list(driver.notes)},
        "root": stack.root,
        "gpus": [{"index": g.index, "name": g.name, "compute_capability": g.cc_text if g.cc else None,
                  "compute_capability_source": g.cc_source} for g in stack.gpus],
        "nvidia_smi": stack.smi, "nvidia_smi_error": stack.smi_error,
        "torch": {"version": stack.torch_version, "cuda": stack.torch_cuda} if stack.torch_version else None,
        "binaries": binaries,
        "probe_seconds": stack.raw.get("seconds"),
    }


def gpu_facts(section: Any) -> dict[str, Any] | None:
    """The ``gpu`` object of ``facts --format json`` from the probe's gpu-stack section
    (None when the probe did not read it)."""
    if not isinstance(section, dict):
        return None
    try:
        return gpu_document(GpuStack.from_probe(section))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a host's answer is untrusted input
        return {"error": f"the probe's GPU stack facts are malformed ({type(exc).__name__})"}
