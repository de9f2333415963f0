"""Sections "sources" and "architecture": the installed files the trust_remote_code scan reads (byte-filtered), and the engines' registries read from their sources.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
