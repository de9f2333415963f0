"""Installing into an environment, and choosing which one: pip's own install plan and what
it would break (``pip_plan``), an install run only after its plan is judged
(``pip_remedy``), index credentials through pip's environment (``index_credentials``),
``pip check``'s rules computed from the probe's metadata (``consistency``), and the
environments of a host ranked by what the job needs (``env_choice``).

May import: the foundation modules, transport (the interface), inventory, engine and
modelfacts.
"""
