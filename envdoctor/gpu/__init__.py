"""GPU readiness: the stack (driver floors, kernels for each GPU, extension ABI, from files)
and the node (GPUs free and healthy, collectives ready, JIT toolchain present).

``stack`` turns the probe's ``gpu-stack`` section into values, ``verdicts`` judges them
against ``tables`` (data, each row naming its source), ``document`` is the ``gpu`` object
of ``facts``, ``demangle`` makes C++ symbols readable. For the ``node`` section:
``smi_xml`` and ``smi_text`` parse nvidia-smi's and the kernel's formats, ``node`` holds the
values, ``job`` and ``visible`` say what a stage asks for and which GPUs it sees, the
``*_rules`` modules judge (gpu.free, gpu.health, host.collectives, python.jit-toolchain) and
``node_document`` is their part of ``facts``.

May import: the foundation modules and engine.
"""
