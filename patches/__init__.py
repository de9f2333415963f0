"""Patches envdoctor ships: each module defines ``Patch`` objects (see envdoctor.patching).

A user adds their own with ``--patches FILE``: a Python file that assigns ``Patch(...)``
objects at module level, exactly like the modules here.
"""
