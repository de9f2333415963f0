"""API drift: do the installed libraries' calls still fit the libraries they call?

The host reduces source to facts (``envdoctor/probe/host/drift/section.py``, stdlib ``ast`` only); here
they are judged (``judge``, ``signature``, ``baseline``) from the section's arguments
(``request``). The command runs in :mod:`envdoctor.operations.drift`; ``code.api-drift`` is
the check. The same section walks the imports a stage's entry reaches; ``imports`` judges
what is missing for ``code.imports``.

May import: the foundation modules, inventory (what a stage command runs), probe (its host
helpers the controller shares), engine, scan and modelfacts (import names of distributions).
"""
