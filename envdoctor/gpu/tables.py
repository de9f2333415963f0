"""The facts the GPU check compares with, as data: every row names its source.

A question no row answers is "unknown" (None), never a guess. Versions are Linux x86_64
driver versions as NVIDIA prints them; toolkits are "major.minor" as torch/version.py
records its CUDA runtime (the GA release of that minor version).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RELEASE_NOTES = "NVIDIA CUDA Toolkit Release Notes, table 'CUDA Toolkit and Corresponding Driver Versions' (Linux x86_64, GA)"
MINOR_COMPAT = "NVIDIA CUDA Compatibility guide, 'Minor Version Compatibility', table 1"
PTX_ISA = "NVIDIA PTX ISA documentation, 'Release Notes' (PTX ISA version per CUDA release)"
CUDA_GPUS = "NVIDIA developer.nvidia.com/cuda-gpus (compute capability per product)"


@dataclass(frozen=True)
class Row:
    key: str
    value: str
    source: str


#: CUDA toolkit -> minimum Linux driver for code built with it (machine code and PTX of
#: that toolkit's ISA).
TOOLKIT_MIN_DRIVER: tuple[Row, ...] = tuple(Row(k, v, RELEASE_NOTES) for k, v in (
    ("11.0", "450.36.06"), ("11.1", "455.23"), ("11.2", "460.27.03"), ("11.3", "465.19.01"),
    ("11.4", "470.42.01"), ("11.5", "495.29.05"), ("11.6", "510.39.01"), ("11.7", "515.43.04"),
    ("11.8", "520.61.05"), ("12.0", "525.60.13"), ("12.1", "530.30.02"), ("12.2", "535.54.03"),
    ("12.3", "545.23.06"), ("12.4", "550.54.14"), ("12.5", "555.42.02"), ("12.6", "560.28.03"),
    ("12.8", "570.26"), ("12.9", "575.51.03"), ("13.0", "580.65.06"),
))

#: CUDA major -> the oldest driver minor-version compatibility runs it on. Below it the
#: runtime refuses ("CUDA driver version is insufficient"); between it and the toolkit's own
#: minimum, machine code runs but PTX newer than the driver cannot be JIT-compiled.
MAJOR_FLOOR: tuple[Row, ...] = (
    Row("11", "450.80.02", MINOR_COMPAT),
    Row("12", "525.60.13", MINOR_COMPAT),
    Row("13", "580.65.06", MINOR_COMPAT + " ('>= 580'; 580.65.06 is the 13.0 GA driver)"),
)

#: PTX ISA version -> the CUDA toolkit that introduced it (its driver can JIT it).
PTX_ISA_TOOLKIT: tuple[Row, ...] = tuple(Row(k, v, PTX_ISA) for k, v in (
    ("7.0", "11.0"), ("7.1", "11.1"), ("7.2", "11.2"), ("7.3", "11.3"), ("7.4", "11.4"), ("7.5", "11.5"),
    ("7.6", "11.6"), ("7.7", "11.7"), ("7.8", "11.8"), ("8.0", "12.0"), ("8.1", "12.1"), ("8.2", "12.2"),
    ("8.3", "12.3"), ("8.4", "12.4"), ("8.5", "12.5"), ("8.7", "12.8"), ("8.8", "12.9"), ("9.0", "13.0"),
))

#: Compute capability (GPU generation) -> the first toolkit that compiles for it, whose
#: minimum driver is then the oldest driver that knows the GPU.
_FIRST_TOOLKIT = "derived: first CUDA toolkit listing this sm_XY in its release notes, and that toolkit's minimum driver"
GENERATION_TOOLKIT: tuple[Row, ...] = tuple(Row(k, v, _FIRST_TOOLKIT) for k, v in (
    ("8.0", "11.0"), ("8.6", "11.1"), ("8.9", "11.8"), ("9.0", "11.8"), ("10.0", "12.8"), ("12.0", "12.8"),
    ("10.3", "12.9"), ("12.1", "12.9"),
))

#: GPU product name -> compute capability (used when nvidia-smi cannot print compute_cap).
#: Matched as whole words against the name nvidia-smi prints, longest name first.
GPU_NAMES: tuple[Row, ...] = tuple(Row(k, v, CUDA_GPUS) for k, v in (
    ("GB300", "10.3"), ("B300", "10.3"), ("GB200", "10.0"), ("B200", "10.0"), ("GB10", "12.1"),
    ("RTX PRO 6000 Blackwell", "12.0"), ("RTX 5090", "12.0"), ("RTX 5080", "12.0"), ("RTX 5070", "12.0"),
    ("GH200", "9.0"), ("H200", "9.0"), ("H100", "9.0"), ("H800", "9.0"), ("H20", "9.0"),
    ("L40S", "8.9"), ("L40", "8.9"), ("L4", "8.9"), ("L20", "8.9"), ("RTX 6000 Ada", "8.9"), ("RTX 4090", "8.9"),
    ("RTX 4080", "8.9"), ("A100", "8.0"), ("A800", "8.0"), ("A30", "8.0"), ("A40", "8.6"), ("A10G", "8.6"),
    ("A10", "8.6"), ("A16", "8.6"), ("A2", "8.6"), ("RTX A6000", "8.6"), ("RTX A5000", "8.6"), ("RTX 3090", "8.6"),
    ("RTX 3080", "8.6"), ("T4", "7.5"), ("RTX 2080 Ti", "7.5"), ("Quadro RTX 8000", "7.5"), ("TITAN RTX", "7.5"),
    ("V100", "7.0"), ("TITAN V", "7.0"), ("P100", "6.0"), ("P40", "6.1"), ("P4", "6.1"), ("GTX 1080 Ti", "6.1"),
    ("GTX 1080", "6.1"), ("K80", "3.7"),
))


def version_key(text: str | None) -> tuple[int, ...] | None:
    """'570.86.15' -> (570, 86, 15); None for anything that is not a dotted number."""
    if not text or not re.fullmatch(r"\d+(\.\d+)*", text.strip()):
        return None
    return tuple(int(p) for p in text.strip().split("."))


def lookup(rows: tuple[Row, ...], key: str | None) -> Row | None:
    for row in rows:
        if row.key == key:
            return row
    return None


def toolkit_min_driver(cuda: str | None) -> Row | None:
    return lookup(TOOLKIT_MIN_DRIVER, _major_minor(cuda))


def major_floor(cuda: str | None) -> Row | None:
    mm = _major_minor(cuda)
    return lookup(MAJOR_FLOOR, mm.split(".")[0]) if mm else None


def ptx_min_driver(isa: str | None) -> Row | None:
    """The driver that can JIT-compile PTX of this ISA version (via the toolkit table)."""
    toolkit = lookup(PTX_ISA_TOOLKIT, isa)
    return toolkit_min_driver(toolkit.value) if toolkit else None


def generation_min_driver(cc: str | None) -> tuple[Row, Row] | None:
    """(toolkit row, driver row) for a GPU generation; None when unknown."""
    toolkit = lookup(GENERATION_TOOLKIT, cc)
    driver = toolkit_min_driver(toolkit.value) if toolkit else None
    return (toolkit, driver) if toolkit and driver else None


def cc_from_name(name: str) -> Row | None:
    """The compute capability of a GPU product by its name, matched as whole words."""
    text = " " + re.sub(r"[^A-Za-z0-9]+", " ", name).upper() + " "
    for row in sorted(GPU_NAMES, key=lambda r: -len(r.key)):
        if " " + re.sub(r"[^A-Za-z0-9]+", " ", row.key).upper() + " " in text:
            return row
    return None


def _major_minor(cuda: str | None) -> str | None:
    found = re.match(r"^(\d+)\.(\d+)", cuda or "")
    return f"{found.group(1)}.{found.group(2)}" if found else None
