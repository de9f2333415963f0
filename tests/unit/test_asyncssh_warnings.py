"""The one warning asyncssh's import raises with newer cryptography is filtered, and only it."""

from __future__ import annotations

import re
import warnings

import pytest
from cryptography.hazmat.primitives.asymmetric import dsa
from cryptography.utils import CryptographyDeprecationWarning

from envdoctor.transport.asyncssh_loader import DSA_DEPRECATION_MESSAGE, filter_asyncssh_dsa_warning

#: cryptography's own text (51.0.1), as asyncssh's modules trigger it.
DSA_TEXT = ("DSA is deprecated and support will be removed in a future release. "
            "Use a more modern signature algorithm.")


def shown(message: str, category: type[Warning], module: str) -> list[str]:
    """The warnings a ``warn_explicit`` from ``module`` leaves after the filter is installed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_asyncssh_dsa_warning()
        warnings.warn_explicit(message, category, f"/site-packages/{module.replace('.', '/')}.py", 32,
                               module=module)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("module", ["asyncssh.crypto.misc", "asyncssh.crypto.dsa", "asyncssh"])
def test_cryptographys_dsa_deprecation_from_asyncssh_is_not_shown(module: str) -> None:
    """cryptography's DSA deprecation, raised where asyncssh's own modules read a DSA name, is ignored."""
    assert shown(DSA_TEXT, CryptographyDeprecationWarning, module) == []


@pytest.mark.parametrize(("message", "category", "module"), [
    (DSA_TEXT, CryptographyDeprecationWarning, "envdoctor.transport.sshkey_blob"),  # our own use of DSA
    (DSA_TEXT, CryptographyDeprecationWarning, "asyncsshx.crypto"),  # another package's name
    (DSA_TEXT, UserWarning, "asyncssh.crypto.dsa"),  # another category
    (DSA_TEXT, DeprecationWarning, "asyncssh.crypto.dsa"),
    ("TripleDES has been moved", CryptographyDeprecationWarning, "asyncssh.crypto.cipher"),  # another text
])
def test_every_other_warning_is_shown(message: str, category: type[Warning], module: str) -> None:
    """The filter names category, text and asyncssh's modules: any other warning still shows."""
    assert shown(message, category, module) == [message]


def test_the_text_is_cryptographys() -> None:
    """The filter's text matches what the installed cryptography raises when a DSA name is read
    (50.0.2 and before raise nothing)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dsa.DSAPublicKey  # noqa: B018  (reading the name is what warns)
    raised = [str(w.message) for w in caught if w.category is CryptographyDeprecationWarning]
    assert all(re.match(DSA_DEPRECATION_MESSAGE, text) for text in [*raised, DSA_TEXT]), raised


def test_a_warning_from_envdoctors_own_modules_fails_a_test() -> None:
    """pyproject's filterwarnings: raised from an envdoctor module, any warning is an error;
    asyncssh's DSA deprecation is ignored by name."""
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit("old API", DeprecationWarning, "/x/envdoctor/engine/graph.py", 1,
                               module="envdoctor.engine.graph")
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit(DSA_TEXT, CryptographyDeprecationWarning, "/x/asyncssh/crypto/dsa.py", 38,
                               module="asyncssh.crypto.dsa")
    assert caught == []
