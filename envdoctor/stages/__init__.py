"""The hand-off to the job: the facts document a stage needs and running a stage's command
(``handoff``); ``programs`` sends the stage supervisor and the detacher to the host.

May import: everything below it (operations, engine, the domain packages). Never report or cli.
"""
