"""What a GPU node has, laid out on disk for the diff and snapshot tests: an nvidia-smi that
answers as the real one does (-L, --query-gpu, topo -m), a driver root (ENVDOCTOR_SYSFS_ROOT),
torch's version file, and distribution metadata with a RECORD (what pip writes for a wheel)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from tests.gpu_layouts import fake_driver_root

__all__ = ["fake_driver_root", "fake_smi", "fake_torch", "metadata_only_distribution"]


def fake_smi(folder: Path, gpus: list[tuple[str, str]], driver: str) -> Path:
    """nvidia-smi for `gpus` [(name, compute capability)] with driver `driver`: `-L` lists them
    with UUIDs, `--query-gpu=FIELDS --format=csv,noheader` answers the fields asked for, `topo -m`
    prints a matrix."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = "".join(f"GPU {i}: {name} (UUID: GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd)\\n"
                      for i, (name, _) in enumerate(gpus))
    query = "".join(f"{name}, {cc}, {driver}\\n" for name, cc in gpus)
    query_short = "".join(f"{name}, {driver}\\n" for name, _ in gpus)
    header = "\\t" + "\\t".join(f"GPU{i}" for i in range(len(gpus))) + "\\tCPU Affinity\\n"
    rows = "".join(f"GPU{i}\\t" + "\\t".join(" X " if i == j else "NV18" for j in range(len(gpus)))
                   + "\\t0-63\\n" for i in range(len(gpus)))
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  -L) printf '{listing}' ;;\n"
        f"  --query-gpu=name,compute_cap,driver_version) printf '{query}' ;;\n"
        f"  --query-gpu=name,driver_version) printf '{query_short}' ;;\n"
        f"  topo) printf '{header}{rows}' ;;\n"
        "  *) echo \"unknown option $1\" >&2; exit 2 ;;\n"
        "esac\n")
    script.chmod(0o755)
    return script


def site_of(prefix: Path) -> Path:
    found = sorted((prefix / "lib").glob("python3*/site-packages"))
    site = found[0] if found else prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    return site


def fake_torch(prefix: Path, version: str, cuda: str | None, *, debug: bool = False) -> Path:
    """torch/version.py as torch's wheels write it (only the facts envdoctor reads; no code)."""
    folder = site_of(prefix) / "torch"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "version.py").write_text(
        "from typing import Optional\n\n"
        f"__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n__version__ = '{version}'\n"
        f"debug = {debug}\ncuda: Optional[str] = {cuda!r}\ngit_version = '{'0' * 40}'\nhip: Optional[str] = None\n")
    return folder / "version.py"


def metadata_only_distribution(prefix: Path, name: str, version: str) -> Path:
    """A distribution whose wheel holds only its metadata (as a placeholder wheel does), with its
    RECORD, so that its version is what the venv reports."""
    site = site_of(prefix)
    meta = site / f"{name.replace('-', '_')}-{version}.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n"
    (meta / "METADATA").write_text(metadata)
    digest = base64.urlsafe_b64encode(hashlib.sha256(metadata.encode()).digest()).rstrip(b"=").decode()
    (meta / "RECORD").write_text(f"{meta.name}/METADATA,sha256={digest},{len(metadata)}\n{meta.name}/RECORD,,\n")
    return meta
