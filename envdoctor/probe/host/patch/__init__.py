"""The patch ledger and patched files (sections "patch-ledger", "patch_files"), and the programs that change a host's files: the patch writer and the atomic writer.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
