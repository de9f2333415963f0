"""Fleet runs over a bad network: timeouts, deadlines, retries, MaxStartups, --parallel, cuts."""

from __future__ import annotations

import time

import pytest

from tests.e2e.faults_support import hosts_by_name, proxies, results_by_id
from tests.faultproxy import Faults
from tests.sshd import start_sshd

pytestmark = pytest.mark.e2e


def test_blackholed_host_ends_as_error_after_connect_timeout_while_others_finish(run_cli, sshd, tmp_path):
    """A host that accepts and never answers is an error after --connect-timeout; the healthy one passes."""
    faults = {"healthy": Faults(latency_up=0.01, latency_down=0.01), "void": Faults(blackhole=True)}
    with proxies(sshd, faults, tmp_path) as (started, config):
        begin = time.monotonic()
        res = run_cli("check", "healthy", "void", "--ssh-config", str(config), "--format", "json",
                      "--connect-timeout", "3", "--only", "host.reachable")
        elapsed = time.monotonic() - begin
    assert res.exit_status == 1, res.stderr
    hosts = hosts_by_name(res.stdout)
    assert results_by_id(hosts["healthy"])["host.reachable"]["status"] == "pass"
    void = results_by_id(hosts["void"])["host.reachable"]
    assert void["status"] == "error"
    assert void["details"]["kind"] == "unreachable"
    assert "did not answer the SSH handshake within 3s" in void["message"]
    # A timeout is never retried: one connection, and the run ends soon after the timeout.
    assert started["void"].stats.connections == 1
    assert elapsed < 3 + 15, elapsed
    assert "Traceback" not in res.stderr


def test_host_that_hangs_after_login_ends_at_the_overall_deadline(run_cli, sshd, tmp_path):
    """A host that stops answering mid-run ends as a timeout at --timeout; the other host is unaffected."""
    faults = {"healthy": Faults(), "stuck": Faults(cut_after=30_000, stall=True)}
    with proxies(sshd, faults, tmp_path) as (_, config):
        begin = time.monotonic()
        res = run_cli("check", "healthy", "stuck", "--ssh-config", str(config), "--format", "json",
                      "--connect-timeout", "60", "--timeout", "6")
        elapsed = time.monotonic() - begin
    assert res.exit_status == 1, res.stderr
    hosts = hosts_by_name(res.stdout)
    assert results_by_id(hosts["healthy"])["host.reachable"]["status"] == "pass"
    stuck = results_by_id(hosts["stuck"])["host.reachable"]
    assert stuck["status"] == "error"
    assert "did not finish within 6s" in stuck["message"]
    assert elapsed < 6 + 20, elapsed


def test_refused_connections_are_retried_with_backoff(run_cli, sshd, tmp_path):
    """Two connections closed before the SSH banner are retried; the third attempt logs in."""
    with proxies(sshd, {"flaky": Faults(refuse_connections=2)}, tmp_path) as (started, config):
        res = run_cli("-v", "check", "flaky", "--ssh-config", str(config), "--format", "json",
                      "--only", "host.reachable")
    assert res.exit_status == 0, res.stdout + res.stderr
    assert started["flaky"].stats.connections == 3
    assert started["flaky"].stats.refused == 2
    assert res.stderr.count("connect_retry") == 2


def test_connection_cut_mid_probe_is_an_error_for_that_host_only(run_cli, sshd, tmp_path):
    """A connection dropped after login is an error of that host, one clear line, not a retry of the probe."""
    faults = {"healthy": Faults(), "cut": Faults(cut_after=30_000)}
    with proxies(sshd, faults, tmp_path) as (started, config):
        res = run_cli("check", "healthy", "cut", "--ssh-config", str(config), "--format", "json")
    assert res.exit_status == 1, res.stderr
    hosts = hosts_by_name(res.stdout)
    assert hosts["healthy"]["ok"] is True
    cut = results_by_id(hosts["cut"])["host.reachable"]
    assert cut["status"] == "error"
    assert cut["details"]["kind"] in ("unreachable", "probe")
    # The probe is not retried on a new connection: only connecting is.
    assert started["cut"].stats.connections == 1
    assert "Traceback" not in res.stderr


def test_max_startups_refusals_are_survived(run_cli, tmp_path_factory):
    """An sshd that drops connections past MaxStartups=1 still serves every host, thanks to retries."""
    aliases = [f"busy{i}" for i in range(4)]
    server = start_sshd(tmp_path_factory.mktemp("busy-sshd"), aliases, max_startups="1")
    try:
        res = run_cli("check", *aliases, "--ssh-config", str(server.ssh_config), "--format", "json",
                      "--only", "host.reachable", "--parallel", "4")
        log = server.log_text()
    finally:
        server.stop()
    assert res.exit_status == 0, res.stdout + res.stderr
    assert all(h["ok"] for h in hosts_by_name(res.stdout).values())
    assert "past MaxStartups" in log, "sshd refused nothing: the test proves nothing"


@pytest.mark.parametrize(("parallel", "bounded"), [(2, True), (6, False)])
def test_parallel_bounds_concurrent_connections(run_cli, sshd, tmp_path, parallel, bounded):
    """--parallel N keeps at most N connections open at once (and more when N allows it)."""
    aliases = {f"node{i}": None for i in range(6)}
    with proxies(sshd, {"gate": Faults(latency_up=0.05, latency_down=0.05)}, tmp_path) as (started, _):
        from tests.e2e.faults_support import write_proxied_config

        config = write_proxied_config(sshd, {a: started["gate"].port for a in aliases}, tmp_path / "all")
        res = run_cli("check", *aliases, "--ssh-config", str(config), "--format", "json",
                      "--only", "host.reachable", "--parallel", str(parallel))
        stats = started["gate"].stats
    assert res.exit_status == 0, res.stdout + res.stderr
    assert stats.connections == 6
    if bounded:
        assert stats.max_active <= parallel
    else:
        assert stats.max_active > 2


def test_login_shell_that_prints_a_banner_does_not_break_the_probe(run_cli, sshd, venv_factory, tmp_path_factory,
                                                                   tmp_path):
    """sshd runs each command through the user's login shell, whose rc files may print a banner
    before the command's own output (here BASH_ENV, which bash reads as it reads .bashrc for
    `ssh host cmd`). ssh passes the banner on; envdoctor reads what follows its begin mark, so
    check, audit and a streamed stage see only the commands' output."""
    import getpass
    import pwd
    import subprocess

    if not pwd.getpwnam(getpass.getuser()).pw_shell.endswith("bash"):
        pytest.skip("the banner comes from BASH_ENV, which only bash reads")
    rc = tmp_path / "noisy_rc"
    # Unset first: bash scripts the command starts (pyenv's shims) must not print it again.
    rc.write_text('unset BASH_ENV\necho "Welcome to the GPU cluster"\nprintf "no newline at the end"\n')
    server = start_sshd(tmp_path_factory.mktemp("noisy-sshd"), ["noisy"], client_key=sshd.client_key,
                        extra_config=[f"SetEnv BASH_ENV={rc}"])
    venv = venv_factory("noisy venv")
    (tmp_path / "envdoctor.toml").write_text(
        f'[hosts.noisy]\nssh = "noisy"\nvenv = "{venv}"\n'
        '[stages.hello]\nhost = "noisy"\nrequires = ["python.venv"]\ncommand = "{python} -c \\"print(42)\\""\n')
    config = ["--ssh-config", str(server.ssh_config), "--config", str(tmp_path / "envdoctor.toml")]
    try:
        oracle = subprocess.run(["ssh", "-F", str(server.ssh_config), "noisy", "echo", "hello"], capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, timeout=60)
        assert oracle.stdout == "Welcome to the GPU cluster\nno newline at the endhello\n", oracle
        checked = run_cli("check", "noisy", *config, "--only", "python.venv", "--only", "packages.consistent",
                          "--format", "json")
        audited = run_cli("audit", "noisy", *config, "--format", "json")
        staged = run_cli("run", "noisy", "hello", *config)
    finally:
        server.stop()
    results = results_by_id(hosts_by_name(checked.stdout)["noisy"])
    assert checked.exit_status == 0, checked.stdout + checked.stderr
    assert results["host.python"]["status"] == "pass" and results["packages.consistent"]["status"] == "pass", results
    assert audited.exit_status == 0, audited.stdout + audited.stderr
    assert staged.exit_status == 0, staged.stdout + staged.stderr
    assert staged.stdout.splitlines()[-1] == "42" and "Welcome" not in staged.stdout, staged.stdout
