# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# The "models" section's answer per model folder, kept in the user's own cache folder
# (~/.cache/envdoctor/models-<digest of the folder, the interpreter and the user>), so that a
# healthy host answers without hashing the tokenizer files again or running the live
# tokenizer load (seconds: transformers' import and the model's own code).
#
# The answer is replayed only when everything it was made from is as it was. The key is a
# sha256 over:
# - the model folder: its own stat and, walked without following links into folders, every
#   entry's lstat (mode, size, mtime_ns, ctime_ns, st_ino, st_dev) with, for a symlink (the
#   Hugging Face cache's snapshots), its target and the target's stat. A file's content cannot
#   change without its ctime changing, and ctime cannot be set back by its owner;
# - the interpreter that loads the tokenizer (the request's python): its path, its lstat, its
#   real path and that file's stat, the venv's pyvenv.cfg (its version line), and sys.version
#   when it is the interpreter running this probe;
# - the environment's installed state: each site folder of that venv (with the base's when
#   the venv includes the system site-packages) by its stat, and each of its entries by its
#   lstat, with each *.dist-info's RECORD and METADATA: any pip install, uninstall or
#   reinstall changes it;
# - the environment variables the loader reads (HF_*, TRANSFORMERS_*, TIKTOKEN_*, LD_*...);
# - the request's arguments (models' consent, timeout, python) and the section's code digest
#   that the controller sends ("code"), so code that judges differently never replays an
#   answer the old code gave; and this probe's own interpreter.
# Any difference is a miss. An answer is saved only when the key taken after it was computed
# equals the one taken before, and no file of the key changed within the racy margin of
# the clock (a change in the same timestamp tick could otherwise go unseen).
#
# A failed live load is cached too when the loader ran to its end and the failure is of the
# model's and the environment's making (a missing module, a class transformers lacks): the
# same state fails the same way, and the remedy (pip install tiktoken) changes the key. A
# loader that did not finish (timed out, killed, crashed) or an error of the machine's state
# outside the key (out of memory, an OSError such as a full disk) is never cached.
#
# The folder must be a real folder of this user that nobody else can write, and a cache file
# a regular file of this user with mode 0600: anything else is never read. Any failure of the
# cache only means computing the answer again.

import hashlib
import json
import os
import stat
import sys
import time

from envdoctor.probe.host.core import (
    MAX_CACHE_BYTES,
    READ_FLAGS,
    env_site_dirs,
    prune_user_caches,
    touch_user_cache,
    venv_prefix_of,
)

MODEL_CACHE_VERSION = 1
#: Entries of a model folder stat'ed for the key at most: a folder with more is not cached.
MODEL_CACHE_MAX_ENTRIES = 20000
#: Prefixes of the environment variables that change what the live loader does.
MODEL_CACHE_ENV_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TIKTOKEN_", "TOKENIZERS_", "SENTENCEPIECE_",
                            "LD_", "SAFETENSORS_", "TORCH_", "CUDA_")
#: A file changed this close to now may change again in the same timestamp tick unseen:
#: then the answer is not saved (coarse: a file system whose timestamps are whole seconds).
MODEL_CACHE_FINE_MARGIN_NS = 50 * 10 ** 6
MODEL_CACHE_COARSE_MARGIN_NS = 2 * 10 ** 9
#: Exceptions of a failed live load that say more about the machine than about the model.
MODEL_CACHE_TRANSIENT_ERRORS = ("MemoryError", "OSError", "IOError", "TimeoutError", "BlockingIOError",
                                "InterruptedError", "KeyboardInterrupt", "SystemExit", "RecursionError")


def model_cache_folder():
    return os.path.join(os.path.expanduser("~"), ".cache", "envdoctor")


def model_cache_path(model_dir, python):
    """The cache file of one model folder as loaded by one interpreter, in this user's home."""
    name = json.dumps([os.getuid(), model_dir, python or ""])
    return os.path.join(model_cache_folder(), "models-" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:12])


def _stat_fields(info):
    return [info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


def model_cache_stat_row(path):
    """The lstat of `path` (and, for a symlink, its target and the target's stat); the error number if none."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return ["missing", exc.errno]
    row = _stat_fields(info)
    if stat.S_ISLNK(info.st_mode):
        try:
            row += [os.readlink(path)] + _stat_fields(os.stat(path))
        except OSError as exc:
            row += ["dangling", exc.errno]
    return row


def model_folder_rows(model_dir, limit=MODEL_CACHE_MAX_ENTRIES):
    """[relative path, stat row] of the folder and everything under it (links to folders are
    not entered: their own row and their target's stat are kept); None past `limit` entries."""
    rows = [[".", model_cache_stat_row(model_dir)]]
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            names = sorted(os.listdir(os.path.join(model_dir, rel)))
        except OSError as exc:
            rows.append([rel, "unlisted", exc.errno])
            continue
        for name in names:
            if len(rows) > limit:
                return None
            child = os.path.join(rel, name) if rel else name
            row = model_cache_stat_row(os.path.join(model_dir, child))
            rows.append([child, row])
            if row[0] != "missing" and stat.S_ISDIR(row[0]):
                pending.append(child)
    return rows


def installed_state_rows(python):
    """Each site folder of the interpreter's venv: its stat, its entries' lstat, and each
    *.dist-info's RECORD and METADATA (what pip writes on every install and uninstall)."""
    prefix = venv_prefix_of(python)
    if prefix:
        sites = env_site_dirs(prefix)
    elif os.path.realpath(python) == os.path.realpath(sys.executable):
        sites = env_site_dirs(None)
    else:
        return None  # another interpreter outside a venv: its site folders are not known here
    rows = [["prefix", prefix]]
    for site in sites:
        rows.append([site, model_cache_stat_row(site)])
        try:
            names = sorted(os.listdir(site))
        except OSError as exc:
            rows.append([site, "unlisted", exc.errno])
            continue
        for name in names:
            path = os.path.join(site, name)
            rows.append([name, model_cache_stat_row(path)])
            if name.endswith(".dist-info") or name.endswith(".egg-info"):
                for inner in ("RECORD", "METADATA", "PKG-INFO", "direct_url.json"):
                    rows.append([inner, model_cache_stat_row(os.path.join(path, inner))])
    return rows


def interpreter_rows(python):
    """The loading interpreter as a file (path, link, real file) and its venv's pyvenv.cfg."""
    if not python:
        return None
    real = os.path.realpath(python)
    rows = [python, model_cache_stat_row(python), real, model_cache_stat_row(real)]
    prefix = venv_prefix_of(python)
    if prefix:
        rows.append(model_cache_stat_row(os.path.join(prefix, "pyvenv.cfg")))
    if real == os.path.realpath(sys.executable):
        rows.append(sys.version)
    return rows


def model_cache_key(model_dir, args):
    """(sha256 hex of everything the answer for `model_dir` depends on, the stat rows in it),
    or (None, None) when the folder is too large to key."""
    folder = model_folder_rows(model_dir)
    if folder is None:
        return None, None
    python = args.get("python") or sys.executable
    # The installed state matters only to the live load (the files are read by this probe).
    installed = installed_state_rows(python) if args.get("trust_remote_code") else []
    if installed is None:
        return None, None
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(MODEL_CACHE_ENV_PREFIXES))
    request = dict((k, args.get(k)) for k in ("trust_remote_code", "live_timeout", "python", "code"))
    parts = [MODEL_CACHE_VERSION, os.getuid(), model_dir, os.path.realpath(model_dir), request, folder,
             interpreter_rows(python), installed, environment, sys.executable, sys.version]
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(), folder + installed


def model_cache_settled(rows, now_ns):
    """Whether no file of the key changed within the racy margin of `now_ns`."""
    for row in rows:
        fields = row[1] if len(row) > 1 else None
        if not isinstance(fields, list) or len(fields) < 4 or fields[0] == "missing":
            continue
        for stamp in (fields[2], fields[3]):
            margin = MODEL_CACHE_COARSE_MARGIN_NS if stamp % 10 ** 9 == 0 else MODEL_CACHE_FINE_MARGIN_NS
            if stamp + margin >= now_ns:
                return False
    return True


def model_cache_folder_problem(folder):
    """Why `folder` must not hold a cache we trust (None when it may): a real folder of this
    user that neither the group nor others can write."""
    try:
        info = os.lstat(folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(info.st_mode):
        return "not a real folder"
    if info.st_uid != os.getuid():
        return "owned by another user"
    if info.st_mode & 0o022:
        return "writable by others (mode %o)" % stat.S_IMODE(info.st_mode)
    return None


def model_cache_read(path):
    """The saved {"key", "model"} at `path`, only from a regular file of this user with mode
    0600 in a safe folder (never a symlink); None otherwise or when it cannot be read."""
    if model_cache_folder_problem(os.path.dirname(path)):
        return None
    try:
        fd = os.open(path, READ_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) != 0o600 \
                or info.st_size > MAX_CACHE_BYTES:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        data = json.loads(b"".join(chunks).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if isinstance(data, dict) and data.get("version") == MODEL_CACHE_VERSION and isinstance(data.get("model"), dict):
        return data
    return None


def model_cache_write(path, key, model):
    """Save the answer by rename (a reader sees the old file or the new), owner-only; the
    folder is made 0700 when missing. False when it could not be: only time is lost."""
    folder = os.path.dirname(path)
    try:
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o700)
        if model_cache_folder_problem(folder):
            return False
        fresh = not os.path.lexists(path)
        data = json.dumps({"version": MODEL_CACHE_VERSION, "key": key, "model": model}, sort_keys=True)
        tmp = "%s.%d.%s.tmp" % (path, os.getpid(), hashlib.sha1(os.urandom(8)).hexdigest()[:8])
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data.encode("utf-8"))
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if fresh:
            prune_user_caches(path)
        return True
    except (OSError, ValueError):
        return False


def live_result_cacheable(live):
    """Whether a live load's result may be replayed for the same key (see the top of this file)."""
    if not isinstance(live, dict):
        return True
    if "error" in live:  # the loader did not print its result: timed out, killed, crashed
        return False
    for part in ("untrusted", "trusted"):
        error = live[part].get("error") if isinstance(live.get(part), dict) else None
        # "ModuleNotFoundError: No module named 'tiktoken'": the class name before the colon.
        name = error.split(":", 1)[0].strip().rsplit(".", 1)[-1] if isinstance(error, str) else ""
        if name in MODEL_CACHE_TRANSIENT_ERRORS:
            return False
    return True


def model_cache_now_ns():
    return int(time.time() * 10 ** 9)


def model_cache_lookup(model_dir, args):
    """(the key now, the saved answer when it was saved under that key); (None, None) when
    this folder is not cached (too large, or the cache is off)."""
    if args.get("cache") is False:
        return None, None
    try:
        key = model_cache_key(model_dir, args)[0]
    except (OSError, ValueError):
        return None, None
    if key is None:
        return None, None
    path = model_cache_path(model_dir, args.get("python"))
    saved = model_cache_read(path)
    if saved is not None and saved.get("key") == key:
        touch_user_cache(path)
        return key, saved["model"]
    return key, None


def cached_model_answer(model_dir, args, compute, key=None):
    """compute(model_dir, args)'s answer, replayed from the cache when nothing it depends on
    changed (then with "cached": true), else computed and saved when that is safe. `key`: the
    key taken before the answer's work started (models_prestart), else it is taken now."""
    if key is None:
        key, hit = model_cache_lookup(model_dir, args)
        if hit is not None:
            hit["cached"] = True
            return hit
    model = compute(model_dir, args)
    if key is None or "error" in model or not live_result_cacheable(model.get("live")):
        return model
    try:
        after, rows = model_cache_key(model_dir, args)
    except (OSError, ValueError):
        return model
    if after == key and model_cache_settled(rows, model_cache_now_ns()):
        model_cache_write(model_cache_path(model_dir, args.get("python")), key, model)
    return model
