"""The arguments of the probe's ``system`` and ``digests`` sections for a host.

Which distributions a job imports: those its requirements name (``requires``, ``--require``),
those ``--scan`` names, the module a stage of the host runs, and the libraries of the
serving and training stacks envdoctor is for; the host adds what they require (extras
aside). Which environment variables matter: those a GPU job reads (NCCL, CUDA, the Hugging
Face libraries, torch, the serving frameworks), with secrets masked on the host by the
patterns of :mod:`envdoctor.logsafe`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from envdoctor.inventory import HostSpec
from envdoctor.logsafe import SECRET_NAME, SECRET_VALUE

#: The stacks' libraries, read when installed: serving, training, kernels, tokenizers.
JOB_DISTRIBUTIONS = (
    "torch", "transformers", "tokenizers", "safetensors", "huggingface-hub", "tiktoken", "sentencepiece",
    "vllm", "sglang", "sgl-kernel", "flashinfer-python", "triton", "xformers", "flash-attn", "speculators",
    "accelerate", "deepspeed", "peft", "datasets", "nvidia-nccl-cu12", "nvidia-nccl-cu13",
)
#: Environment variables a multi-node GPU job reads: compared by ``diff`` and ``check`` of a
#: ``same = true`` group, and shown by ``snapshot``.
JOB_ENV_PREFIXES = ("NCCL_", "CUDA_", "HF_", "TORCH_", "PYTORCH_", "NVIDIA_", "CUBLAS_", "CUDNN_", "TRANSFORMERS_",
                    "TOKENIZERS_", "VLLM_", "SGLANG_", "SGL_", "TRITON_", "FLASHINFER_", "OMP_", "MKL_", "UCX_",
                    "GLOO_", "TIKTOKEN_")
JOB_ENV_NAMES = ("LD_LIBRARY_PATH", "CUDA_HOME", "ROCM_HOME", "LD_PRELOAD")
#: Bytes and seconds a host may spend hashing in one run (a re-run reads only what changed).
DIGEST_BUDGET_BYTES = 2 << 30
DIGEST_BUDGET_SECONDS = 120.0

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(text: str) -> str | None:
    """The distribution a PEP 508 requirement names (validated when the inventory was read)."""
    found = _NAME.match(text)
    return found.group(1) if found else None


def job_distribution_names(spec: HostSpec) -> list[str]:
    from envdoctor.drift.request import stage_scope

    names = [n for n in (requirement_name(r) for r in spec.requires) if n]
    names += list(spec.scan)
    names += [entry.split(".")[0] for entry in stage_scope(spec.stage_commands).entries
              if "/" not in entry and not entry.endswith(".py")]  # `-m pkg.mod`, not a script
    names += JOB_DISTRIBUTIONS
    return list(dict.fromkeys(names))


def digests_request(spec: HostSpec) -> Mapping[str, Any]:
    return {"prefix": spec.venv or "", "distributions": job_distribution_names(spec), "closure": True,
            "models": list(spec.models), "budget_bytes": DIGEST_BUDGET_BYTES, "seconds": DIGEST_BUDGET_SECONDS}


def system_request(_spec: HostSpec) -> Mapping[str, Any]:
    # The patterns travel as text with their flags inline: the host masks before anything is sent.
    return {"prefixes": list(JOB_ENV_PREFIXES), "names": list(JOB_ENV_NAMES),
            "secret_name": f"(?i){SECRET_NAME.pattern}", "secret_value": f"(?s){SECRET_VALUE.pattern}",
            "topology": False}
