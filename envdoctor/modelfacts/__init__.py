"""What a model folder says, read from its files: the architecture (nested configs
included), the tokenizer's ids (as AutoTokenizer would report them), the mask-token choice,
the imports of the model's own code, and the tokenizer part of the ``facts`` document.

May import: the foundation modules, probe (host helpers it shares) and engine. libcst is
imported only in ``code_imports``, and only when code is read.
"""
