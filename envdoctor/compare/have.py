"""What a host has, as items that can be compared with other hosts: pure, from its facts.

An item is a key and a value (text): ``python`` -> ``CPython 3.11.7``, ``dist:torch`` ->
``2.9.1+cu128``, ``files:transformers`` -> a digest of its installed files, ``patch:ID:FILE``,
``torch``, ``torch.cuda``, ``nccl``, ``driver``, ``gpu.model``, ``gpu.count``,
``model:NAME:FILE`` -> size and hash, ``env:NAME`` -> its value (secrets masked on the host).
A value of None means the host could not tell (its probe section failed, the hashing budget
ran out): never a difference. Paths that differ between hosts by design (where the venv or
the model folder is) are not values: they are details, shown next to a value that differs.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envdoctor.compare.request import JOB_ENV_NAMES, JOB_ENV_PREFIXES
from envdoctor.engine.facts import Environment, HostFacts, canonicalize_name
from envdoctor.gpu.stack import GpuStack
from envdoctor.inventory import HostSpec
from envdoctor.patching.ledger import applied_patches, parse_ledger, unfinished

#: Item key prefix (up to the first ``:``, or the whole key) -> the category a report groups it under.
CATEGORIES: dict[str, str] = {
    "python": "interpreter", "dist": "distributions", "files": "distribution files", "patch": "patch ledger",
    "torch": "GPU stack", "torch.cuda": "GPU stack", "nccl": "GPU stack", "cudnn": "GPU stack",
    "driver": "GPU stack", "gpu.model": "GPUs", "gpu.count": "GPUs", "model": "model files",
    "env": "environment variables",
}
#: What a key missing on a host means, by its prefix: a distribution not installed, a patch
#: not applied, a variable not set, a model folder (or a file of a folder the host has) not
#: there: see :meth:`Have.value`. Other keys missing are unknown.
MISSING: dict[str, str] = {"dist": "absent", "patch": "not applied", "env": "(unset)", "model": "absent"}
HASH_SHOWN = 12


def category(key: str) -> str:
    return CATEGORIES.get(key.split(":", 1)[0], "other")


@dataclass(frozen=True)
class Have:
    """One host's items, and the details (paths, the files a digest differs by) shown with them."""

    items: Mapping[str, str | None]
    details: Mapping[str, str] = field(default_factory=dict)
    #: Labels of the model folders the host has (``model:NAME``).
    models: frozenset[str] = frozenset()
    #: The kinds of :data:`MISSING` the host could list in full (its environment, ledger or
    #: variables were read): only for those does a missing key mean absent.
    known: frozenset[str] = frozenset()

    def value(self, key: str) -> str | None:
        """The host's value of ``key``, with what a missing key means (see :data:`MISSING`)."""
        if key in self.items:
            return self.items[key]
        kind, _, rest = key.partition(":")
        if kind == "model":
            label, _, file = rest.partition(":")
            if label in self.models:  # a file of a folder the host has
                return "absent"
            # a folder another host has under that name: absent here when this host's folders were read
            return "absent" if not file and "model" in self.known else None
        return MISSING.get(kind) if kind in self.known else None

    def to_json(self) -> dict[str, Any]:
        return {"items": dict(self.items), "details": dict(self.details), "models": sorted(self.models),
                "known": sorted(self.known)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Have:
        """A report's ``have`` (untrusted: values that are not text are unknown)."""
        items = data.get("items") if isinstance(data.get("items"), Mapping) else {}
        details = data.get("details") if isinstance(data.get("details"), Mapping) else {}
        models = data.get("models") if isinstance(data.get("models"), list) else []
        known = data.get("known") if isinstance(data.get("known"), list) else []
        return cls({str(k): v if isinstance(v, str) else None for k, v in items.items()},
                   {str(k): v for k, v in details.items() if isinstance(v, str)},
                   frozenset(m for m in models if isinstance(m, str)),
                   frozenset(k for k in known if k in MISSING))


def job_env(spec: HostSpec, facts: HostFacts) -> Environment | None:
    """The environment the job runs in: the venv named for the host, else the default python3."""
    return facts.env_at(spec.venv) if spec.venv else facts.default_env


def build_have(spec: HostSpec, facts: HostFacts) -> Have:
    items: dict[str, str | None] = {}
    details: dict[str, str] = {}
    known: set[str] = set()
    env = job_env(spec, facts)
    _interpreter(spec, env, items, details)
    if env is not None and env.exists:
        known.add("dist")
        for dist in env.installed.values():
            items[f"dist:{dist.key}"] = dist.version
    _files(facts.section("digests"), items, details)
    if isinstance(facts.section("patch-ledger"), Mapping):
        known.add("patch")
        _ledger(facts.section("patch-ledger"), items, details)
    _gpu_stack(facts, env, items, details)
    models = _models(facts.section("digests"), items, details)
    if isinstance(facts.section("digests"), Mapping):
        known.add("model")
    if isinstance(facts.section("system"), Mapping):
        known.add("env")
        _environment(facts.section("system"), items)
    return Have(items, details, models, frozenset(known))


def _interpreter(spec: HostSpec, env: Environment | None, items: dict[str, str | None],
                 details: dict[str, str]) -> None:
    if env is None or not env.exists:
        items["python"] = "no environment" if spec.venv else None
    elif not env.runs:
        items["python"] = "does not run"
    else:
        implementation = env.markers.get("platform_python_implementation") or "Python"
        items["python"] = f"{implementation} {env.markers.get('python_full_version') or env.version}"
    if env is not None:
        details["python"] = env.executable or env.python


def _files(section: Any, items: dict[str, str | None], details: dict[str, str]) -> None:
    """``files:NAME``: the digest of the distribution's files; None when not all were hashed."""
    if not isinstance(section, Mapping):
        return
    for dist in section.get("distributions") or []:
        if not isinstance(dist, Mapping) or not isinstance(dist.get("name"), str):
            continue
        key = f"files:{canonicalize_name(dist['name'])}"
        digest = dist.get("digest")
        items[key] = str(digest)[:16] if digest else None
        notes = []
        for what in ("modified", "missing"):
            listed = [str(p) for p in dist.get(what) or []]
            count = dist.get(f"{what}_count") or len(listed)
            if listed:
                more = f" (+{count - len(listed)})" if isinstance(count, int) and count > len(listed) else ""
                notes.append(f"{what} against RECORD: {', '.join(listed)}{more}")
        if dist.get("unhashed"):
            notes.append(f"{dist['unhashed']} file(s) not hashed (the host's hashing budget ran out)")
        if dist.get("record") == "missing":
            notes.append("no RECORD")
        if notes:
            details[key] = "; ".join(notes)


def _ledger(section: Any, items: dict[str, str | None], details: dict[str, str]) -> None:
    """``patch:ID:FILE`` (FILE relative to the environment): applied, and whether the file is
    still as the patch left it."""
    if not isinstance(section, Mapping) or not section.get("exists"):
        return
    prefix = str(section.get("prefix") or "")
    files = section.get("files") if isinstance(section.get("files"), Mapping) else {}
    entries = parse_ledger(str(line) for line in section.get("lines") or [])
    for (patch, path), entry in applied_patches(entries).items():
        key = f"patch:{patch}:{_relative(path, prefix)}"
        now = files.get(path) if isinstance(files.get(path), Mapping) else {}
        if now.get("sha256") and entry.sha256_after and now["sha256"] != entry.sha256_after:
            items[key] = "applied, file changed since"
        else:
            items[key] = f"applied ({entry.distribution} {entry.version})".replace(" )", ")")
        details[key] = path
    for entry in unfinished(entries):
        key = f"patch:{entry.patch}:{_relative(entry.file, prefix)}"
        items[key] = f"unfinished {entry.op}"
        details[key] = entry.file


def _relative(path: str, prefix: str) -> str:
    if prefix and path.startswith(prefix.rstrip("/") + "/"):
        return posixpath.relpath(path, prefix)
    return path


def _gpu_stack(facts: HostFacts, env: Environment | None, items: dict[str, str | None],
               details: dict[str, str]) -> None:
    section = facts.section("gpu-stack")
    if env is not None and env.exists:
        # NCCL and cuDNN as the job loads them: the wheels torch depends on (the node facts
        # read the system's libraries).
        installed = env.installed
        nccl = next((d for k, d in sorted(installed.items()) if k.startswith("nvidia-nccl-cu")), None)
        cudnn = next((d for k, d in sorted(installed.items()) if k.startswith("nvidia-cudnn-cu")), None)
        items["nccl"] = f"{nccl.version} ({nccl.name})" if nccl else "absent"
        items["cudnn"] = f"{cudnn.version} ({cudnn.name})" if cudnn else "absent"
    if not isinstance(section, Mapping):
        return
    stack = GpuStack.from_probe(section)
    items["torch"] = stack.torch_version or "absent"
    items["torch.cuda"] = stack.torch_cuda or ("none (CPU build)" if stack.torch_version else "absent")
    items["driver"] = stack.driver.version or "none"
    if stack.driver.source:
        details["driver"] = stack.driver.source
    names = [g.name for g in stack.gpus] or _smi_list_names(facts.gpus)
    items["gpu.count"] = str(len(names))
    items["gpu.model"] = ", ".join(sorted(set(names))) or "none"


def _smi_list_names(lines: tuple[str, ...]) -> list[str]:
    """``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` -> the model name (the UUID is per GPU)."""
    names = []
    for line in lines:
        name = line.partition(":")[2].split(" (UUID:")[0].strip()
        if name:
            names.append(name)
    return names


def _models(section: Any, items: dict[str, str | None], details: dict[str, str]) -> frozenset[str]:
    """``model:LABEL`` (the folder) and ``model:LABEL:FILE``, LABEL the folder's name: where the
    folder is may differ between hosts; what it holds may not."""
    labels: set[str] = set()
    if not isinstance(section, Mapping):
        return frozenset()
    for model in section.get("models") or []:
        if not isinstance(model, Mapping) or not isinstance(model.get("path"), str):
            continue
        label = posixpath.basename(model["path"].rstrip("/")) or model["path"]
        if f"model:{label}" in items:  # two folders of one name: the second by its path
            label = model["path"]
        details[f"model:{label}"] = model["path"]
        if model.get("error"):
            items[f"model:{label}"] = f"missing ({model['error']})"
            continue
        items[f"model:{label}"] = "present" + (" (listing truncated)" if model.get("truncated") else "")
        labels.add(label)
        files = model.get("files") if isinstance(model.get("files"), Mapping) else {}
        for relpath, entry in files.items():
            if not isinstance(entry, Mapping):
                continue
            value = entry.get("hash")
            items[f"model:{label}:{relpath}"] = (f"{entry.get('size')} bytes, {_short(value)}"
                                                 if isinstance(value, str) else None)
    return frozenset(labels)


def _short(value: str) -> str:
    """``sha256:<64 hex>`` -> ``sha256:<12 hex>`` (sampled hashes likewise); errors as they are."""
    kind, sep, digest = value.partition(":")
    return f"{kind}:{digest[:HASH_SHOWN]}" if sep and kind in ("sha256", "sampled") else value


def _environment(section: Any, items: dict[str, str | None]) -> None:
    if not isinstance(section, Mapping):
        return
    found = (section.get("environment") or {}).get("vars") or {}
    for name, value in found.items():
        if isinstance(name, str) and (name in JOB_ENV_NAMES or name.startswith(JOB_ENV_PREFIXES)):
            items[f"env:{name}"] = value if isinstance(value, str) else None
