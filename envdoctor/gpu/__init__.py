"""GPU stack readiness: driver floors, kernels for each GPU and extension ABI, from files.

``stack`` turns the probe's ``gpu-stack`` section into values, ``verdicts`` judges them
against ``tables`` (data, each row naming its source), ``document`` is the ``gpu`` object
of ``facts``, ``demangle`` makes C++ symbols readable.

May import: the foundation modules and engine.
"""
