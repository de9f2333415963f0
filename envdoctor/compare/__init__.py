"""What hosts have, and where hosts that run one job differ.

``request`` builds the arguments of the probe's ``system`` and ``digests`` sections (which
distributions the job imports, which environment variables matter, the secret patterns of
``logsafe``); ``have`` turns a host's facts into comparable items (the interpreter, each
distribution's version and files, the patch ledger, torch/CUDA/NCCL/driver, the GPUs, the
model folders' files, the job's environment variables); ``majority`` compares hosts item by
item (the majority value, and the hosts that differ); ``snapshot`` is the bug-report document
of one host.

May import: the foundation modules, probe (controller side), inventory, engine, gpu, drift
(a stage's entry module) and patching (the ledger's format).
"""
