"""Patches: what a patch is and its state on a host (``engine``), the proof that a new file
differs from the old only as declared (``proof``), layout-keeping libcst edits
(``cst_edits``), the ledger's format (``ledger``) and the controller side of the host's patch
writer (``host``).

May import: the foundation modules, transport (the interface), probe, inventory, engine and
scan.
"""
