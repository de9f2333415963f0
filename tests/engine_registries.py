"""The real registry files of released transformers, vLLM and SGLang wheels, for model.architecture.

A wheel is fetched once with ``pip download --no-deps`` (vLLM's are about 500 MB: it is
deleted as soon as the few files are out), and only the files the ``architecture`` section
reads are kept, laid out as in site-packages beside the wheel's own dist-info (METADATA,
WHEEL, RECORD), under ``~/.cache/envdoctor-tests/registries/<name>-<version>/``. Later
sessions use that folder and download nothing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import venv as venv_module
import zipfile
from pathlib import Path

#: Under the real home: a test that points HOME elsewhere still finds what an earlier session kept.
CACHE = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "envdoctor-tests" / "registries"
DONE = ".complete"


def wanted(name: str, member: str) -> bool:
    """The files of a wheel the architecture section reads (and the dist-info)."""
    top = member.split("/", 1)[0]
    if top.endswith(".dist-info"):
        return member.rsplit("/", 1)[-1] in ("METADATA", "WHEEL", "RECORD", "entry_points.txt")
    if not member.endswith(".py"):
        return False
    if name == "transformers":
        return member.startswith("transformers/models/auto/")
    if name == "vllm":
        return member in ("vllm/model_executor/models/registry.py", "vllm/transformers_utils/config.py")
    if name == "sglang":
        return (member.startswith("sglang/srt/models/") and member.count("/") == 3) or \
            member.startswith("sglang/srt/configs/") or member.endswith("hf_transformers_utils.py")
    return False


def registry_files(name: str, version: str) -> Path:
    """A folder laid out like site-packages with the registry files of name==version."""
    folder = CACHE / f"{name}-{version}"
    if (folder / DONE).is_file():
        return folder
    with tempfile.TemporaryDirectory(prefix="envdoctor-wheel-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir",
                        "--only-binary", ":all:", "--disable-pip-version-check", "--platform", "manylinux_2_31_x86_64",
                        "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64",
                        "--python-version", "3.11", "-d", tmp, f"{name}=={version}"], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if wanted(name, member) and ".." not in member.split("/"):
                    target = staging / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(member))
    (staging / DONE).write_text(f"{name}=={version}\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


def environment(root: Path, *requirements: str) -> Path:
    """A real venv (no pip) under root whose site-packages holds the registry files of each
    ``name==version`` (copied, so a test may change them)."""
    prefix = root / "-".join(r.replace("==", "-") for r in requirements)
    if (prefix / DONE).is_file():
        return prefix
    venv_module.EnvBuilder(with_pip=False, clear=True).create(prefix)
    site = next((prefix / "lib").glob("python3*/site-packages"))
    for requirement in requirements:
        name, version = requirement.split("==")
        source = registry_files(name, version)
        for entry in source.iterdir():
            if entry.name != DONE:
                shutil.copytree(entry, site / entry.name, dirs_exist_ok=True)
    (prefix / DONE).write_text("\n".join(requirements) + "\n")
    return prefix
