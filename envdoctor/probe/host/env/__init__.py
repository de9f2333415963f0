"""The host and its Python environments: the machine (python3, pip, uv, GPUs, disk) and the shims it follows, environment discovery read from files, the venvs, the wheel tags the interpreter accepts, and the system facts diff and snapshot read.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
