# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "architecture": which model types and architectures the installed transformers,
# vLLM and SGLang know, read from their registry files with `ast` (registry_literals.py),
# never imported:
#   - transformers: models/auto/configuration_auto.py CONFIG_MAPPING_NAMES (model_type ->
#     config class; 5.x builds it in auto_mappings.py) and every *_MAPPING_NAMES table of
#     models/auto/modeling_auto.py (model_type -> model class, per Auto class);
#   - vLLM: model_executor/models/registry.py (architecture -> (module, class), by group, and
#     _PREVIOUSLY_SUPPORTED_MODELS) and transformers_utils/config.py _CONFIG_REGISTRY (the
#     model types vLLM builds a config for itself);
#   - SGLang: the `EntryClass` of every module of srt/models/ (what its ModelRegistry
#     imports), the config classes of its _CONFIG_REGISTRY with their model_type, and the
#     model types its get_config rewrites (config_rewrites).
# The tables are cached beside the drift answer (~/.cache/envdoctor/drift-<digest>/), keyed
# by the code and the RECORD of each engine's distribution, checked against the stat of every
# file read. The answer holds only the entries the given models' config.json files name.

import ast
import hashlib
import json
import os
import re
import sys
import time

from envdoctor.probe.host.core import (
    MAX_RECORD_BYTES,
    canonical_name,
    open_regular,
    read_regular,
    section,
    site_dirs,
    site_entries,
)
from envdoctor.probe.host.drift.section import drift_cache_folder, read_cache, write_cache
from envdoctor.probe.host.drift.summaries import const_value
from envdoctor.probe.host.scan.registry_literals import Symbol, read_tables

ARCHITECTURE_CACHE_NAME = "architecture-cache"
ENGINES = ("transformers", "vllm", "sglang")
REGISTRY_MAX_SOURCE_BYTES = 8 * 1024 * 1024
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: How deep config.json's nested configs are looked into for model types.
MAX_NESTING = 3
_ENTRY_CLASS = re.compile(rb"^EntryClass\s*(?::[^=\n]*)?=", re.M)


class Sources(object):
    """Reads registry files within a budget, noting each file's stat for the cache."""

    def __init__(self):
        self.read = {}
        self.bytes = 0
        self.parsed = {}

    def text(self, path):
        st = os.stat(path)
        if st.st_size > REGISTRY_MAX_SOURCE_BYTES:
            raise OSError("%s is larger than %d bytes" % (path, REGISTRY_MAX_SOURCE_BYTES))
        with open_regular(path) as handle:
            data = handle.read(REGISTRY_MAX_SOURCE_BYTES)
        self.read[path] = [st.st_size, getattr(st, "st_mtime_ns", int(st.st_mtime * 1e9))]
        self.bytes += len(data)
        return data

    def tables(self, path, siblings=True):
        """A module's tables (each module parsed once), following `from .sibling import TABLE`."""
        if path not in self.parsed:
            folder = os.path.dirname(path)

            def load(module):
                sibling = os.path.join(folder, module + ".py")
                return self.tables(sibling) if siblings and os.path.isfile(sibling) else {}

            self.parsed[path] = {}  # a cycle of imports reads as no tables
            self.parsed[path] = read_tables(self.text(path), load)
        return self.parsed[path]


def find_engine(sites, name):
    """{version, dist_info, root} of an installed engine (the first dist-info of that name), or None."""
    wanted = canonical_name(name)
    for site, entry in site_entries(sites):
        if entry.endswith(".dist-info") and canonical_name(entry[:-len(".dist-info")].rsplit("-", 1)[0]) == wanted:
            root = os.path.join(site, name)
            if not os.path.isdir(root):
                root = next((os.path.join(s, name) for s in sites if os.path.isdir(os.path.join(s, name))), root)
            return {"version": entry[:-len(".dist-info")].rsplit("-", 1)[-1], "dist_info": os.path.join(site, entry),
                    "root": root}
    return None


def _strings(table):
    """A table's entries whose key is text, values as text or lists of text."""
    found = {}
    if not isinstance(table, dict):
        return found
    for key, value in table.items():
        if isinstance(key, str) and not isinstance(key, Symbol):
            if isinstance(value, str):
                found[key] = str(value)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                found[key] = [str(v) for v in value]
    return found


def read_transformers(root, sources):
    auto = os.path.join(root, "models", "auto")
    config = sources.tables(os.path.join(auto, "configuration_auto.py"))
    modeling = sources.tables(os.path.join(auto, "modeling_auto.py"))
    mappings = {}
    for name, table in modeling.items():
        if name.startswith("MODEL") and name.endswith("MAPPING_NAMES"):
            mappings[name] = _strings(table)
    return {"config_types": _strings(config.get("CONFIG_MAPPING_NAMES")), "mappings": mappings}


def read_vllm(root, sources):
    registry = sources.tables(os.path.join(root, "model_executor", "models", "registry.py"), siblings=False)
    architectures = {}
    for group, table in registry.items():
        if not (group.startswith("_") and group.endswith("_MODELS")) or group in ("_VLLM_MODELS",):
            continue
        if group == "_PREVIOUSLY_SUPPORTED_MODELS" or not isinstance(table, dict):
            continue
        for arch, target in table.items():
            if isinstance(arch, str) and isinstance(target, list) and len(target) == 2:
                # a later group wins, as in `_VLLM_MODELS = {**_TEXT_GENERATION_MODELS, ...}`
                architectures[arch] = [str(target[0]), str(target[1]), group.strip("_").lower()]
    config_types = {}
    path = os.path.join(root, "transformers_utils", "config.py")
    if os.path.isfile(path):
        table = sources.tables(path, siblings=False).get("_CONFIG_REGISTRY")
        for key, value in (table or {}).items() if isinstance(table, dict) else ():
            if isinstance(key, str) and not isinstance(key, Symbol):
                config_types[key] = str(value)
    return {"architectures": architectures, "previously": _strings(registry.get("_PREVIOUSLY_SUPPORTED_MODELS")),
            "config_types": config_types}


_ENTRY_VALUE = re.compile(rb"[ \t]*(\[[^\]]*\]|\(?[A-Za-z_][\w.]*\)?)\s*(?:#[^\n]*)?$", re.M)
_CLASS_LINE = re.compile(rb"^class\s+([A-Za-z_]\w*)", re.M)
_MODEL_TYPE_LINE = re.compile(rb"^\s+model_type\s*(?::[^=\n]*)?=\s*[\"']([^\"']+)[\"']", re.M)


def entry_classes(data):
    """The class names a module's `EntryClass = X` (or `[X, Y]`) names, read from that
    statement alone (a regular expression for the usual spellings, else that statement parsed)."""
    match = _ENTRY_CLASS.search(data)
    if match is None:
        return []
    simple = _ENTRY_VALUE.match(data, match.end())
    if simple:
        text = re.sub(rb"#[^\n]*", b"", simple.group(1))
        return [n.decode("ascii").split(".")[-1] for n in re.findall(rb"[A-Za-z_][\w.]*", text)]
    lines = data[match.start():].split(b"\n")
    for end in range(1, min(len(lines), 200) + 1):
        try:
            value = read_tables(b"\n".join(lines[:end])).get("EntryClass")
        except SyntaxError:
            continue
        items = value if isinstance(value, list) else [value]
        return [str(v).split(".")[-1] for v in items if isinstance(v, Symbol)]
    return []


def config_model_types(folder, sources, wanted):
    """Config class name -> its `model_type = "..."`, for the wanted classes the configs folder
    defines (read line by line: a class statement, then its indented model_type)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            data = sources.text(os.path.join(dirpath, filename))
            classes = [(m.start(), m.group(1).decode("ascii")) for m in _CLASS_LINE.finditer(data)]
            for model_type in _MODEL_TYPE_LINE.finditer(data):
                owner = [name for start, name in classes if start < model_type.start()]
                if owner and owner[-1] in wanted and owner[-1] not in found:
                    found[owner[-1]] = model_type.group(1).decode("utf-8", "replace")
    return found


def read_sglang(root, sources):
    models = os.path.join(root, "srt", "models")
    architectures = {}
    for filename in sorted(os.listdir(models)):
        if filename.endswith(".py") and not filename.startswith("__"):
            for name in entry_classes(sources.text(os.path.join(models, filename))):
                architectures.setdefault(name, filename[:-3])
    config_types, rewrites = {}, {}
    for rel in SGLANG_CONFIG_MODULES:
        path = os.path.join(root, *rel)
        if not os.path.isfile(path):
            continue
        table = sources.tables(path, siblings=False).get("_CONFIG_REGISTRY")
        if not isinstance(table, dict):
            continue  # a shim that re-exports it (0.5.2x's utils/hf_transformers_utils.py): look on
        wanted = set(str(k)[:-len(".model_type")].split(".")[-1] for k in table if isinstance(k, Symbol))
        types = config_model_types(os.path.join(root, "srt", "configs"), sources, wanted) if wanted else {}
        for key, value in table.items():
            name = str(value).split(".")[-1]
            if isinstance(key, Symbol) and key.endswith(".model_type"):
                key = types.get(key[:-len(".model_type")].split(".")[-1])
            if isinstance(key, str) and key:
                config_types[str(key)] = name
        rewrites = config_rewrites(sources.text(path))
        break
    return {"architectures": architectures, "config_types": config_types, "rewrites": rewrites}


#: Where SGLang keeps _CONFIG_REGISTRY and get_config: 0.4-0.5.1x, then the hf_transformers package
#: that 0.5.2x split them into (the old module a shim that re-exports it).
SGLANG_CONFIG_MODULES = (("srt", "utils", "hf_transformers_utils.py"), ("srt", "hf_transformers_utils.py"),
                         ("srt", "utils", "hf_transformers", "common.py"),
                         ("srt", "utils", "hf_transformers", "config.py"))
_MODEL_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]$")


def _string(node):
    """The text of a string literal (any Python 3's ast), else None."""
    ok, value = const_value(node)
    return value if ok and isinstance(value, str) else None


def config_rewrites(data):
    """Model types the engine's config loader rewrites before building a config: a top-level
    function that sets `CONFIG["model_type"] = "T"` (and maybe `CONFIG["architectures"] = [...]`)
    on the JSON it reads, named for the model type S it handles, which the module tests for
    (SGLang 0.5.3's `_load_deepseek_v32_model`, called by get_config when `"deepseek_v32" in
    str(e)` of transformers' ValueError: a deepseek_v32 config is built as deepseek_v3 when the
    installed transformers does not know deepseek_v32). S -> {model_type, architectures, by}."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return {}
    tested = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in [node.left] + list(node.comparators):
                text = _string(operand)
                if text and _MODEL_TYPE_NAME.match(text):
                    tested.add(text)
    found = {}
    for function in tree.body:
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        target_type, archs = None, None
        for node in ast.walk(function):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)):
                continue
            key = node.targets[0].slice
            key = _string(key.value if type(key).__name__ == "Index" else key)  # (3.8's Index)
            if key == "model_type" and _string(node.value):
                target_type = _string(node.value)
            elif key == "architectures" and isinstance(node.value, ast.List) and all(
                    _string(e) for e in node.value.elts):
                archs = [_string(e) for e in node.value.elts]
        if not target_type:
            continue
        words = "_%s_" % function.name.strip("_")
        for source_type in sorted(tested):
            if source_type != target_type and ("_%s_" % source_type) in words:
                found[source_type] = {"model_type": target_type, "architectures": archs, "by": function.name}
    return found


READERS = {"transformers": read_transformers, "vllm": read_vllm, "sglang": read_sglang}


def read_engines(sites, sources):
    tables = {}
    for name in ENGINES:
        found = find_engine(sites, name)
        if found is None:
            continue
        engine = {"version": found["version"], "dist_info": found["dist_info"]}
        try:
            engine.update(READERS[name](found["root"], sources))
        except (OSError, SyntaxError, ValueError, RecursionError) as exc:
            engine["error"] = "its registry could not be read: %s" % str(exc)[:300]
        tables[name] = engine
    return tables


def model_keys(model_dir):
    """The model types (top level and nested configs) and architectures config.json names."""
    try:
        if os.path.getsize(os.path.join(model_dir, "config.json")) > MAX_CONFIG_BYTES:
            return [], []
        with open_regular(os.path.join(model_dir, "config.json")) as handle:
            config = json.loads(handle.read(MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return [], []
    types, archs = [], []

    def walk(value, depth):
        if not isinstance(value, dict) or depth > MAX_NESTING:
            return
        if isinstance(value.get("model_type"), str) and value["model_type"] not in types:
            types.append(value["model_type"])
        for arch in value.get("architectures") or [] if isinstance(value.get("architectures"), list) else []:
            if isinstance(arch, str) and arch not in archs:
                archs.append(arch)
        for inner in value.values():
            walk(inner, depth + 1)

    walk(config, 0)
    return types, archs


def excerpt(engines, types, archs):
    """Only the registry entries the models name, and the size of each table."""
    out = {}
    for name, engine in engines.items():
        part = {"version": engine["version"], "error": engine.get("error")}
        config_types = engine.get("config_types") or {}
        part["config_types"] = dict((t, config_types.get(t)) for t in types)
        part["sizes"] = {"config_types": len(config_types)}
        if name == "transformers":
            mappings = engine.get("mappings") or {}
            part["models"] = dict((t, dict((m, v[t]) for m, v in mappings.items() if t in v)) for t in types)
            classes = set()
            for table in mappings.values():
                for value in table.values():
                    classes.update(value if isinstance(value, list) else [value])
            part["classes"] = dict((a, a in classes) for a in archs)
            part["sizes"]["mappings"] = len(mappings)
        else:
            known = engine.get("architectures") or {}
            rewrites = engine.get("rewrites") or {}
            part["rewrites"] = dict((t, rewrites[t]) for t in types if t in rewrites)
            part["architectures"] = dict((a, known.get(a)) for a in archs)
            part["transformers_backend"] = "TransformersForCausalLM" in known
            part["sizes"]["architectures"] = len(known)
            if name == "vllm":
                previously = engine.get("previously") or {}
                part["previously"] = dict((a, previously[a]) for a in archs if a in previously)
        out[name] = part
    return out


def _registry_record_digest(path):
    try:
        return hashlib.sha1(read_regular(os.path.join(path, "RECORD"), MAX_RECORD_BYTES)).hexdigest()
    except OSError:
        return None


@section("architecture")
def architecture_section(args, emit):
    started = time.time()
    prefix = args.get("prefix") or None
    sites = site_dirs(prefix)
    models = [os.path.abspath(os.path.expanduser(m)) for m in args.get("models") or []]
    found = dict((n, find_engine(sites, n)) for n in ENGINES)
    key = hashlib.sha1(json.dumps([args.get("code"), sys.version, sorted(
        (n, f["dist_info"], _registry_record_digest(f["dist_info"])) for n, f in found.items() if f)]).encode("utf-8")).hexdigest()
    folder = drift_cache_folder(prefix)
    use_cache = args.get("cache", True) and models
    engines = read_cache(folder, key, ARCHITECTURE_CACHE_NAME) if use_cache else None
    state = "hit"
    sources = Sources()
    if engines is None:
        state = "miss"
        engines = read_engines(sites, sources) if models else dict(
            (n, {"version": f["version"]}) for n, f in found.items() if f)
        if use_cache:
            write_cache(folder, key, sources.read, engines, ARCHITECTURE_CACHE_NAME)
    per_model = {}
    types, archs = [], []
    for model in models:
        model_types, model_archs = model_keys(model)
        per_model[model] = {"model_types": model_types, "architectures": model_archs}
        types += [t for t in model_types if t not in types]
        archs += [a for a in model_archs if a not in archs]
    for engine in engines.values():  # what an engine rewrites a model's config to is looked up too
        for model_type in list(types):
            rewrite = (engine.get("rewrites") or {}).get(model_type) or {}
            if rewrite.get("model_type") and rewrite["model_type"] not in types:
                types.append(rewrite["model_type"])
            archs += [a for a in rewrite.get("architectures") or [] if a not in archs]
    return {"engines": excerpt(engines, types, archs), "models": per_model, "cache": state,
            "files_read": len(sources.read), "bytes_read": sources.bytes,
            "host_seconds": round(time.time() - started, 4)}
