"""Section "drift": installed libraries' uses of the APIs they import, reduced to facts (module summaries, the resolver, the uses, the baselines, the import walk).

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
