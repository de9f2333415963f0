"""The trust_remote_code scanner: model-loading calls found by what their names resolve to.

``loaders`` holds the vocabulary (loader names, states, sites); ``scanner`` walks files and
folders (stdlib only until a file passes the byte filter); ``sites`` is the libcst side,
imported only when a file is parsed; ``prune`` and ``exports`` keep libcst's work small;
``not_loads`` drops the calls with a loader's name that load nothing.

May import: the foundation modules and probe.host (the byte filter and source decoding the
probe shares).
"""
