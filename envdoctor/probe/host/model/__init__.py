"""Sections "models" and "model-search": model folders read as data (tokenizer files, sentencepiece models, the kept answers) and init's bounded search for them.

Runs on the host: the standard library only, Python 3.6+ syntax (see ``probe/host/core.py``).
May import: the standard library and the other host modules.
"""
