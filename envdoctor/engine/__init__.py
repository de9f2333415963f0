"""The check engine: what a check is, what it sees, and what it returns.

Owns the check graph (``graph``: checks declared as pure functions, ordered with graphlib;
blocked, skipped and waived propagation), results as values (``results``), the typed views
of a host's probe answer (``facts``), host paths compared as the host resolves them
(``host_paths``), and the one per-host executor every command runs its hosts through
(``executor``).

May import: the foundation modules (errors, logsafe, config_trust, untrusted, safe_text),
transport, probe (controller side) and inventory. Never a domain package, operations, stages,
report or cli.
"""
