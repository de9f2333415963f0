"""The programs that run a stage: the supervisor, the detacher and their environment.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
