"""What runs on the host: the stdlib-only probe program, one module per section, and the
other programs envdoctor sends (the patch writer, the atomic writer, the stage supervisor and
detacher).

These modules are read as text and sent to the host; on the controller some are also imported
for their pure helpers. They import only the standard library and each other: the
``from envdoctor.probe.host.X import ...`` lines are dropped when a program is assembled,
since every module of a program shares one namespace there.

May import: the standard library only (this file too: the transport layer reads host
programs through :func:`program_text`).
"""

import functools
import os

_FOLDER = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=None)
def module_source(module: str) -> str:
    """The source of one host module (``core``, ``drift.resolve``: its name under this package),
    without its imports of other host modules."""
    # A plain read (importlib.resources would cost 6 ms of start-up for the same bytes).
    with open(os.path.join(_FOLDER, *module.split(".")) + ".py", encoding="utf-8") as source:
        return without_host_imports(source.read())


def without_host_imports(text: str) -> str:
    """Inside an assembled program every module's names are already defined, so the imports
    between host modules (one line, or a parenthesized list over several) go."""
    kept = []
    in_import = False
    for line in text.splitlines():
        if line.startswith("from envdoctor.probe.host"):
            in_import = "(" in line and ")" not in line
            continue
        if in_import:
            in_import = ")" not in line
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


@functools.lru_cache(maxsize=None)
def program_text(modules: tuple, entry: str) -> str:
    """A whole host program: these modules in order, then a call of ``entry`` (a function the
    last of them defines)."""
    return "".join(module_source(m) for m in modules) + "\n%s()\n" % entry
