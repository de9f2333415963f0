"""Environment verdicts are shared by hosts whose differences no requirement marker reads, and only by them."""

from __future__ import annotations

from envdoctor.install.consistency import check_environment, marker_key
from envdoctor.engine.facts import Distribution, Environment

MARKERS = {"python_version": "3.11", "python_full_version": "3.11.7", "platform_release": "6.1.0",
           "platform_version": "#1 SMP", "sys_platform": "linux", "os_name": "posix",
           "platform_machine": "x86_64", "platform_system": "Linux", "implementation_name": "cpython",
           "implementation_version": "3.11.7", "platform_python_implementation": "CPython"}


def env(requires: tuple[str, ...], **markers: str) -> Environment:
    dists = (Distribution("a", "1.0", requires, "/s/a-1.0.dist-info", "/s"),
             Distribution("b", "1.0", (), "/s/b-1.0.dist-info", "/s"))
    return Environment("/v", "/v/bin/python", True, True, markers={**MARKERS, **markers}, distributions=dists)


def test_a_marker_nobody_reads_does_not_split_the_verdict():
    """Two hosts that differ only in platform_release share the key when no marker reads it."""
    requires = ("b>=2; python_version >= '3.8'",)
    one, other = env(requires, platform_release="6.1.0"), env(requires, platform_release="6.8.12-custom")
    assert marker_key(one) == marker_key(other) == (("python_version", "3.11"),)
    assert [u.pip_line() for u in check_environment(one).conflicts] == \
           [u.pip_line() for u in check_environment(other).conflicts]
    assert check_environment(other).conflicts  # b 1.0 does not meet b>=2 on either


def test_a_marker_that_is_read_decides_per_host():
    """When a requirement reads platform_release, hosts that differ in it get their own verdicts."""
    requires = ("b>=2; platform_release >= '6.5'",)
    old, new = env(requires, platform_release="6.1.0"), env(requires, platform_release="6.8.0")
    assert marker_key(old) != marker_key(new)
    assert not check_environment(old).conflicts
    assert [u.pip_line() for u in check_environment(new).conflicts] == ["a 1.0 has requirement b>=2; "
                                                                        'platform_release >= "6.5", but you have b 1.0.']


def test_legacy_marker_spellings_count_as_their_pep_508_names():
    """A requirement written with os.name or python_implementation reads os_name and platform_python_implementation."""
    requires = ("b>=2; os.name == 'posix' and python_implementation == 'CPython'",)
    assert dict(marker_key(env(requires))) == {"os_name": "posix", "platform_python_implementation": "CPython"}
