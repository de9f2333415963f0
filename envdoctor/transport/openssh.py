"""Where a destination really is, asked of OpenSSH itself: ``ssh -G``.

``ssh -G [-F FILE] [-l USER] [-p PORT] -- DEST`` prints the settings ssh would connect with,
after Include, Match (``Match exec`` runs, as it does for ``ssh``), tokens and
first-match-wins. When no ``ssh`` is installed, the built-in parser
(:mod:`ssh_config_resolve`) stands in. Each destination is resolved once per run, jump
hosts included, with a bounded number of ``ssh -G`` processes at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from envdoctor.errors import ConfigError
from envdoctor.logsafe import get_logger
from envdoctor.transport import ssh_g_cache, ssh_g_lists, ssh_g_run
from envdoctor.transport.ssh_config import parse_jump
from envdoctor.transport.ssh_config_resolve import BUILTIN, resolve_builtin
from envdoctor.transport.ssh_tokens import TokenContext, expand_identity_files
from envdoctor.transport.target import ConnectionPlan, ResolvedHost, SSHOptions, SSHTarget

log = get_logger(__name__)

SSH_G = "ssh -G"
#: ``ssh -G`` runs Match exec commands; one that hangs must not hang the run.
SSH_G_TIMEOUT = 30.0
MAX_SSH_G_PROCESSES = 16
MAX_JUMP_DEPTH = 8
MAX_SSH_G_OUTPUT = 1024 * 1024


def parse_ssh_g(text: str, destination: str,
                written: Callable[[], ssh_g_lists.WrittenLists | None] = lambda: None) -> ResolvedHost:
    """The values of ``ssh -G`` output that envdoctor connects with; ``written`` gives the
    config's known hosts lines, which tell where the file names of a printed list end."""
    single: dict[str, str] = {}
    identity: list[str] = []
    certificates: list[str] = []
    for line in text.split("\n"):  # one setting a line; a value may hold any other line break
        key, _, value = line.partition(" ")
        if key == "identityfile":
            identity.append(value)
        elif key == "certificatefile":
            certificates.append(value)
        else:
            single.setdefault(key, value)
    try:
        hostname, port, user = single["hostname"], int(single["port"]), single["user"]
    except (KeyError, ValueError):
        raise ConfigError(f"ssh -G {destination} printed no hostname, port or user") from None
    jump = single.get("proxyjump")
    alias = single.get("hostkeyalias")
    context = TokenContext(hostname, port, user, destination, alias)
    timeout = single.get("connecttimeout", "none")
    return ResolvedHost(
        host=destination, hostname=hostname, port=port, user=user,
        identity_files=expand_identity_files(((f, "IdentityFile") for f in identity), context),
        certificate_files=expand_identity_files(((f, "CertificateFile") for f in certificates), context),
        identities_only=single.get("identitiesonly") == "yes",
        proxy_jump=tuple(jump.split(",")) if jump and jump != "none" else None,
        proxy_command=single.get("proxycommand") if single.get("proxycommand") not in (None, "none") else None,
        user_known_hosts_files=_file_list(single, ssh_g_lists.USER, written, context),
        global_known_hosts_files=_file_list(single, ssh_g_lists.GLOBAL, written, context),
        strict_host_key_checking=single.get("stricthostkeychecking", "ask"),
        host_key_alias=alias,
        check_host_ip=single.get("checkhostip") == "yes",
        identity_agent=single.get("identityagent"),
        hash_known_hosts=single.get("hashknownhosts") == "yes",
        revoked_host_keys=single.get("revokedhostkeys") or None,
        required_rsa_size=int(single.get("requiredrsasize") or 1024),
        bind_address=single.get("bindaddress") or None,
        bind_interface=single.get("bindinterface") or None,
        connect_timeout=None if timeout == "none" else float(timeout),
        connection_attempts=int(single.get("connectionattempts") or 1),
        ciphers=_algorithm_list(single, "ciphers"),
        kex_algorithms=_algorithm_list(single, "kexalgorithms"),
        macs=_algorithm_list(single, "macs"),
        host_key_algorithms=_algorithm_list(single, "hostkeyalgorithms"),
        pubkey_algorithms=_algorithm_list(single, "pubkeyacceptedalgorithms"),
        ca_signature_algorithms=_algorithm_list(single, "casignaturealgorithms"),
        resolver=SSH_G,
    )


def _file_list(single: Mapping[str, str], key: str, written: Callable[[], ssh_g_lists.WrittenLists | None],
               context: TokenContext) -> tuple[str, ...]:
    printed = single.get(key, "")
    if " " not in printed:  # (one file or none: nothing to tell apart, no config to read)
        return (printed,) if printed else ()
    return ssh_g_lists.split_list(printed, key, written(), context)


def _algorithm_list(single: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    """One of ssh -G's algorithm lists; None when it prints none (ssh keeps no list then)."""
    return tuple(a for a in single[key].split(",") if a) if key in single else None


def ssh_error_line(stderr: bytes) -> str:
    """ssh's own complaint, one line: the first that is not its notice about terminals."""
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines()]
    useful = [ln for ln in lines if ln and not ln.startswith("Pseudo-terminal")]
    return useful[0] if useful else "no reason given"


def config_file_for(options: SSHOptions) -> str | None:
    """The ``-F`` file: ``--ssh-config``; else None, and ssh reads its usual files as plain
    ``ssh`` does: the user config from the password database's home (not ``$HOME``, which
    only an Include's ``~`` follows), then ``/etc/ssh/ssh_config`` and what it includes."""
    return options.config_files[0] if options.config_files else None


class HostResolver:
    """Resolves destinations for one run: each once, concurrently, jump hosts included."""

    def __init__(self, config_file: str | None, *, ssh: str | None = "") -> None:
        self.config_file = config_file
        self.ssh = shutil.which("ssh") if ssh == "" else ssh
        self.resolver = f"{SSH_G} ({self.ssh})" if self.ssh else BUILTIN
        self._done: dict[tuple[str, str | None, int | None], ResolvedHost] = {}
        self._pending: dict[tuple[str, str | None, int | None], asyncio.Future[ResolvedHost]] = {}
        self._limit: asyncio.Semaphore | None = None
        self._cache_state: ssh_g_cache.ConfigState | None = None
        self._announced = False
        self._timed_out: set[tuple[str, str | None, int | None]] = set()
        self._written: ssh_g_lists.WrittenLists | None = None

    def written_lists(self) -> ssh_g_lists.WrittenLists:
        """The config's known hosts lines as written, read once per run (when a list needs them)."""
        if self._written is None:
            self._written = ssh_g_lists.written_lists(self.config_file)
        return self._written

    async def resolve(self, destination: str, user: str | None = None, port: int | None = None) -> ResolvedHost:
        if destination.startswith("-"):
            raise ConfigError(f"{destination!r} is not a host name (it starts with '-')")
        key = (destination, user, port)
        if key in self._done:
            return self._done[key]
        pending = self._pending.get(key)
        if pending is not None and pending.get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(pending)
        future: asyncio.Future[ResolvedHost] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            resolved = await self._resolve_now(destination, user, port)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it from their own await
            raise
        finally:
            self._pending.pop(key, None)
        future.set_result(resolved)
        self._done[key] = resolved
        return resolved

    async def _resolve_now(self, destination: str, user: str | None, port: int | None) -> ResolvedHost:
        if not self._announced:
            self._announced = True
            log.info("ssh_resolver", resolver=self.resolver, config=self.config_file or "ssh's default files")
        if self.ssh is None:
            resolved = resolve_builtin(destination, config_file=self.config_file, user=user, port=port)
        else:
            resolved = await self._ssh_g(destination, user, port)
        log.debug("ssh_resolved", host=destination, resolver=resolved.resolver, hostname=resolved.hostname,
                  port=resolved.port, user=resolved.user)
        return resolved

    def _argv(self, destination: str, user: str | None, port: int | None) -> list[str]:
        assert self.ssh is not None
        argv = [self.ssh, "-G"]
        if self.config_file:
            argv += ["-F", self.config_file]
        if user:
            argv += ["-l", user]
        if port:
            argv += ["-p", str(port)]
        return [*argv, "--", destination]

    def _cached(self, destination: str, user: str | None, port: int | None) -> ResolvedHost | None:
        if self._cache_state is None:
            assert self.ssh is not None
            self._cache_state = ssh_g_cache.config_state(self.ssh, self.config_file)
            if self._cache_state.digest is None:
                log.info("ssh_g_not_cached", reason=self._cache_state.reason)
        cached = ssh_g_cache.load(self._cache_state, destination, user, port)
        return None if cached is None else parse_ssh_g(cached, destination, self.written_lists)

    def _answered(self, destination: str, user: str | None, port: int | None, returncode: int | None,
                  out: bytes, err: bytes) -> ResolvedHost:
        """What one ``ssh -G`` run says of a destination (an error is a ConfigError)."""
        if returncode != 0 and b"option -- G" in err:
            # An ssh that has no -G (Dropbear's, OpenSSH before 6.8): the built-in parser stands in.
            log.info("ssh_resolver", resolver=BUILTIN, reason=f"{self.ssh} has no -G option")
            self.ssh, self.resolver = None, BUILTIN
            return resolve_builtin(destination, config_file=self.config_file, user=user, port=port)
        if returncode != 0:
            raise ConfigError(f"SSH config for {destination}: {ssh_error_line(err)}",
                              hint="`ssh -G` refuses it too; fix the SSH config")
        if b"fill_default_options: " in err:
            # A list that assembles to nothing (PubkeyAcceptedAlgorithms RSA): ssh -G only
            # complains and exits 0 (OpenSSH 9.2), but ssh itself dies on it; so does this run.
            line = next(ln for ln in err.decode("utf-8", "replace").splitlines() if "fill_default_options: " in ln)
            raise ConfigError(f"SSH config for {destination}: {line.strip()} (ssh stops on it)",
                              hint="name key types without '!' or a short name (ssh -Q PubkeyAcceptedAlgorithms "
                                   "lists them)")
        answer = out[:MAX_SSH_G_OUTPUT].decode("utf-8", "surrogateescape")
        resolved = parse_ssh_g(answer, destination, self.written_lists)
        assert self._cache_state is not None
        ssh_g_cache.store(self._cache_state, destination, user, port, answer)
        return resolved

    async def _ssh_g(self, destination: str, user: str | None, port: int | None) -> ResolvedHost:
        cached = self._cached(destination, user, port)
        if cached is not None:
            return cached
        if (destination, user, port) in self._timed_out:
            raise _timeout_error(destination)
        argv = self._argv(destination, user, port)
        if self._limit is None:
            self._limit = asyncio.Semaphore(MAX_SSH_G_PROCESSES)
        async with self._limit:
            try:
                proc = ssh_g_run.start(argv)
            except OSError as exc:
                raise ConfigError(f"cannot run {self.ssh} -G: {exc.strerror or exc}") from None
            try:
                # Collected in a thread, not by asyncio's subprocess: its wait() waits for the
                # pipes, which a Match exec command's children may hold long after ssh is gone.
                answer = await asyncio.get_running_loop().run_in_executor(
                    _ssh_g_threads(), ssh_g_run.collect, proc, time.monotonic() + SSH_G_TIMEOUT, MAX_SSH_G_OUTPUT)
            except ssh_g_run.SSHGTimeout:
                self._timed_out.add((destination, user, port))
                raise _timeout_error(destination) from None
            except BaseException:
                ssh_g_run.kill_group(proc)  # cancelled (Ctrl-C, a deadline): its thread then ends at once
                raise
        return self._answered(destination, user, port, answer.returncode, answer.out, answer.err)

    def prefetch(self, keys: Sequence[tuple[str, str | None, int | None]]) -> None:
        """Resolve many destinations at once, before any event loop: the cache first, then
        ``ssh -G`` for the rest, :data:`MAX_SSH_G_PROCESSES` at a time. Plain processes cost
        a third of the CPU of asyncio's (no pipe transports, no watcher thread per child),
        which the first run after a config change pays on every host. A destination that
        fails here is left to :meth:`resolve`, which says why in its own words."""
        import subprocess
        from collections import deque

        running: deque[tuple[tuple[str, str | None, int | None], subprocess.Popen[bytes], float]] = deque()

        def finish() -> None:
            key, proc, deadline = running.popleft()
            try:
                answer = ssh_g_run.collect(proc, deadline, MAX_SSH_G_OUTPUT)
                if self.ssh is not None:  # (an ssh without -G is found once; the rest go built-in)
                    self._done[key] = self._answered(*key, answer.returncode, answer.out, answer.err)
            except ssh_g_run.SSHGTimeout:
                self._timed_out.add(key)  # (not run again by resolve: it says so at once)
            except ConfigError:
                pass

        try:
            for key in dict.fromkeys(keys):
                if self.ssh is None or key in self._done or key[0].startswith("-"):
                    continue
                cached = self._cached(*key)
                if cached is not None:
                    self._done[key] = cached
                    continue
                if len(running) >= MAX_SSH_G_PROCESSES:
                    finish()
                try:
                    running.append((key, ssh_g_run.start(self._argv(*key)), time.monotonic() + SSH_G_TIMEOUT))
                except OSError:
                    break  # (resolve says why)
            while running:
                finish()
        finally:
            for _, proc, _ in running:
                ssh_g_run.stop(proc)

    async def plan(self, destination: str, user: str | None = None, port: int | None = None) -> ConnectionPlan:
        target = await self.resolve(destination, user, port)
        return ConnectionPlan(target, await self.jump_chain(target.proxy_jump, depth=0))

    async def jump_chain(self, hops: tuple[str, ...] | None, *, depth: int) -> tuple[ResolvedHost, ...]:
        """The hosts before a destination, first first, as ssh builds them: the last hop is
        reached through ``-J`` the others (so only the first hop's own ProxyJump counts)."""
        if not hops:
            return ()
        if depth >= MAX_JUMP_DEPTH:
            raise ConfigError(f"ProxyJump chain is deeper than {MAX_JUMP_DEPTH} hops (a loop?)")
        specs = [parse_jump(hop) for hop in hops]
        resolved = list(await asyncio.gather(*(self.resolve(s.host, s.user, s.port) for s in specs)))
        before = await self.jump_chain(resolved[0].proxy_jump, depth=depth + 1)
        # ssh -J overrides a later hop's own ProxyJump/ProxyCommand.
        later = [replace(r, proxy_jump=None, proxy_command=None) for r in resolved[1:]]
        return (*before, resolved[0], *later)


@functools.cache
def _ssh_g_threads() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that wait for ssh -G processes, as many as may run at once (not the default
    executor's few: one hanging Match exec must not hold back the others)."""
    return concurrent.futures.ThreadPoolExecutor(MAX_SSH_G_PROCESSES, thread_name_prefix="ssh-G")


def _timeout_error(destination: str) -> ConfigError:
    return ConfigError(f"ssh -G {destination} did not finish within {SSH_G_TIMEOUT:g}s",
                       hint="a 'Match exec' command in the SSH config may hang")


def default_resolver(options: SSHOptions, *, fresh: bool = False) -> HostResolver:
    """One resolver per set of options in this process: a run's hosts share its cache.
    ``fresh`` starts a new one (a new command: the config files may have changed)."""
    key = (config_file_for(options), os.environ.get("PATH", ""))
    found = None if fresh else _RESOLVERS.get(key)
    if found is None:
        found = _RESOLVERS[key] = HostResolver(key[0])
    return found


#: A memo of resolvers (and so of resolved destinations) for this process, keyed by config file.
_RESOLVERS: dict[tuple[str | None, str], HostResolver] = {}


def resolve_all(targets: Sequence[SSHTarget], options: SSHOptions) -> None:
    """Resolve every destination of a run (and its jump hosts) up front, concurrently, so that
    an SSH config ssh refuses is the command's error (exit 2) and each host connects from the
    cache. A failure names the destination."""
    if not targets:
        return
    resolver = default_resolver(options, fresh=True)
    if resolver.ssh is not None:
        resolver.prefetch([(t.host, t.user, t.port) for t in targets])

    async def one(target: SSHTarget) -> None:
        try:
            await resolver.plan(target.host, target.user, target.port)
        except ConfigError as exc:
            raise ConfigError(f"{target}: {exc}" if str(target) not in str(exc) else str(exc), hint=exc.hint) from None

    async def every() -> None:
        await asyncio.gather(*(one(t) for t in dict.fromkeys(targets)))

    asyncio.run(every())
    ssh_g_cache.prune()
