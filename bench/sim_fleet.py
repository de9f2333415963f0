"""A simulated fleet on loopback: one asyncssh server process answering as many hosts.

Every SSH connection is a "host". The server does the SSH work a real sshd does (key
exchange, host key, public-key authentication, one session per command) and answers every
command by reading its standard input to the end (the probe program arrives there) and
writing a recorded answer: the output of the real probe on this machine. So the controller
does all of its real work (resolution, connection, host-key check, parsing, checks, report)
while the hosts cost almost nothing, and a 2-core machine can stand in for 1,000 hosts.

    python bench/sim_fleet.py --port 22001 --host-key KEY --answer ANSWER_FILE [--answer-for SHA256=FILE ...]

``--answer-for`` answers a probe whose requested sections (the request line's ``sections``,
as :func:`sections_digest` hashes them) have that SHA-256 with FILE instead (``check``, ``diff`` and ``check`` of a ``same = true`` group
ask for different sections). It prints ``ready PORT`` once listening and serves until killed. It accepts any user and any
public key: it is a benchmark stand-in bound to 127.0.0.1, never a server to expose.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from pathlib import Path

import asyncssh


class AnyKeyServer(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True  # authentication is required, as on a real host

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return True  # the signature is still verified by asyncssh: the client does the real work


def sections_digest(sections: object) -> str:
    """What --answer-for keys an answer by: the sections asked for, with their arguments (the
    request line's other fields, its deadline among them, differ from run to run)."""
    return hashlib.sha256(json.dumps(sections, sort_keys=True).encode("utf-8")).hexdigest()


async def serve(port: int, host_key: Path, default: bytes, distinct: bool = False,
                answers: dict[str, bytes] | None = None) -> None:
    served = [0]
    by_request = answers or {}

    async def handle(process: asyncssh.SSHServerProcess) -> None:
        try:
            # The request line says how long the program is (no size: the controller knows the
            # host keeps it, and every simulated host does); stdin stays open after it while
            # the probe runs (envdoctor closes it when it leaves), as on a real host.
            request = json.loads(await process.stdin.readline())
            if request.get("size"):
                await process.stdin.readexactly(request["size"])
            served[0] += 1
            answer = by_request.get(sections_digest(request.get("sections")), default)
            # --distinct: every host's environments differ (its kernel release), as on a
            # fleet of mixed images: no two answers have the same venvs line.
            mark = b'"platform_release": "%d.%d-' % (port, served[0])
            # The begin mark a real login shell echoes before the command (transport/ssh.py).
            begin = (process.command or "").split(";", 1)[0]
            if begin.startswith("echo envdoctor-begin-"):
                process.stdout.write(begin[len("echo "):].encode("ascii") + b"\n")
            process.stdout.write(answer.replace(b'"platform_release": "', mark) if distinct else answer)
            await process.stdout.drain()
        except (asyncssh.Error, ConnectionError):
            pass
        process.exit(0)

    server = await asyncssh.create_server(
        AnyKeyServer, "127.0.0.1", port, server_host_keys=[str(host_key)],
        process_factory=handle, encoding=None, backlog=1024,
    )
    print(f"ready {port}", flush=True)
    async with server:
        await server.wait_closed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host-key", type=Path, required=True)
    parser.add_argument("--answer", type=Path, required=True)
    parser.add_argument("--distinct", action="store_true", help="a different answer for every connection")
    parser.add_argument("--answer-for", action="append", default=[], metavar="SHA256=FILE",
                        help="the answer to the probe whose request line has this SHA-256")
    args = parser.parse_args()
    answers = {digest: Path(file).read_bytes() for digest, _, file in (a.partition("=") for a in args.answer_for)}
    try:
        asyncio.run(serve(args.port, args.host_key, args.answer.read_bytes(), args.distinct, answers))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
