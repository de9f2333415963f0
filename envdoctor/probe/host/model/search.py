# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "model-search" (for `envdoctor init`): model folders under the usual places, found by
# listing folders and reading config.json, within bounds on depth, entries visited and time.
# Nothing of a model is imported or run. A folder counts as a model when it has config.json
# and tokenizer or weight files; the search does not go below a model folder.

import glob
import json
import os
import time

from envdoctor.probe.host.core import open_regular, section

#: Files from which transformers can build a tokenizer (as checks/models.py lists them).
SEARCH_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "tokenizer_config.json",
                          "tekken.json", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model")
SEARCH_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".safetensors.index.json")
#: Folders that hold no models but can hold very many files.
SEARCH_SKIP_NAMES = ("node_modules", "__pycache__", "site-packages", "dist-packages", "lost+found", "proc")
#: config.json is read for its model_type only up to this size.
SEARCH_MAX_CONFIG_BYTES = 1 << 20


class _Budget:
    """Entries visited and seconds spent, shared by every root; says why it ran out."""

    def __init__(self, entries, seconds):
        self.entries = entries
        self.deadline = time.monotonic() + seconds
        self.visited = 0
        self.exhausted = ""

    def spend(self, count):
        self.visited += count
        if self.visited > self.entries:
            self.exhausted = "visited more than %d entries" % self.entries
        elif time.monotonic() > self.deadline:
            self.exhausted = "searched for longer than the time allowed"
        return not self.exhausted


def hf_hub_folder():
    """Where huggingface_hub keeps its cache, as it decides it (read from the environment)."""
    env = os.environ
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return os.path.expanduser(env[name])
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                              "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def model_config_summary(path):
    """model_type and architectures of a config.json, or why they could not be read."""
    try:
        with open_regular(path) as handle:
            data = handle.read(SEARCH_MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return {"config_error": "cannot read config.json: %s" % (exc.strerror or exc)}
    if len(data) > SEARCH_MAX_CONFIG_BYTES:
        return {"config_error": "config.json is larger than %d bytes" % SEARCH_MAX_CONFIG_BYTES}
    try:
        config = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return {"config_error": "config.json is not valid JSON"}
    if not isinstance(config, dict):
        return {"config_error": "config.json is not a JSON object"}
    found = {}
    if isinstance(config.get("model_type"), str):
        found["model_type"] = config["model_type"][:200]
    archs = config.get("architectures")
    if isinstance(archs, list):
        found["architectures"] = [a[:200] for a in archs if isinstance(a, str)][:8]
    found["auto_map"] = isinstance(config.get("auto_map"), dict)
    return found


def judge_folder(path, names):
    """The model record of a folder (listing `names`), or None when it is not a model folder."""
    if "config.json" not in names or not os.path.isfile(os.path.join(path, "config.json")):
        return None
    tokenizer = sorted(n for n in names if n in SEARCH_TOKENIZER_FILES)
    weights = sorted(n for n in names if n.endswith(SEARCH_WEIGHT_SUFFIXES))
    if not tokenizer and not weights:
        return None
    model = {"path": path, "tokenizer_files": tokenizer[:10], "weight_files": len(weights)}
    model.update(model_config_summary(os.path.join(path, "config.json")))
    return model


def hub_snapshot(repo):
    """The snapshot of a hub cache repository folder (models--org--name) that refs/main
    names, else the most recently changed one; None without snapshots."""
    snapshots = os.path.join(repo, "snapshots")
    try:
        with open_regular(os.path.join(repo, "refs", "main")) as handle:
            revision = handle.read(200).decode("ascii", "replace").strip()
        if revision and "/" not in revision and os.path.isdir(os.path.join(snapshots, revision)):
            return os.path.join(snapshots, revision)
    except OSError:
        pass
    try:
        found = [os.path.join(snapshots, n) for n in os.listdir(snapshots)]
    except OSError:
        return None
    found = [p for p in found if os.path.isdir(p)]
    return max(found, key=lambda p: os.stat(p).st_mtime) if found else None


def search_hub(hub, budget, found, seen):
    try:
        repos = sorted(n for n in os.listdir(hub) if n.startswith("models--"))
    except OSError:
        return
    for name in repos:
        if not budget.spend(1):
            return
        snapshot = hub_snapshot(os.path.join(hub, name))
        if snapshot is None or os.path.realpath(snapshot) in seen:
            continue
        seen.add(os.path.realpath(snapshot))
        try:
            names = os.listdir(snapshot)
        except OSError:
            continue
        budget.spend(len(names))
        model = judge_folder(snapshot, names)
        if model is not None:
            model["source"] = "hub"
            model["repo"] = name[len("models--"):].replace("--", "/")
            found.append(model)


def search_tree(root, max_depth, budget, found, seen, limit):
    """Breadth first below `root`: a model folder is recorded and not entered; hidden folders
    and SEARCH_SKIP_NAMES are not entered; a folder reached twice (links) is read once."""
    level = [root]
    for depth in range(max_depth + 1):
        below = []
        for folder in level:
            real = os.path.realpath(folder)
            if real in seen:
                continue
            seen.add(real)
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            if not budget.spend(len(entries)):
                return
            names = [e.name for e in entries]
            model = judge_folder(folder, names)
            if model is not None:
                model["source"] = root
                found.append(model)
                if len(found) >= limit:
                    return
                continue
            if depth == max_depth:
                continue
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name.startswith(".") or entry.name in SEARCH_SKIP_NAMES:
                    continue
                try:
                    if entry.is_dir():  # (a link to a folder too: models often live elsewhere)
                        below.append(entry.path)
                except OSError:
                    continue
        level = below
        if not level:
            return


@section("model-search")
def model_search_section(args, emit):
    """Model folders under args["roots"] (globs, ~ expanded; "hub" is the Hugging Face cache)."""
    budget = _Budget(int(args.get("max_entries", 50000)), float(args.get("max_seconds", 5.0)))
    limit = int(args.get("max_models", 64))
    max_depth = int(args.get("max_depth", 4))
    found = []
    seen = set()
    searched = []
    for pattern in args.get("roots", []):
        if budget.exhausted or len(found) >= limit:
            break
        if pattern == "hub":
            hub = hf_hub_folder()
            if os.path.isdir(hub):
                searched.append(hub)
                search_hub(hub, budget, found, seen)
            continue
        for root in sorted(glob.glob(os.path.expanduser(pattern))):
            if budget.exhausted or len(found) >= limit:
                break
            if os.path.isdir(root):
                searched.append(root)
                search_tree(root, max_depth, budget, found, seen, limit)
    return {"models": found[:limit], "searched": searched, "visited": budget.visited,
            "truncated": budget.exhausted or ("found %d models, the most reported" % limit
                                              if len(found) >= limit else "")}
