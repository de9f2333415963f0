"""Sections "audit" and "digests": installed files against their RECORDs (the RECORD reader, hashing and the owner-only caches, the snapshot), and the job's digests.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
