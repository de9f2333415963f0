"""Real provider and consumer code for the API-drift tests, from PyPI.

speculators comes as its wheel (`pip download`, installed with `--no-deps`). vLLM's wheels
are hundreds of MB of compiled code, and `pip download` of its sdist fails after the
download (pip builds metadata, which needs torch), so the sdist is fetched by the URL and
sha256 that PyPI's simple index (the JSON form pip itself reads) gives, and only its
package's .py files are laid out in site-packages with a minimal .dist-info (METADATA and a
RECORD with real hashes): only .py files matter to a static check.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
#: The sdists the tests use, with the sha256 PyPI publishes for them.
SDISTS = {
    ("vllm", "0.16.0"): "1f684bb31fbef59d862e2fe666e23a41f1d39d93f86215ce1ce1db89a8f5665b",
    ("vllm", "0.11.0"): "f435a64c24e9c4178d657a76f8edd8548ddc444012f7d06a9f79ac3a6392bfae",
}


def download_sdist(name: str, version: str, dest: Path) -> Path:
    """The sdist of name==version in dest (downloaded once, checked against PyPI's sha256)."""
    filename = f"{name}-{version}.tar.gz"
    target = dest / filename
    expected = SDISTS.get((name, version))
    if target.is_file() and (expected is None or hashlib.sha256(target.read_bytes()).hexdigest() == expected):
        return target
    request = urllib.request.Request(SIMPLE_INDEX.format(name=name),
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    entry = next(f for f in files if f["filename"] == filename)
    with urllib.request.urlopen(entry["url"], timeout=300) as response:
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["hashes"]["sha256"] or (expected and digest != expected):
        raise AssertionError(f"{filename}: sha256 {digest} is not the one PyPI publishes")
    dest.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install_sdist_sources(sdist: Path, site: Path, name: str, version: str, package: str | None = None) -> int:
    """Lay out the .py files of the sdist's `package` folder in `site`, with a dist-info; the
    number of files written."""
    package = package or name
    rows = []
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not member.isfile() or not parts[1].endswith(".py"):
                continue
            rel = parts[1]
            if not rel.startswith(package + "/"):
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            data = handle.read()
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            rows.append(f"{rel},{_record_hash(data)},{len(data)}")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n", encoding="utf-8")
    (info / "INSTALLER").write_text("envdoctor-tests\n", encoding="utf-8")
    rows += [f"{info.name}/METADATA,,", f"{info.name}/INSTALLER,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return len(rows) - 3


def download_wheel(requirement: str, dest: Path) -> Path:
    """A wheel downloaded with pip (no dependencies)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "--disable-pip-version-check", "-d", str(dest), requirement], check=True)
    name, version = requirement.split("==")
    return next(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))


def install_wheel_sources(wheel: Path, site: Path) -> int:
    """Unpack a wheel's .py files and its .dist-info (the real METADATA and RECORD) into
    `site`, as `pip install --no-deps` would lay them out, without its compiled or data
    files (a static check reads none of them); the number of .py files written."""
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            top = name.split("/", 1)[0]
            if name.endswith(".py") or (top.endswith(".dist-info") and not name.endswith("/")):
                if ".." in name.split("/") or name.startswith("/"):
                    continue
                target = site / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
                count += name.endswith(".py")
    return count


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))
