"""Section "gpu-stack": the driver, the kernels each extension carries (ELF), the GPUs.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
