"""Comparisons with the real tools: the interpreter, uv pip check, transformers and the engines' registries."""
