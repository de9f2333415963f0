"""Audit of installed files: the probe's RECORD verification turned into file states, with
envdoctor's own recorded patches told apart from foreign changes (``records``).

May import: the foundation modules, transport (the interface), probe, inventory, engine and
patching (the ledger).
"""
