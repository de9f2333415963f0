"""API drift: do the installed libraries' calls still fit the libraries they call?

The host reduces source to facts (``envdoctor/probe/host/drift.py``, stdlib ``ast`` only); here
they are judged (``judge``, ``signature``, ``baseline``) from the section's arguments
(``request``). The command runs in :mod:`envdoctor.operations.drift`; ``code.api-drift`` is
the check.

May import: the foundation modules, probe (its host helpers the controller shares), engine
and scan.
"""
