"""Section "node": GPUs free and healthy, collectives, /dev/shm, the JIT toolchain.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
