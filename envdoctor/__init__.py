"""envdoctor: diagnose and repair the software environments of remote GPU hosts.

The repository keeps the check and patch definitions at its top (``checks/``, ``patches/``:
content a user reads and extends); an install maps them to ``envdoctor.checks`` and
``envdoctor.patches``. Run from a source checkout (tests, ``python -m envdoctor`` in the
repository, an editable install of another checkout elsewhere on sys.path), they are loaded
from this checkout, never from another one.
"""

import os as _os

__version__ = "0.1.0"


def _checkout_root() -> str | None:
    """The repository this package sits in, when it is a source checkout of envdoctor."""
    root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    for marker in ("pyproject.toml", _os.path.join("checks", "__init__.py"), _os.path.join("patches", "__init__.py")):
        if not _os.path.isfile(_os.path.join(root, marker)):
            return None
    return root


_root = _checkout_root()
if _root is not None:
    # envdoctor.checks and envdoctor.patches resolve here before any installed finder is asked.
    __path__.append(_root)  # noqa: F821  (__path__ is set by the import system for a package)
del _root
