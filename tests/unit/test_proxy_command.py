"""ProxyCommand as ssh runs it: ``$SHELL -c 'exec COMMAND'`` with ssh's tokens expanded
(the e2e parity test runs real ssh beside envdoctor through a relay; these are the edges)."""

from __future__ import annotations

import pytest

from envdoctor.errors import ConfigError
from envdoctor.transport.ssh import proxy_command_argv
from envdoctor.transport.target import ResolvedHost


def host(command: str, alias: str | None = None) -> ResolvedHost:
    return ResolvedHost(host="gpu1", hostname="10.0.0.7", port=2222, user="ml", proxy_command=command,
                        host_key_alias=alias)


def test_tokens_and_the_users_shell():
    argv = proxy_command_argv(host("nc %h %p # %r %n %k 50%%"), {"SHELL": "/usr/bin/fish"})
    assert argv == ["/usr/bin/fish", "-c", "exec nc 10.0.0.7 2222 # ml gpu1 gpu1 50%"]


def test_percent_k_is_the_host_key_alias_when_set():
    assert proxy_command_argv(host("x %k", alias="bastion-key"), {})[2] == "exec x bastion-key"


@pytest.mark.parametrize("environ", [{}, {"SHELL": ""}])
def test_no_shell_is_bin_sh(environ):
    assert proxy_command_argv(host("nc %h %p"), environ)[0] == "/bin/sh"


@pytest.mark.parametrize(("command", "named"), [("nc %h %z", "%z"), ("nc %h %", "lone '%'"), ("nc %C", "%C")])
def test_a_token_ssh_does_not_know_is_refused(command, named):
    with pytest.raises(ConfigError, match=named):
        proxy_command_argv(host(command), {})


def test_stdio_proxy_is_refused():
    with pytest.raises(ConfigError, match="standard input and output"):
        proxy_command_argv(host("-"), {})
