"""The command line: the only place that prints, exits, and configures logging.

``main`` holds the group; ``commands`` the registry of commands, one module each, imported
only when that command runs. Each command is a thin layer over an operation: it parses
options (``options``), picks the hosts (``selection``), calls the operation, renders its
values with ``envdoctor.report``, hands the text to ``output`` and exits with the contract's
status (``exits``).

May import: anything in envdoctor.
"""
