"""Check definitions: pure functions over a host's gathered facts.

Every module here is loaded; a function marked with :func:`envdoctor.engine.graph.check` is a
check. A user can add a file of their own with ``--checks FILE``.
"""
