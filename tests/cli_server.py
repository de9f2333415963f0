"""A fork server for the CLI launches of the tests: each `envdoctor ARGS...` is still its own
process, forked from one that has already imported envdoctor, click, asyncssh and libcst.

The e2e and oracle tiers launch the CLI about 1,350 times a run, and each fresh interpreter
spent 0.14 s (hosts) to 0.4 s (check over SSH) of CPU importing the same modules again
(asyncssh alone is ~0.25 s). A
forked child starts with those modules loaded, then takes the launch's argv, environment,
working folder and stdin, and the caller's own stdout and stderr pipes (passed over a Unix
socket, so the caller reads them as it reads a subprocess's), and runs ``python -m envdoctor``
as ``__main__``. It exits with the CLI's status, which it sends back on the socket first.

What a fresh interpreter would decide at start-up from the environment cannot follow the
launch's environment here (the interpreter's flags, the stdio encoding), so a launch whose
``PYTHON*``, ``LANG`` or ``LC_*`` variables differ from the server's runs as a plain subprocess
(:func:`can_serve`). envdoctor's one value made at import from the environment, the run id
that marks its commands on a host, is made again in each child. Tests about start-up itself
(what is imported, the liboqs search) launch their own interpreter.

Run as ``python -m tests.cli_server SOCKET``; it prints ``ready`` once listening, and exits
when its parent (the pytest worker) is gone or on SIGTERM.
"""

from __future__ import annotations

import atexit
import json
import locale
import logging
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

#: Variables a fresh interpreter reads at start-up that a forked child cannot take on
#: (PYTHONDONTWRITEBYTECODE is applied in the child; PYTHONUNBUFFERED changes no output).
_APPLIED_AT_FORK = frozenset({"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"})
MAX_REQUEST = 1 << 20


def start_up_variables(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if (k.startswith("PYTHON") and k not in _APPLIED_AT_FORK) or k == "LANG" or k.startswith("LC_")}


def can_serve(env: dict[str, str], server_env: dict[str, str]) -> bool:
    """Whether a launch with ``env`` starts as the server's interpreter started."""
    return start_up_variables(env) == start_up_variables(server_env)


def _preimport() -> None:
    from envdoctor.cli.commands import commands_dict, load_command
    from envdoctor.transport.asyncssh_loader import import_asyncssh

    for name in commands_dict:
        load_command(name)
    import_asyncssh([])  # (as a launch whose ssh configs name no sntrup algorithm does)
    import libcst  # noqa: F401  (fix, scan, drift and patches parse code)
    import rich.console  # noqa: F401
    import structlog  # noqa: F401


def _exit_status(code: object) -> int:
    """What the interpreter makes of ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(conn: socket.socket, request: dict, out_fd: int, err_fd: int) -> None:
    """Become `python -m envdoctor ARGS...`; never returns."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (the server's SIG_IGN would break waitpid)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (null, out_fd, err_fd):
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        if request.get("cwd"):
            os.chdir(request["cwd"])
        from envdoctor.transport import interface

        # The run id as a fresh launch makes it at import: the launch's ENVDOCTOR_RUN_ID, else its own.
        interface.RUN_ID = os.environ.get("ENVDOCTOR_RUN_ID") or os.urandom(8).hex()
        interface.RUN_MARKER["ENVDOCTOR_RUN_ID"] = interface.RUN_ID
        sys.argv = ["envdoctor", *request["args"]]
        try:
            runpy.run_module("envdoctor", run_name="__main__", alter_sys=True)
            status = 0
        except SystemExit as exc:
            status = _exit_status(exc.code)
        except BaseException:
            traceback.print_exc()
            status = 1
        atexit._run_exitfuncs()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        conn.send(json.dumps({"status": status}).encode())
    finally:
        os._exit(status)


def serve(path: str) -> None:
    # What the imports print (a warning) would be on each fresh launch's stderr, where a test
    # may look for it: the server refuses to start instead of hiding it.
    saved = os.dup(2)
    with tempfile.TemporaryFile() as said:
        os.dup2(said.fileno(), 2)
        try:
            _preimport()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        said.seek(0)
        printed = said.read().decode("utf-8", "replace")
    if printed:
        print(f"importing the CLI printed to stderr:\n{printed}", file=sys.stderr, flush=True)
        sys.exit(3)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)  # to notice a parent that is gone
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    print("ready", flush=True)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        fds: list[int] = []
        try:
            message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
            request = json.loads(message)
            if len(fds) != 2:
                raise ValueError("a request passes stdout and stderr")
            pid = os.fork()
            if pid == 0:
                listener.close()
                _child(conn, request, *fds)
            conn.send(json.dumps({"pid": pid}).encode())
        except Exception as exc:  # a bad request is that caller's failure, not the server's
            try:
                conn.send(json.dumps({"error": repr(exc)}).encode())
            except OSError:
                pass
        finally:
            conn.close()
            for fd in fds:
                os.close(fd)


class CLIServer:
    """The caller's side: :meth:`run` is ``subprocess.run([python, "-m", "envdoctor", *args],
    capture_output=True, text=True, stdin=DEVNULL, ...)`` through the server when it can."""

    def __init__(self, folder: str, env: dict[str, str], cwd: str) -> None:
        self.path = os.path.join(folder, "cli.sock")
        self.env = dict(env)
        self.process = subprocess.Popen([sys.executable, "-m", "tests.cli_server", self.path], env=self.env,
                                        cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        ready = self.process.stdout.readline() if self.process.stdout else b""
        if ready.strip() != b"ready":
            self.process.kill()
            raise RuntimeError(f"the CLI server did not start (exit {self.process.wait()})")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def run(self, args: list[str], *, env: dict[str, str], cwd: str | None, timeout: float) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of one launch; raises subprocess.TimeoutExpired as run() does."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self.path)
            request = {"args": list(args), "env": env, "cwd": str(cwd) if cwd else None}
            socket.send_fds(conn, [json.dumps(request).encode()], [out_w, err_w])
        finally:
            os.close(out_w)
            os.close(err_w)
        deadline = time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        replies: dict = {}
        selector = selectors.DefaultSelector()
        for fd in (out_r, err_r, conn.fileno()):
            selector.register(fd, selectors.EVENT_READ)
        try:
            open_fds = 3
            while open_fds:
                left = deadline - time.monotonic()
                events = selector.select(timeout=max(left, 0)) if left > 0 else []
                if not events:
                    if "pid" in replies:
                        try:
                            os.kill(replies["pid"], signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    raise subprocess.TimeoutExpired(["envdoctor", *args], timeout)
                for key, _ in events:
                    if key.fd == conn.fileno():
                        message = conn.recv(MAX_REQUEST)
                        if message:
                            replies.update(json.loads(message))
                            continue
                    else:
                        data = os.read(key.fd, 65536)
                        if data:
                            chunks[key.fd].append(data)
                            continue
                    selector.unregister(key.fd)
                    open_fds -= 1
        finally:
            selector.close()
            conn.close()
            os.close(out_r)
            os.close(err_r)
        if "error" in replies:
            raise RuntimeError(f"the CLI server refused the launch: {replies['error']}")
        encoding = locale.getpreferredencoding(False)

        def text(fd: int) -> str:
            return b"".join(chunks[fd]).decode(encoding).replace("\r\n", "\n").replace("\r", "\n")

        return replies.get("status", -signal.SIGKILL), text(out_r), text(err_r)


if __name__ == "__main__":
    serve(sys.argv[1])
