"""API drift: do the installed libraries' calls still fit the libraries they call?

The host reduces source to facts (``envdoctor/probe/host/drift.py``, stdlib ``ast`` only); here
they are judged (:mod:`envdoctor.drift.judge`) and reported (``envdoctor drift``,
``code.api-drift``).
"""
