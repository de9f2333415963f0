"""Patches envdoctor ships: each module defines ``Patch`` objects (see envdoctor.patching.engine).

A user adds their own with ``--patches FILE``: a Python file that assigns ``Patch(...)``
objects at module level, exactly like the modules here. A patch declares what its
transform changes (``declares=(AddKeyword(...), ReplaceStatement(...))``, importable from
envdoctor.patching.engine); the new text is proven to differ from the old only by that before
anything is written, so a patch that declares nothing may change nothing.
"""
