# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helpers of the "audit" section (sent before envdoctor/probe/host/audit/section.py): paths as text,
# RECORD parsing and the metadata of the distributions in a site-packages folder.
#
# Paths are handled as text decoded from UTF-8 with surrogateescape, whatever the host's
# locale, so a filename with non-UTF-8 bytes survives JSON and comes back byte for byte on
# the controller (path.encode("utf-8", "surrogateescape")).

import binascii
import csv
import hashlib
import io
import json
import os
import re
from array import array

from envdoctor.probe.host.core import MAX_LIST_BYTES, MAX_RECORD_BYTES, MAX_TEXT_BYTES, Skipped, read_regular

#: Installers that write RECORD; any other (debian, rpm, conda) manages the files itself.
PYTHON_INSTALLERS = ("pip", "uv", "poetry", "pdm", "installer", "hatch", "pipenv")


def fsb(path):
    return path.encode("utf-8", "surrogateescape")


def fst(raw):
    return raw.decode("utf-8", "surrogateescape")


def stat_key(st):
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def key_text(key):
    """A stat key as one short string."""
    return "%d:%d:%d:%d" % tuple(key)


def pack_keys(keys):
    """Stat keys as one bytes string of 64-bit words (the cache holds 30,000 of them: far
    faster to write and read than as many lists or strings), or as their texts when one
    does not fit (an inode above 2**63)."""
    words = array("q")
    try:
        for key in keys:
            words.extend(key)
    except OverflowError:
        return [key_text(k) for k in keys]
    return words.tobytes()


def unpack_keys(packed):
    """pack_keys' answer as a list of stat keys."""
    if isinstance(packed, bytes):
        words = array("q")
        words.frombytes(packed)
        return [words[i:i + 4].tolist() for i in range(0, len(words), 4)]
    return [[int(part) for part in text.split(":")] for text in packed]


# ---------------------------------------------------------------------------------------
# RECORD and distribution metadata


_DIGEST_SIZES = {}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_URLSAFE = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
#: A RECORD row as pip writes it (most rows): path, sha256 in canonical urlsafe base64
#: (43 characters, the last one with its 2 spare bits zero, padding optional), size. Any
#: other spelling goes the slow way, which decodes it.
_SHA256_B64 = re.compile(r"sha256=([A-Za-z0-9_-]{42}[AEIMQUYcgkosw048])=?\Z")
#: A whole RECORD line as pip writes it: a path without comma, quote or line end; such a
#: digest or none; a size in ASCII digits or none.
_PIP_LINE = re.compile(r"^([^,\"\r\n\0]+),(?:sha256=([A-Za-z0-9_-]{42}[AEIMQUYcgkosw048])=?)?,([0-9]*)\r?$",
                       re.MULTILINE)


def digest_size(algo):
    if algo not in _DIGEST_SIZES:
        try:
            _DIGEST_SIZES[algo] = hashlib.new(algo).digest_size
        except (ValueError, TypeError):
            _DIGEST_SIZES[algo] = None
    return _DIGEST_SIZES[algo]


def b64_text(raw):
    """A digest as RECORD spells it: urlsafe base64 without padding (one text per digest)."""
    return binascii.b2a_base64(raw)[:-1].translate(_TO_URLSAFE).rstrip(b"=").decode("ascii")


def digest_hex(algo, digest):
    """A digest from parse_record_hash as hex (it is hex already when its length says so)."""
    if digest is None or len(digest) == 2 * (digest_size(algo) or 0):
        return digest
    return binascii.hexlify(b64_bytes(digest)).decode("ascii")


def b64_bytes(text):
    """The bytes of base64 text of either alphabet, padded or not (binascii.Error when it is not base64).
    a2b_base64 on translated bytes: urlsafe_b64decode does the same, three times slower."""
    return binascii.a2b_base64(text.encode("ascii").translate(_URLSAFE) + b"=" * (-len(text) % 4))


def parse_record_hash(value):
    """'sha256=<b64>' -> (algo, digest, encoding); encoding is 'b64', 'hex' or an error.

    The digest is compared as text, as the worker spells its own: hex for a hex digest
    (2 characters a byte), else canonical urlsafe base64 without padding (any spelling the
    decoder accepts, standard alphabet or padded, becomes that one text), so 30,000 rows
    are never decoded."""
    if not value:
        return None, None, "none"
    algo, sep, digest = value.partition("=")
    if not sep or not digest:
        return None, None, "malformed hash %r" % value[:80]
    algo = algo.strip().lower()
    size = digest_size(algo)
    if size is None:
        return None, None, "unknown hash algorithm %r" % algo[:40]
    digest = digest.strip()
    if len(digest) == size * 2 and _HEX_DIGITS.issuperset(digest):
        return algo, digest.lower(), "hex"
    try:
        raw = b64_bytes(digest)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None, None, "malformed hash %r" % value[:80]
    if len(raw) != size:
        return None, None, "malformed hash %r" % value[:80]
    return algo, b64_text(raw), "b64"


def site_path(site_dir, relative):
    """Where a RECORD path points; normpath only when needed (it is slow on 20,000 paths)."""
    if relative.startswith("/") or "./" in relative or "//" in relative:
        return os.path.normpath(os.path.join(site_dir, relative))
    return site_dir + "/" + relative


def site_paths(site_dir, relatives):
    """([site_path(site_dir, r) for r in relatives], the positions of those that are not
    simply site_dir + "/" + r): one join and one split in C for a RECORD of 15,000 rows,
    and site_path only for the few that need normpath (../../../bin/torchrun)."""
    joined = "\0".join(relatives)
    if not relatives or joined.count("\0") != len(relatives) - 1:  # (a NUL inside a path)
        return [site_path(site_dir, r) for r in relatives], set(range(len(relatives)))
    inside = site_dir + "/"
    paths = (inside + joined.replace("\0", "\0" + inside)).split("\0")
    # Where site_path would normalize: "./" or "//" in a path, or a path that starts with "/".
    marks = [0] if joined.startswith("/") else []
    for pattern, shift in (("./", 0), ("//", 0), ("\0/", 1)):
        at = joined.find(pattern)
        while at != -1:
            marks.append(at + shift)
            at = joined.find(pattern, at + 1)
    odd, row, counted = set(), 0, 0
    for at in sorted(marks):  # the row of each mark: NULs before it, counted once overall
        row += joined.count("\0", counted, at)
        counted = at
        odd.add(row)
    for row in odd:
        paths[row] = site_path(site_dir, relatives[row])
    return paths, odd


def parse_record(text):
    """RECORD text -> (rows, problems); a row is (relative path, algo, digest, encoding, size)
    with the digest as parse_record_hash gives it."""
    rows, problems, _ = read_record(text)
    return rows, problems


def read_record(text):
    """parse_record's (rows, problems), and whether any digest is hex.

    When every line is as pip writes it, one regular expression reads them all (and no
    digest is hex). Else, without a quote, a NUL or a lone carriage return, the csv module
    would split each line at its commas: str.split does that, three times faster."""
    if '"' in text or "\0" in text or text.count("\r") != text.count("\r\n"):
        lines = csv.reader(io.StringIO(text))
    else:
        pip_rows = pip_record_rows(text)
        if pip_rows is not None:
            return pip_rows, [], False
        lines = [line.split(",") for line in text.replace("\r\n", "\n").split("\n")]
    rows = []
    problems = []
    fast = _SHA256_B64.match
    for number, fields in enumerate(lines, 1):
        if not fields or not fields[0]:
            continue
        if len(fields) != 3:
            problems.append("line %d has %d fields, not 3" % (number, len(fields)))
            fields = (list(fields) + ["", ""])[:3]
        path, hash_value, size_text = fields
        pip_row = fast(hash_value)
        if pip_row is not None:
            algo, digest, encoding = "sha256", pip_row.group(1), "b64"
        else:
            algo, digest, encoding = parse_record_hash(hash_value.strip())
        size = None
        if size_text:
            try:
                size = int(size_text)
            except ValueError:
                if size_text.strip():  # blank is no size
                    problems.append("line %d: size %r is not a number" % (number, size_text[:20]))
        if pip_row is None and encoding not in ("b64", "hex", "none"):
            problems.append("line %d: %s" % (number, encoding))
        rows.append((path, algo, digest, encoding, size))
    return rows, problems, any(r[3] == "hex" for r in rows)


def pip_record_rows(text):
    """read_record's rows when every line of `text` (no quote, NUL or lone carriage return)
    is a plain pip row, else None."""
    found = _PIP_LINE.findall(text)
    lines = text.split("\n")
    if len(found) != len(lines) - lines.count("") - lines.count("\r"):
        return None
    return [(path, "sha256", digest, "b64", int(size) if size else None) if digest else
            (path, None, None, "none", int(size) if size else None) for path, digest, size in found]


def read_text(path, limit, head=False):
    """A file of the host as text (see core.read_regular for the budget and what is skipped)."""
    return read_regular(fsb(path), limit, head).decode("utf-8", "surrogateescape")


def metadata_name_version(path):
    name = version = ""
    try:
        text = read_text(path, MAX_TEXT_BYTES, head=True)  # Name and Version come first
    except OSError:
        return name, version
    for line in text.splitlines():
        if not line.strip():
            break
        if line.startswith("Name:") and not name:
            name = line[5:].strip()
        elif line.startswith("Version:") and not version:
            version = line[8:].strip()
    return name, version


def editable_source(folder):
    """The source folder of an editable install (direct_url.json), else None."""
    try:
        info = json.loads(read_text(os.path.join(folder, "direct_url.json"), MAX_LIST_BYTES))
    except (OSError, ValueError):
        return None
    if isinstance(info, dict) and (info.get("dir_info") or {}).get("editable"):
        return str(info.get("url", ""))
    return None


def read_dist_info(site_dir, entry):
    folder = os.path.join(site_dir, entry)
    name, version = metadata_name_version(os.path.join(folder, "METADATA"))
    if not name:
        name = entry[: -len(".dist-info")].split("-")[0]
        version = version or entry[: -len(".dist-info")].partition("-")[2]
    dist = {"name": name, "version": version, "path": folder, "site": site_dir, "kind": "dist-info",
            "notes": [], "rows": []}
    try:
        dist["installer"] = read_text(os.path.join(folder, "INSTALLER"), 200, head=True).strip()
    except OSError:
        dist["installer"] = ""
    dist["editable"] = editable_source(folder)
    if dist["editable"] is not None:
        dist["notes"].append("editable install of %s: its source is not verified" % (dist["editable"] or "a folder"))
    try:
        dist["record_key"] = stat_key(os.stat(fsb(os.path.join(folder, "RECORD"))))
        dist["record"] = "ok"
    except OSError:
        dist["record_key"] = None
        load_record(dist)
    return dist


def load_record(dist):
    """Parse the distribution's RECORD into dist["rows"] (or say why there is none)."""
    folder = dist["path"]
    try:
        text = read_text(os.path.join(folder, "RECORD"), MAX_RECORD_BYTES)
    except Skipped as exc:  # there, but not read (a FIFO, a planted huge file): not "missing"
        dist["record"] = "unreadable"
        dist["notes"].append("RECORD not read (%s): its files cannot be verified" % exc.strerror)
        return dist
    except OSError:
        try:
            others = sorted(fst(n) for n in os.listdir(fsb(folder)) if fst(n).startswith("RECORD"))
        except OSError:
            others = []
        installer = dist["installer"] or "an unknown installer"
        if others:
            dist["record"] = "renamed"
            dist["notes"].append(
                "RECORD was renamed to %s by %s: the environment is externally managed; verify it with "
                "the system's package manager (debsums, rpm -V)" % (others[0], installer)
            )
            try:
                dist["rows"], _ = parse_record(read_text(os.path.join(folder, others[0]), MAX_RECORD_BYTES))
            except OSError:
                pass
            dist["rows"] = [(r[0], None, None, "none", None) for r in dist["rows"]]  # known, not verified
        elif dist["installer"] and dist["installer"] not in PYTHON_INSTALLERS:
            dist["record"] = "missing"
            dist["notes"].append("no RECORD: installed by %s, so the environment is externally managed; verify "
                                 "it with the system's package manager (debsums, rpm -V)" % installer)
        else:
            dist["record"] = "missing"
            dist["notes"].append("no RECORD (installed by %s): its files cannot be verified" % installer)
        return dist
    rows, problems, hex_rows = read_record(text)
    dist["record"] = "ok"
    dist["rows"] = rows
    notes = dist["record_notes"] = []
    if hex_rows:
        notes.append("malformed RECORD: digests are hex, not urlsafe base64 (a build backend's bug, "
                     "not tampering); verified as hex")
    if problems:
        notes.append("malformed RECORD: %s%s" % ("; ".join(problems[:3]),
                                                " (and %d more)" % (len(problems) - 3) if len(problems) > 3 else ""))
    dist["notes"].extend(n for n in notes if n not in dist["notes"])
    return dist


def read_egg_info(site_dir, entry):
    folder = os.path.join(site_dir, entry)
    is_dir = os.path.isdir(fsb(folder))
    meta = os.path.join(folder, "PKG-INFO") if is_dir else folder
    name, version = metadata_name_version(meta)
    stem = entry[: -len(".egg-info")]
    name = name or stem.split("-")[0]
    dist = {"name": name, "version": version or stem.partition("-")[2].split("-")[0], "path": folder,
            "site": site_dir, "kind": "egg-info", "record": "none", "installer": "", "editable": None,
            "rows": [], "covers": [], "notes": []}
    how = "an .egg-info folder (setuptools)" if is_dir else "a bare .egg-info file (distutils)"
    dist["notes"].append("installed as %s without RECORD: its files cannot be verified" % how)
    if is_dir:
        try:
            for line in read_text(os.path.join(folder, "installed-files.txt"), MAX_RECORD_BYTES).splitlines():
                if line.strip():
                    dist["rows"].append((os.path.relpath(os.path.join(folder, line.strip()), site_dir),
                                         None, None, "none", None))
        except OSError:
            pass
        try:
            dist["covers"] = [t.strip() for t in read_text(os.path.join(folder, "top_level.txt"), MAX_LIST_BYTES)
                              .splitlines() if t.strip()]
        except OSError:
            pass
    if not dist["covers"]:
        dist["covers"] = [name.replace("-", "_"), name.replace("-", "_").lower()]
    return dist


def site_distributions(site_dir):
    try:
        entries = sorted(fst(e) for e in os.listdir(fsb(site_dir)))
    except OSError:
        return []
    dists = []
    for entry in entries:
        if entry.endswith(".dist-info") and os.path.isdir(fsb(os.path.join(site_dir, entry))):
            dists.append(read_dist_info(site_dir, entry))
        elif entry.endswith(".egg-info"):
            dists.append(read_egg_info(site_dir, entry))
    return dists


