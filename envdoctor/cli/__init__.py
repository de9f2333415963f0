"""The command line: the only place that prints, exits, and configures logging.

``main`` holds the group and the registry of commands; each command is a thin layer over an
operation: it parses options, calls the operation, renders its values with ``report`` and
exits with the contract's status.

May import: anything in envdoctor.
"""
