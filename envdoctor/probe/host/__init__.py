"""What runs on the host: the stdlib-only probe program, one module per section, and the
other programs envdoctor sends (the patch writer, the stage supervisor and detacher).

These modules are read as text and sent to the host (envdoctor.probe.program concatenates
the probe's); on the controller some are also imported for their pure helpers. They import
only the standard library and each other (``from envdoctor.probe.host.X import ...`` lines are
dropped when the program is assembled).
"""
