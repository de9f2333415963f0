# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Names are prefixed: every probe module shares one namespace on the host.
# Section "models": for each model directory, the files a loader reads (config.json,
# tokenizer_config.json, ...), parsed as JSON; the ranks file of a tiktoken tokenizer
# counted by streaming; tokenizer.json reduced to its ids and added tokens (model_tokenizer.py);
# chat template files as text; the files auto_map points to, hashed and shipped (small ones) so
# the controller reads their imports with libcst. The model's code is never imported
# here. Only with the user's consent does the live loader run, in the venv's own
# interpreter, as a separate process with stdin closed, offline, and a timeout.

import base64
import binascii
import json
import os
import shutil
import sys
import tempfile
import time

from envdoctor.probe.host.core import (
    decode_source,
    finish_command,
    prestart,
    read_regular,
    section,
    sha256_regular,
    start_command,
)
from envdoctor.probe.host.model.cache import cached_model_answer, model_cache_lookup
from envdoctor.probe.host.model.spm import reduce_sentencepiece
from envdoctor.probe.host.model.tokenizer import (
    chat_template_files,
    named_token_strings,
    reduce_tokenizer_json,
)

MODEL_JSON_FILES = (
    "config.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
)
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
RANKS_FILES = ("tiktoken.model",)
#: Larger JSON files are not parsed: a config this big is not a config.
MODEL_MAX_JSON_BYTES = 32 * 1024 * 1024
#: Model code files above this are hashed but not shipped.
MODEL_MAX_SOURCE_BYTES = 512 * 1024
#: A ranks file is verified line by line up to this size; a larger one is not read (a
#: tiktoken ranks file of a 200k vocabulary is about 3 MB).
MAX_VERIFIED_RANKS_BYTES = 64 * 1024 * 1024
#: A model file hashed for its entry (the JSON files, templates, tokenizer files, code).
MODEL_MAX_HASHED_BYTES = 256 * 1024 * 1024

# Run by the venv's interpreter (whatever transformers it has), never by the probe itself.
# argv: model_dir, then the loads to make ("untrusted", "trusted"; both when none is named).
# Prints one JSON object. Untrusted first (or in a process of its own: see
# load_tokenizer_live), so that nothing of the model's code is in the process when the
# untrusted load is judged.
LIVE_LOADER = r"""
import json, sys, traceback
model_dir = sys.argv[1]
wanted = sys.argv[2:] or ["untrusted", "trusted"]
out = {}
def describe(tok):
    ids = {}
    for name in ("bos", "eos", "pad", "unk", "mask"):
        ids[name + "_token"] = getattr(tok, name + "_token", None)
        ids[name + "_token_id"] = getattr(tok, name + "_token_id", None)
    info = {"class": type(tok).__name__, "module": type(tok).__module__,
            "vocab_size": getattr(tok, "vocab_size", None), "len": len(tok)}
    info.update(ids)
    info["special_tokens"] = [str(t) for t in getattr(tok, "all_special_tokens", [])]
    try:
        info["chat_template"] = tok.apply_chat_template(
            [{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True)
    except Exception as exc:
        info["chat_template_error"] = "%s: %s" % (type(exc).__name__, exc)
    return info
try:
    import transformers
    out["transformers"] = transformers.__version__
    from transformers import AutoTokenizer
except Exception as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(out, default=str))
    sys.exit(0)
for key, trust in (("untrusted", False), ("trusted", True)):
    if key not in wanted:
        continue
    try:
        tok = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust, local_files_only=True)
        out[key] = describe(tok)
    except BaseException as exc:
        lines = traceback.format_exception_only(type(exc), exc)
        out[key] = {"error": "".join(lines).strip()[-2000:]}
print(json.dumps(out, default=str))
"""


def model_file_entry(path):
    try:
        return {"size": os.path.getsize(path), "sha256": sha256_regular(path, MODEL_MAX_HASHED_BYTES)}
    except OSError as exc:
        return {"error": "cannot read: %s" % (exc.strerror or exc)}


def read_model_json(path):
    """(data, error): a clear message for a file that is missing, huge, or not JSON."""
    try:
        raw = read_regular(path, MODEL_MAX_JSON_BYTES)
    except OSError as exc:
        return None, "cannot read %s: %s" % (os.path.basename(path), exc.strerror or exc)
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, "%s is not UTF-8 (byte %d)" % (os.path.basename(path), exc.start)
    except (ValueError, RecursionError) as exc:  # absurd nesting is bad JSON too, not a probe crash
        return None, "%s is not valid JSON: %s" % (os.path.basename(path), exc)


def check_ranks(path):
    """Count and verify a tiktoken ranks file (one over MAX_VERIFIED_RANKS_BYTES is not read)."""
    result = {"file": os.path.basename(path)}
    try:
        data = read_regular(path, MAX_VERIFIED_RANKS_BYTES)
    except OSError as exc:
        result["error"] = "cannot read: %s" % (exc.strerror or exc)
        return result
    result["size"] = len(data)
    lines = 0
    bad_lines = 0
    first_bad = None
    ranks_seen = 0
    max_rank = -1
    dense = True
    single_bytes = set()
    tokens = set()
    duplicates = 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        lines += 1
        parts = raw.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected `base64-token rank`")
            token = base64.b64decode(parts[0], validate=True)
            rank = int(parts[1])
        except (ValueError, binascii.Error) as exc:
            bad_lines += 1
            if first_bad is None:
                first_bad = "line %d: %s" % (lines, exc)
            continue
        # Ranks must be 0, 1, 2, ... in file order for the ids to be what tiktoken assigns.
        if rank != ranks_seen:
            dense = False
        ranks_seen += 1
        max_rank = max(max_rank, rank)
        if len(token) == 1:
            single_bytes.add(token)
        if token in tokens:
            duplicates += 1
        else:
            tokens.add(token)
    result.update(
        lines=lines,
        verified=True,
        bad_lines=bad_lines,
        first_bad=first_bad,
        dense=dense and bad_lines == 0,
        max_rank=max_rank,
        single_bytes=len(single_bytes),
        duplicates=duplicates,
    )
    return result


def auto_map_targets(data):
    """Every 'module.Class' an auto_map names, with the Auto class it is for."""
    targets = []
    if not isinstance(data, dict):
        return targets
    auto_map = data.get("auto_map")
    if not isinstance(auto_map, dict):
        return targets
    for auto_class, value in sorted(auto_map.items()):
        values = value if isinstance(value, list) else [value]
        for ref in values:
            if isinstance(ref, str) and ref:
                targets.append((auto_class, ref))
    return targets


def model_module_file(model_dir, ref):
    """`module.Class` (or `repo--module.Class`) -> the .py file inside the model folder."""
    if "--" in ref:
        ref = ref.split("--", 1)[1]
    module = ref.rsplit(".", 1)[0]
    return os.path.join(model_dir, *module.split(".")) + ".py"


def read_model_code(path):
    entry = model_file_entry(path)
    if "error" in entry:
        return entry
    if entry["size"] <= MODEL_MAX_SOURCE_BYTES:
        try:
            data = read_regular(path, MODEL_MAX_SOURCE_BYTES)
        except OSError as exc:  # (replaced since it was hashed)
            return {"error": "cannot read: %s" % (exc.strerror or exc)}
        # As Python would read it (a coding declaration), else with U+FFFD for what does not decode.
        entry["source"] = decode_source(data)[0] or data.decode("utf-8", "replace")
    else:
        entry["source_omitted"] = "larger than %d bytes" % MODEL_MAX_SOURCE_BYTES
    return entry


def start_live_loader(python, model_dir, loads):
    """Start the live loader for `loads` ("untrusted", "trusted"): (the started command, its
    dynamic-module cache folder). Offline, stdin closed, the cache its own."""
    cache = tempfile.mkdtemp(prefix="envdoctor-hf-modules-")
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_MODULES_CACHE=cache,
               TOKENIZERS_PARALLELISM="false", PYTHONDONTWRITEBYTECODE="1")
    # -I and cwd "/": neither the caller's folder (a json.py there) nor PYTHONPATH is imported.
    return start_command([python, "-I", "-c", LIVE_LOADER, model_dir] + list(loads), env=env, cwd="/"), cache


def finish_live_loader(python, proc, cache, until):
    """The JSON the loader printed, or {"error": ...} (it failed, or ran past `until`)."""
    try:
        status, out, err = finish_command(proc, until)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if status != 0:
        tail = err.strip().splitlines()[-3:]
        return {"error": "%s exited with %d: %s" % (python, status, " | ".join(tail))}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "the tokenizer loader printed no result: %s" % err.strip()[-300:]}


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def start_live_loads(python, model_dir, timeout):
    """Start the untrusted and the trusted load. With 4 cores or more each runs in a process of
    its own, side by side (the wall time of the slower one; transformers is imported twice, on
    two cores); with fewer, one process makes both in turn (one import of transformers).
    Returns (the started [(process, cache folder)], the time they must end by)."""
    until = time.time() + timeout
    groups = [["untrusted"], ["trusted"]] if usable_cores() >= 4 else [["untrusted", "trusted"]]
    return [start_live_loader(python, model_dir, loads) for loads in groups], until


def finish_live_loads(python, started, until):
    """The loads' merged answer, or the first error (every process is waited for)."""
    result = {}
    for proc, cache in started:
        answer = finish_live_loader(python, proc, cache, until)
        if "error" in answer:  # the other one is ended: never left running
            for other, other_cache in started:
                if not isinstance(other, str) and other.returncode is None:
                    other.kill()
                    finish_live_loader(python, other, other_cache, until)
            return answer
        result.update(answer)
    return result


def load_tokenizer_live(python, model_dir, timeout):
    """The live loads of the tokenizer (started early by models_prestart when it could)."""
    early = LIVE_STARTED.pop(model_dir, None)
    if early is not None and early[0] == python:
        return finish_live_loads(python, early[1], early[2])
    started, until = start_live_loads(python, model_dir, timeout)
    return finish_live_loads(python, started, until)


def inspect_model(model_dir, args):
    model = {"path": model_dir}
    if not os.path.isdir(model_dir):
        model["error"] = "no such directory" if not os.path.exists(model_dir) else "not a directory"
        return model
    model["listing"] = sorted(os.listdir(model_dir))[:500]
    files = {}
    parsed = {}
    errors = {}
    for name in MODEL_JSON_FILES:
        path = os.path.join(model_dir, name)
        if not os.path.exists(path):
            continue
        files[name] = model_file_entry(path)
        data, error = read_model_json(path)
        if error:
            errors[name] = error
        else:
            parsed[name] = data
    # A name that is there but no regular file (a FIFO, a link to a device) is read all the
    # same: the reader refuses it and names it, where isfile() would pass it over in silence.
    for name in CHAT_TEMPLATE_FILES:
        path = os.path.join(model_dir, name)
        if os.path.lexists(path):
            files[name] = model_file_entry(path)
    tokenizer_json = os.path.join(model_dir, "tokenizer.json")
    if os.path.lexists(tokenizer_json):
        files["tokenizer.json"] = model_file_entry(tokenizer_json)
        model["tokenizer_json"] = reduce_tokenizer_json(tokenizer_json, named_token_strings(parsed))
    elif os.path.lexists(os.path.join(model_dir, "tokenizer.model")):
        # Only a sentencepiece model: transformers converts it at load; its pieces are the vocabulary.
        spm = os.path.join(model_dir, "tokenizer.model")
        files["tokenizer.model"] = model_file_entry(spm)
        model["tokenizer_json"] = reduce_sentencepiece(spm, named_token_strings(parsed))
        model["tokenizer_json"].setdefault("source", "tokenizer.model")
    model["templates"], template_errors = chat_template_files(model_dir)
    errors.update(template_errors)
    model["files"] = files
    model["json"] = parsed
    model["json_errors"] = errors
    ranks = [os.path.join(model_dir, n) for n in RANKS_FILES if os.path.lexists(os.path.join(model_dir, n))]
    model["ranks"] = check_ranks(ranks[0]) if ranks else None
    code = {}
    refs = []
    for source in ("config.json", "tokenizer_config.json"):
        for auto_class, ref in auto_map_targets(parsed.get(source)):
            path = model_module_file(model_dir, ref)
            refs.append({"from": source, "auto_class": auto_class, "ref": ref, "file": os.path.basename(path)})
            name = os.path.relpath(path, model_dir)
            if name not in code:
                code[name] = read_model_code(path) if os.path.lexists(path) else {"error": "missing"}
    model["auto_map"] = refs
    model["code"] = code
    if args.get("trust_remote_code"):
        python = args.get("python") or sys.executable
        model["live"] = load_tokenizer_live(python, model_dir, args.get("live_timeout", 180))
    return model


#: model folder -> (python, started loads, until) of the live loads models_prestart started.
LIVE_STARTED = {}
#: model folder -> the cache key taken before its live loads were started early.
EARLY_KEYS = {}


@prestart("models")
def models_prestart(args):
    """With consent, start the live load of each model folder the cache cannot answer when the
    probe starts: it runs (seconds: transformers' import) while the sections before run. The
    cache key is taken first, so the answer is never saved under a newer state than it saw.
    True when a load was started (the section then runs after the others: guard.main)."""
    if not args.get("trust_remote_code"):
        return False
    python = args.get("python") or sys.executable
    for folder in args.get("models", []):
        model_dir = os.path.abspath(os.path.expanduser(folder))
        if model_dir in EARLY_KEYS or not os.path.isdir(model_dir):
            continue
        key, hit = model_cache_lookup(model_dir, args)
        if key is None or hit is not None:
            continue
        EARLY_KEYS[model_dir] = key
        started, until = start_live_loads(python, model_dir, args.get("live_timeout", 180))
        LIVE_STARTED[model_dir] = (python, started, until)
    return bool(LIVE_STARTED)


@section("models")
def models_section(args, emit):
    # A folder whose files, loader interpreter and installed packages are as they were last
    # time is answered from the user's cache (model_cache.py): no hashing, no live load.
    answers = []
    for folder in args.get("models", []):
        model_dir = os.path.abspath(os.path.expanduser(folder))
        answers.append(cached_model_answer(model_dir, args, inspect_model, EARLY_KEYS.pop(model_dir, None)))
    for python, started, until in LIVE_STARTED.values():  # (a folder no answer used: never left running)
        finish_live_loads(python, started, until)
    LIVE_STARTED.clear()
    return answers
