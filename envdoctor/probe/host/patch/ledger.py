# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Section "patch-ledger": the environment's patch ledger (<prefix>/.envdoctor/ledger.jsonl,
# format in envdoctor/patching/ledger.py) and, for each file it names, the file's sha256 now and the
# digest its distribution's RECORD gives. Cheap enough for every `check`: it hashes only
# the patched files, never the whole venv.

import base64
import binascii
import csv
import io
import json
import os

from envdoctor.probe.host.core import (
    MAX_RECORD_BYTES,
    interpreter_prefix,
    open_state_file,
    read_regular,
    section,
    sha256_regular,
    within,
)

LEDGER_RELATIVE = os.path.join(".envdoctor", "ledger.jsonl")


def _b(path):
    return path.encode("utf-8", "surrogateescape")


def _record_digest(value):
    algo, _, digest = value.partition("=")
    if algo != "sha256" or not digest:
        return None
    if len(digest) == 64:
        return digest.lower()  # a hex RECORD (malformed, but unambiguous)
    try:
        return binascii.hexlify(base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))).decode("ascii")
    except (binascii.Error, ValueError):
        return None


def _record_entries(files):
    """file -> (RECORD sha256 hex, 'name version') for the files some RECORD lists."""
    wanted = set(os.path.normpath(f) for f in files)
    found = {}
    folders = set()
    for path in wanted:
        # A file's RECORD is in a .dist-info beside the top-level folder that holds it.
        parent = os.path.dirname(path)
        while parent and parent != os.path.dirname(parent):
            if os.path.basename(parent) in ("site-packages", "dist-packages"):
                folders.add(parent)
                break
            parent = os.path.dirname(parent)
    for folder in sorted(folders):
        try:
            entries = os.listdir(_b(folder))
        except OSError:
            continue
        for raw in entries:
            entry = raw.decode("utf-8", "surrogateescape")
            if not entry.endswith(".dist-info"):
                continue
            try:
                text = read_regular(_b(os.path.join(folder, entry, "RECORD")), MAX_RECORD_BYTES)
                rows = list(csv.reader(io.StringIO(text.decode("utf-8", "surrogateescape"))))
            except (OSError, csv.Error):
                continue
            label = entry[: -len(".dist-info")].replace("-", " ", 1)
            for row in rows:
                if len(row) < 2:
                    continue
                full = os.path.normpath(os.path.join(folder, row[0]))
                if full in wanted:
                    found[full] = (_record_digest(row[1]), label)
    return found


@section("patch-ledger")
def patch_ledger_section(args, emit):
    prefix = args.get("prefix") or interpreter_prefix()
    path = os.path.join(prefix, LEDGER_RELATIVE)
    try:
        with open_state_file(_b(prefix), b"ledger.jsonl") as handle:
            lines = handle.read().decode("utf-8", "surrogateescape").splitlines()
    except FileNotFoundError:
        return {"prefix": prefix, "path": path, "exists": False, "lines": [], "files": {}}
    except OSError as exc:  # a symlinked .envdoctor or ledger: not followed
        return {"prefix": prefix, "path": path, "exists": False, "lines": [], "files": {},
                "error": "not read: %s" % (exc.strerror or exc)}
    files = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn last line: the ledger's parser skips it too
        if isinstance(entry, dict) and entry.get("file") and entry["file"] not in files:
            files.append(str(entry["file"]))
    records = _record_entries(files)
    facts = {}
    for name in files:
        if not os.path.isabs(name) or not within(name, prefix):
            # The ledger is a file in the venv: a path outside it is never read or hashed.
            facts[name] = {"exists": False, "sha256": None, "record_sha256": None, "record_of": None,
                           "error": "outside the environment %s; not read" % prefix}
            continue
        fact = {"exists": os.path.isfile(_b(name)), "sha256": None, "record_sha256": None, "record_of": None}
        if fact["exists"]:
            try:
                fact["sha256"] = sha256_regular(_b(name))
            except OSError as exc:
                fact["error"] = str(exc)
        record = records.get(os.path.normpath(name))
        if record:
            fact["record_sha256"], fact["record_of"] = record
        facts[name] = fact
    return {"prefix": prefix, "path": path, "exists": True, "lines": lines, "files": facts}
