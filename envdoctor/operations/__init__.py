"""The work a command does on its hosts, returned as values: gathering facts (``gather``),
check and fix (``fleet``), revert, drift, and this machine without an event loop
(``blocking``).

May import: everything below it (engine and the domain packages). Never stages, report or cli.
"""
