"""Controller side of the probe: build the program, send it in one command, read its lines.

The host runs ``sh -c WRAPPER``: the wrapper notes what a non-interactive ``python3`` and
``pip`` resolve to (that is the pip trap's evidence), picks an interpreter by absolute path
and runs the bootstrap, which reads the request line and the program from stdin. The
interpreter runs with ``-I -S``: no PYTHON* variables, no user site, no working folder on
sys.path, and no ``site``, so no ``.pth`` file of the environment executes while it is
being read (probe/host/core.py finds the site folders from the venv layout instead). So one SSH
session gathers every fact, whatever the host's login shell is.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from envdoctor.probe import held, shared_answers
from envdoctor.probe.host import module_source
from envdoctor.errors import ProbeError
from envdoctor.logsafe import get_logger
from envdoctor.transport.first_line import GUARD_SH, FirstLine
from envdoctor.transport.interface import RUN_MARKER, CommandResult, Transport

log = get_logger(__name__)

#: Probe modules every program holds, first: the shared helpers, then the run (main, the
#: deadline, the watchdog).
CORE_MODULES = ("core", "guard")
SECTION_MODULES: dict[str, str] = {"host": "env.machine", "venvs": "env.venvs"}
#: Helper modules a section module uses, sent before it (a large section can be split).
MODULE_NEEDS: dict[str, tuple[str, ...]] = {"audit.section": ("audit.record", "audit.hashing", "audit.snapshot"),
                                              "model.files": ("model.tokenizer", "model.spm", "model.cache"),
                                              "gpu.stack": ("audit.record", "audit.hashing", "gpu.elf", "gpu.host"),
                                              "env.venvs": ("env.discovery",), "env.machine": ("env.shims", "env.discovery"),
                                              "node.section": ("gpu.elf", "gpu.host", "node.run", "node.host", "node.toolchain"),
                                              # the RECORD reader, the owner-only cache writer
                                              "audit.digests": ("audit.record", "audit.hashing"),
                                              "env.wheel_tags": ("env.discovery", "env.venvs"),
                                              # the scan's consumer selection, the owner-only cache
                                              # writer, the drift helpers and the import walk
                                              # (with venvs' reading of .pth files)
                                              "drift.section": ("scan.sources", "audit.record", "audit.hashing", "drift.summaries",
                                                        "drift.flags", "drift.resolve", "drift.uses", "env.discovery", "drift.baseline",
                                                        "env.venvs", "drift.imports", "drift.walk", "drift.reach", "drift.files",
                                                        "drift.consumers"),
                                              # the registry reader keeps its cache beside drift's
                                              "scan.engine_registry": ("scan.sources", "audit.record", "audit.hashing", "drift.summaries",
                                                                  "drift.flags", "drift.resolve", "drift.uses", "env.discovery",
                                                                  "drift.baseline", "env.venvs", "drift.imports",
                                                                  "drift.walk", "drift.reach", "drift.files",
                                                                  "drift.consumers", "drift.section",
                                                                  "scan.registry_literals")}

_WRAPPER = GUARD_SH + r"""
ENVDOCTOR_PY3=$(command -v python3 2>/dev/null)
ENVDOCTOR_PYTHON=$(command -v python 2>/dev/null)
ENVDOCTOR_PIP=$(command -v pip 2>/dev/null)
ENVDOCTOR_PIP3=$(command -v pip3 2>/dev/null)
ENVDOCTOR_PATH=$PATH
export ENVDOCTOR_PY3 ENVDOCTOR_PYTHON ENVDOCTOR_PIP ENVDOCTOR_PIP3 ENVDOCTOR_PATH
boot=$1
guard=$2
shift 2
for candidate in "$@" "$ENVDOCTOR_PY3" /usr/bin/python3 /usr/local/bin/python3 /usr/libexec/platform-python; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then
    envdoctor_guard "$guard"
    exec "$candidate" -I -S -c "$boot"
  fi
done
echo "envdoctor: no Python 3 interpreter found on this host (looked for python3 on PATH and in /usr/bin, /usr/local/bin)" >&2
exit 127
"""

#: Reads the request line from stdin, prints PROBE_HELLO (the first line of the protocol: see
#: transport/first_line.py) and cancels the host-side guard the wrapper started, then runs
#: the program the request names by sha256 ("program").
#: The program travels zlib-compressed ("size" bytes after the line) only when the host has
#: no verified copy: the bootstrap keeps the compressed text in the user's cache folder
#: (``program-<sha256>``) and runs a kept copy only after checking it against the digest the
#: controller sent; one that does not match is as good as absent. Without a usable copy it
#: prints ``{"need_program": sha256}`` and ends, and the controller sends the program.
#: Compiling costs 10 to 90 ms, so the code object is kept too (``probe-<digest>``, per
#: program and Python build); it is loaded only when the sha256 of its bytes is the one the
#: controller sends ("code"), which the controller learned from this host's own report when
#: it wrote them (``{"program_code": sha256}``, printed before the program's lines). Both are
#: used only when the folder and the file belong to the user and nobody else can write them;
#: files are 0600, written to a temporary name and renamed, the newest PROBE_CACHE_KEEP of
#: each kind kept. Any failure there only means sending or compiling again.
PROBE_CACHE_KEEP = 16
_BOOTSTRAP = f"""
import json,sys,os,zlib,marshal
from hashlib import sha256 as H
i=sys.stdin.buffer
r=json.loads(i.readline().decode())
print(json.dumps({{"envdoctor_probe":1}}),flush=True)
g=os.environ.pop("ENVDOCTOR_GUARD","")
if g.isdigit()and int(g)>0:
 try:os.kill(int(g),15)
 except Exception:pass
h=r['program'];n=r.get('size',0);k=r.get('code')
d=os.path.join(os.path.expanduser('~'),'.cache','envdoctor')
P=os.path.join(d,'program-'+h)
C=os.path.join(d,'probe-'+H((h+sys.version).encode()).hexdigest()[:40])
u=os.getuid()
def T(m):return m.st_uid==u and not m.st_mode&18
def R(q):
 try:
  if not T(os.stat(d)):return
  with open(os.open(q,os.O_RDONLY|os.O_NOFOLLOW),'rb') as f:
   m=os.fstat(f.fileno())
   if T(m) and m.st_mode>>12==8:return f.read()
 except Exception:pass
def W(q,b):
 try:
  if not os.path.isdir(d):os.makedirs(d,0o700)
  if not T(os.stat(d)):return
  t='%s.%d.tmp'%(q,os.getpid())
  with open(os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600),'wb') as f:f.write(b)
  os.replace(t,q)
  x=os.path.basename(q)[:6]
  o=sorted((os.stat(os.path.join(d,e)).st_mtime,e) for e in os.listdir(d) if e[:6]==x and e[-4:]!='.tmp')
  for _,e in o[:-{PROBE_CACHE_KEEP}]:os.unlink(os.path.join(d,e))
  return 1
 except Exception:pass
def V(z):
 try:
  s=zlib.decompress(z)
  if H(s).hexdigest()==h:return s
 except Exception:pass
c=s=None
if n:
 z=i.read(n);s=V(z)
 if s is None:sys.exit('envdoctor: the probe program does not match its sha256')
 W(P,z)
if k:
 b=R(C)
 try:
  if b and H(b).hexdigest()==k:c=marshal.loads(b)
 except Exception:pass
if c is None:
 if s is None:s=V(R(P) or b'')
 if s is None:
  print(json.dumps({{'need_program':h}}));sys.exit(0)
 c=compile(s,'<envdoctor-probe>','exec');b=marshal.dumps(c)
 if W(C,b):print(json.dumps({{'program_code':H(b).hexdigest()}}),flush=True)
g={{'__name__':'envdoctor_probe'}}
exec(c,g)
g['main'](r)
"""

NO_PYTHON_STATUS = 127
#: The bootstrap's first line, once it has read the request (the transport holds it back).
PROBE_HELLO = b'{"envdoctor_probe": 1}'


def register_section(name: str, module: str) -> None:
    """Make a probe module of this package available as section ``name``."""
    SECTION_MODULES[name] = module
    _program.cache_clear()
    section_code_digest.cache_clear()


def build_program(sections: Iterable[str]) -> str:
    return _program(tuple(sections))


@cache
def _program(sections: tuple[str, ...]) -> str:
    """The program for these sections, built once per run (every host of a fleet asks for it)."""
    modules = list(CORE_MODULES)
    for name in sections:
        try:
            module = SECTION_MODULES[name]
        except KeyError:
            raise ProbeError(f"no probe section named {name!r}") from None
        for needed in (*MODULE_NEEDS.get(module, ()), module):
            if needed not in modules:
                modules.append(needed)
    return "".join(module_source(m) for m in modules)


@cache
def section_code_digest(section: str) -> str:
    """A digest of the code that runs one section (its module, its helpers and core): a cache
    of the section's answers that the host keeps is keyed by it, so code that judges
    differently never replays an answer the old code gave."""
    return hashlib.sha1(_program((section,)).encode("utf-8")).hexdigest()[:16]


@dataclass
class ProbeOutput:
    """The raw facts one probe run returned, by section."""

    sections: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    items: dict[str, list[Any]] = field(default_factory=dict)
    #: Files the probe did not read, and why (a FIFO, over its budget, permission denied).
    skipped: list[SkippedFile] = field(default_factory=list)
    #: How many more were skipped than the probe listed.
    skipped_more: int = 0
    #: Sections the probe's deadline stopped or left unstarted, in the order asked.
    unfinished: list[str] = field(default_factory=list)
    #: Whether the answer ended with the probe's end record; a probe that died (killed, out
    #: of memory) leaves the sections it had already sent, which are answers all the same.
    complete: bool = True
    #: Each section's wall time on the host, in seconds, from the end record.
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedFile:
    """A file of the host the probe left unread: which section wanted it, where, and why."""

    section: str
    path: str
    why: str

    def describe(self) -> str:
        """The path, with the distribution whose metadata it is (``idna 3.21's RECORD``) when it
        lies in a ``.dist-info`` or ``.egg-info`` folder, and why it was not read."""
        owner = metadata_owner(self.path)
        return f"{self.path}" + (f" ({owner[0]} {owner[1]}'s {owner[2]})" if owner else "") + f": {self.why}"


def metadata_owner(path: str) -> tuple[str, str, str] | None:
    """(name, version, file) of the distribution whose metadata folder holds ``path``
    (``.../idna-3.21.dist-info/RECORD``: idna, 3.21, RECORD); None for any other path."""
    parts = path.split("/")
    for at in range(len(parts) - 2, -1, -1):
        folder = parts[at]
        for suffix in (".dist-info", ".egg-info"):
            if folder.endswith(suffix) and len(folder) > len(suffix):
                name, _, version = folder[: -len(suffix)].partition("-")
                return name, version.partition("-")[0], "/".join(parts[at + 1:])
    return None


#: Skipped files kept from one answer, and the characters kept of each text in one.
MAX_SKIPPED = 100
_SKIP_TEXT = 1000


def _skipped_files(record: dict[str, Any]) -> tuple[list[SkippedFile], int]:
    """The skipped files an end record names; what is not of that shape is dropped."""
    raw = record.get("skipped")
    found = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("section", "path", "why")):
            found.append(SkippedFile(item["section"][:_SKIP_TEXT], item["path"][:_SKIP_TEXT], item["why"][:_SKIP_TEXT]))
    more = record.get("skipped_more")
    extra = more if isinstance(more, int) and not isinstance(more, bool) and more > 0 else 0
    return found[:MAX_SKIPPED], extra + max(0, len(found) - MAX_SKIPPED)


def venv_pythons(venv: str | None) -> list[str]:
    """Interpreters to try for the probe, before the host's own python3: the venv's first."""
    if not venv:
        return []
    return [os.path.join(venv, "bin", "python3"), os.path.join(venv, "bin", "python")]


def probe_command(python_candidates: Sequence[str], guard_seconds: str | None = None) -> list[str]:
    """The probe's command line; ``guard_seconds``: the host-side guard's bound (by default
    that of the first-line bound with no timeout)."""
    guard = guard_seconds or probe_first_line(python_candidates).guard_seconds(None)
    return ["sh", "-c", _WRAPPER, "envdoctor-probe", _BOOTSTRAP, guard, *python_candidates]


def probe_first_line(python_candidates: Sequence[str]) -> FirstLine:
    """What the probe's interpreter must print first, and how it is named when it does not."""
    chosen = ", ".join(python_candidates) + " or python3" if python_candidates else "python3"
    return FirstLine(PROBE_HELLO, f"the interpreter that runs the probe (the first of {chosen} found)")


def encode_stdin(request: dict[str, Any], program: str, *, send: bool = True) -> bytes:
    """The request line, naming the program by its sha256, then the program zlib-compressed
    (the line gives its size: stdin may stay open after it). Without ``send`` only the line
    goes, for a host that keeps a copy: it answers ``need_program`` when it has none."""
    line = {**request, "program": program_digest(program)}
    if send:
        code = _compressed(program)
        return (json.dumps({**line, "size": len(code)}) + "\n").encode("utf-8") + code
    return (json.dumps(line) + "\n").encode("utf-8")


@cache
def program_digest(program: str) -> str:
    """The sha256 that names a program on the host."""
    return hashlib.sha256(program.encode("utf-8")).hexdigest()


@cache
def _compressed(program: str) -> bytes:
    # the same few programs for every host of a fleet: compressed once per run
    return zlib.compress(program.encode("utf-8"), 6)


#: Values (estimated from ``[``, ``{`` and ``,``) one host's answer may hold: 64 MB of
#: ``[1,1,...]`` would otherwise become gigabytes of Python objects, for each of 64 hosts.
MAX_ANSWER_VALUES = 4_000_000


def parse_lines(lines: Iterable[bytes]) -> ProbeOutput:
    """The records of a probe answer. Anything unexpected (not JSON, nested too deeply, too
    many values, a section name that is not text) is a ProbeError for this host alone. An
    answer without the end record is ``complete=False``: what it holds was sent whole, line
    by line, and the caller decides what the sections it lacks become (see run_probe)."""
    output = ProbeOutput()
    done = False
    values = 0
    for raw in lines:
        if not raw.strip():
            continue
        record = shared_answers.known_record(raw)
        if record is not None:  # the same bytes another host sent: decoded and checked then
            output.sections[record["section"]] = record.get("data")
            continue
        values += raw.count(b"[") + raw.count(b"{") + raw.count(b",")
        if values > MAX_ANSWER_VALUES:
            raise ProbeError(f"the probe's answer holds more than {MAX_ANSWER_VALUES} values; refusing to read it")
        try:
            record = json.loads(raw)
        except RecursionError:
            raise ProbeError(f"probe printed JSON nested too deeply to read: {raw[:120]!r}") from None
        except ValueError as exc:
            raise ProbeError(f"probe printed something that is not JSON: {raw[:120]!r}") from exc
        if not isinstance(record, dict):  # e.g. a sitecustomize on the host printing "42"
            raise ProbeError(f"probe printed something that is not a probe record: {raw[:120]!r}")
        if "section" not in record and ("program_code" in record or "envdoctor_probe" in record):
            continue  # the bootstrap's first line (held back by a transport), or its note that it kept the code
        if record.get("done"):
            done = True
            output.skipped, output.skipped_more = _skipped_files(record)
            seconds = record.get("seconds")
            if isinstance(seconds, dict):
                output.seconds = {str(k)[:_SKIP_TEXT]: float(v) for k, v in list(seconds.items())[:MAX_SKIPPED]
                                  if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e9}
            unfinished = record.get("unfinished")
            if isinstance(unfinished, list):
                output.unfinished = [str(n)[:_SKIP_TEXT] for n in unfinished[:MAX_SKIPPED] if isinstance(n, str)]
            continue
        name = record.get("section", "?")
        if not isinstance(name, str):
            raise ProbeError(f"probe printed a record whose section is not a name: {raw[:120]!r}")
        if "item" in record:
            output.items.setdefault(name, []).append(record["item"])
        elif "error" in record:
            output.errors[name] = record["error"]
        else:
            output.sections[name] = record.get("data")
            shared_answers.share(raw, record)
    output.complete = done
    return output


def _ended_early(output: ProbeOutput, requested: Iterable[str], result: CommandResult) -> ProbeOutput:
    """A probe that died after sending some sections: each section it had answered stands, each
    one it had not is that section's error (so its checks say why, and no other check is
    blocked by it), and the sections are listed as unfinished for host.probe. A probe that died
    before answering anything is the host's error, as before."""
    if not (output.sections or output.errors or output.items):
        raise ProbeError("the probe stopped before it finished (no end marker in its output)")
    how = _how_it_ended(result)
    missing = [name for name in requested if name not in output.sections and name not in output.errors]
    for position, name in enumerate(missing):
        output.errors[name] = ("did not finish" if position == 0 else "not run") + f": {how}"
    output.unfinished = [*output.unfinished, *(n for n in missing if n not in output.unfinished)]
    return output


def _how_it_ended(result: CommandResult) -> str:
    status = result.exit_status
    if status == -9 or status == 137:
        return ("the probe was killed (SIGKILL) before it answered: the host's out-of-memory killer, its watchdog, "
                "or a person")
    if status is not None and status < 0:
        return f"the probe ended on signal {-status} before it answered"
    detail = result.stderr_tail(1)
    return f"the probe ended (exit status {status}) before it answered" + (f": {detail}" if detail else "")


def probe_deadline(timeout: float) -> float:
    """The probe's own deadline for a command timeout: a tenth earlier (5 to 30 s: the remote
    shell and interpreter start, the answer travels, the controller judges it), so that it
    reports what it did not finish (and ends what it started) before envdoctor gives up."""
    return max(1.0, timeout - min(30.0, max(5.0, timeout / 10)))


async def run_probe(
    transport: Transport,
    sections: dict[str, dict[str, Any]],
    *,
    python_candidates: Sequence[str] = (),
    timeout: float | None = 300,
    until: float | None = None,
) -> ProbeOutput:
    """Run the requested sections in one command on the host and return what they found.
    The probe stops itself at its deadline (from ``timeout``, shortened to what is left before
    ``until``, a time.monotonic when the host's whole budget ends), and its watchdog ends it
    and what it started when this command's stdin, held open while it runs, closes: see
    probe/guard.py.

    Only the request line goes to a host that keeps the program (see _BOOTSTRAP); one that
    answers ``need_program`` is sent it in a second command, as is one the controller's
    memory (probe/held.py) knows to lack it."""
    program = build_program(sections)
    digest = program_digest(program)
    if until is not None:
        left = max(1.0, until - time.monotonic())
        timeout = left if timeout is None else min(timeout, left)
    started = time.monotonic()
    destination = "\0".join((transport.destination, *python_candidates))
    known, holds, code = held.HELD.lookup(destination, digest)
    send = known and not holds
    result = await _run_once(transport, sections, program, python_candidates, timeout, send=send, code=code)
    lines = result.stdout.splitlines()
    if not send and _asks_for_program(lines, digest):
        send = True
        if timeout is not None:  # (what the first command left of it)
            timeout = max(1.0, timeout - (time.monotonic() - started))
        result = await _run_once(transport, sections, program, python_candidates, timeout, send=True, code="")
        lines = result.stdout.splitlines()
    reported = _reported_code(lines)
    if result.exit_status == NO_PYTHON_STATUS and not result.stdout:
        raise ProbeError(result.stderr_tail(1) or "no Python 3 interpreter on the host")
    try:
        output = parse_lines(lines)
        if not output.complete:
            output = _ended_early(output, sections, result)
    except ProbeError as exc:
        detail = result.stderr_tail(3)
        raise ProbeError(f"{exc}; exit status {result.exit_status}" + (f": {detail}" if detail else "")) from None
    log.info("probe_answered", host=transport.name, seconds=output.seconds, complete=output.complete,
             wall=round(time.monotonic() - started, 3))
    # Sent and not kept (no compiled code reported: a cache folder others can write): the
    # next run sends it at once.
    held.HELD.note(destination, digest, held=bool(reported) or not send, code=reported)
    return output


async def _run_once(transport: Transport, sections: dict[str, dict[str, Any]], program: str,
                    python_candidates: Sequence[str], timeout: float | None, *, send: bool, code: str) -> CommandResult:
    """One probe command: the request line, naming the program (and its compiled code when
    known), and the program itself when ``send``."""
    request: dict[str, Any] = {"sections": sections, "watch": True}
    if timeout is not None:
        request["deadline"] = probe_deadline(timeout)
    if code:
        request["code"] = code
    first_line = probe_first_line(python_candidates)
    return await transport.run(
        probe_command(python_candidates, first_line.guard_seconds(timeout)),
        stdin=encode_stdin(request, program, send=send),
        env=RUN_MARKER,
        timeout=timeout,
        hold_stdin=True,
        first_line=first_line,
    )


_NEED_PROGRAM = b'{"need_program": "'
_PROGRAM_CODE = b'{"program_code": "'


def _first(lines: list[bytes]) -> bytes:
    """The bootstrap's first line after PROBE_HELLO (which a transport has already taken)."""
    if lines and lines[0].strip() == PROBE_HELLO:
        lines = lines[1:]
    return lines[0].strip() if lines else b""


def _asks_for_program(lines: list[bytes], digest: str) -> bool:
    """Whether the host's answer is the bootstrap's request for this program."""
    return _first(lines) == _NEED_PROGRAM + digest.encode() + b'"}'


def _reported_code(lines: list[bytes]) -> str:
    """The sha256 of the compiled code the host just kept, from the bootstrap's line after its hello."""
    first = _first(lines)
    if first.startswith(_PROGRAM_CODE) and first.endswith(b'"}') and len(first) == len(_PROGRAM_CODE) + 66:
        digest = first[len(_PROGRAM_CODE):-2].decode("ascii", "replace")
        if all(c in "0123456789abcdef" for c in digest):
            return digest
    return ""
