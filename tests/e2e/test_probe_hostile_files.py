"""Every kind of file the probe reads, planted as a FIFO, a sparse 6 GiB file, a symlink to
/dev/zero or a file the probe may not read: the real probe program (python -I -S, the request
check and audit send, all their sections) finishes in bounded time and memory, and names each
planted file. As root the probe runs as `nobody`, so that "may not read" is real."""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envdoctor.audit.records import RecordAuditor
from envdoctor.operations.gather import build_request
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import build_program, encode_stdin, parse_lines, probe_command, ProbeOutput

FORMS = ["fifo", "sparse", "zero", "denied"]
SPARSE_SIZE = 6 << 30
#: What the probe may take, at most: seconds of wall time and bytes of peak memory (its own
#: and its children's), and the address space it is given (reading a planted file whole
#: would fail there).
SECONDS = 60
PEAK_BYTES = 400 << 20
ADDRESS_SPACE = 4 << 30
PYTHON = "/usr/bin/python3"  # an interpreter `nobody` may run (not one under /root)


def plant(path: Path, form: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if form == "fifo":
        os.mkfifo(path)
    elif form == "zero":
        path.symlink_to("/dev/zero")
    elif form == "sparse":
        with open(path, "wb") as handle:
            handle.truncate(SPARSE_SIZE)
    else:
        path.write_text("Name: secret\n\n")
        path.chmod(0o600 if os.geteuid() == 0 else 0o000)  # (root's own, read by `nobody`)
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def dist(site: Path, name: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A distribution as pip installs one: its files, METADATA and RECORD."""
    info = site / f"{name}-1.0.dist-info"
    for rel, text in files.items():
        write(site / rel, text)
    write(info / "METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n%s\n" % (
        name, "".join(f"Requires-Dist: {r}\n" for r in requires)))
    write(info / "RECORD", "".join(f"{rel},,\n" for rel in files) + f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return info


def layout(root: Path, form: str) -> tuple[Path, list[Path], Path, list[Path]]:
    """(venv, model folders, home, the planted files): one of every kind of file the probe reads."""
    home, venv = root / "home", root / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    planted = []
    dist(site, "transformers", {"transformers/__init__.py": "def pipeline(task):\n    pass\n"})
    dist(site, "prov_p", {"prov_p/__init__.py": "def f(x):\n    pass\n"})
    meta = dist(site, "meta_a", {"meta_a/__init__.py": ""})
    (meta / "METADATA").unlink()
    planted.append(plant(meta / "METADATA", form))                                   # METADATA
    rec = dist(site, "rec_b", {"rec_b/__init__.py": "import transformers\n"}, ("transformers",))
    (rec / "RECORD").unlink()
    planted.append(plant(rec / "RECORD", form))                                      # RECORD
    dist(site, "src_c", {"src_c/__init__.py": "import prov_p\nprov_p.f(1)\n", "src_c/mod.py": ""},
         ("transformers", "prov_p"))
    (site / "src_c" / "mod.py").unlink()
    planted.append(plant(site / "src_c" / "mod.py", form))                           # a source for drift and scan
    egg = site / "egg_d-1.0.egg-info"
    write(egg / "PKG-INFO", "Metadata-Version: 1.1\nName: egg_d\nVersion: 1.0\n\n")
    planted.append(plant(egg / "requires.txt", form))                                # egg-info requires
    planted.append(plant(site / "planted.pth", form))                                # .pth
    planted.append(plant(site / "pkg_e" / "_ext.abi3.so", form))                     # an ELF file
    dist(site, "patch_f", {"patch_f/target.py": ""})
    (site / "patch_f" / "target.py").unlink()
    planted.append(plant(site / "patch_f" / "target.py", form))                      # a file a patch hashes
    (venv / ".envdoctor").mkdir(mode=0o755)
    planted.append(plant(venv / ".envdoctor" / "ledger.jsonl", form))                # the ledger
    found = home / "venv-found"                                                       # a venv discovery reads
    write(found / "bin" / "python3", "")
    (found / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    planted.append(plant(found / "pyvenv.cfg", form))                                # pyvenv.cfg
    first, second = root / "models" / "first", root / "models" / "second"
    write(first / "tokenizer_config.json", json.dumps({"auto_map": {"AutoTokenizer": ["tokenization_x.Tok", None]}}))
    for name in ("config.json", "tokenizer.json", "chat_template.jinja", "tiktoken.model", "tokenization_x.py"):
        planted.append(plant(first / name, form))                                    # config, tokenizer, code
    write(second / "config.json", json.dumps({"model_type": "llama", "vocab_size": 10}))
    planted.append(plant(second / "tokenizer.model", form))                          # a sentencepiece model
    return venv, [first, second], home, planted


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder `nobody` can walk (tmp_path's parents are root's own, 0700)."""
    root = Path(tempfile.mkdtemp(prefix="envdoctor-hostile-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def as_probe_user(home: Path) -> dict[str, object]:
    """subprocess arguments that run the probe as `nobody` when the tests run as root."""
    if os.geteuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def run_probe_program(request: dict, home: Path) -> tuple[ProbeOutput, float, int]:
    """The real program with stdin held open as a transport holds it: (answer, seconds, peak bytes)."""
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    started = time.monotonic()
    proc = subprocess.Popen(probe_command([PYTHON]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=limits,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}, **as_probe_user(home))
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(encode_stdin({**request, "watch": True}, build_program(request["sections"])))
    proc.stdin.flush()
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdin.close()
    assert b"Traceback" not in err, err.decode(errors="replace")
    return parse_lines(out.splitlines()), seconds, usage.ru_maxrss * 1024


@pytest.mark.parametrize("form", FORMS)
def test_every_kind_of_file_planted_is_named_in_bounded_time_and_memory(world: Path, form: str) -> None:
    """METADATA, RECORD, .pth, pyvenv.cfg, config/tokenizer/template/ranks/code files of a model,
    an ELF file, a source for drift and scan, egg-info requires, a patched file and the ledger,
    each one a hostile file: every section finishes, in bounded time and memory, and every
    planted file is named (skipped with the reason; a sparse 'ELF file' read as no ELF file)."""
    venv, models, home, planted = layout(world, form)
    spec = HostSpec(name="local", ssh=None, venv=str(venv), models=tuple(map(str, models)))
    sections = dict(build_request(spec))
    sections["patch_files"] = {"prefix": str(venv), "files": [{"distribution": "patch_f", "path": "patch_f/target.py"}]}
    sections.update(RecordAuditor(workers=1).request(spec))
    output, seconds, peak = run_probe_program({"sections": sections, "deadline": SECONDS}, home)
    assert output.unfinished == [] and set(output.sections) | set(output.errors) == set(sections)
    assert not output.errors, output.errors
    assert seconds < SECONDS and peak < PEAK_BYTES, (seconds, peak >> 20)
    skipped = {s.path: s.why for s in output.skipped}
    binaries = {b["path"]: b.get("error", "") for b in output.sections["gpu-stack"]["binaries"]}
    unnamed = [str(p) for p in planted if str(p) not in skipped and not binaries.get(str(p))]
    assert unnamed == [], f"not named: {unnamed}; skipped: {skipped}"
    for path in planted:
        why = skipped.get(str(path)) or binaries.get(str(path), "")
        assert any(words in why for words in REASONS[form]), (path, why)


#: What the probe says of each form (a symlink is never followed to the ledger; an extension
#: module that is no regular file is not opened at all; a sparse ELF file's header is zeros).
REASONS = {
    "fifo": ("a FIFO, not a regular file", "an extension module's name on no regular file"),
    "zero": ("a character device, not a regular file", "Too many levels of symbolic links",
             "an extension module's name on no regular file"),
    "sparse": ("more than the", "header block runs past", "not an ELF file"),
    "denied": ("Permission denied",),
}
