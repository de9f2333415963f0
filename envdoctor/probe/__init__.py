"""The probe's controller side: build the program from ``envdoctor/probe/host/``, send it in
one command (``program``), check each section's answer before use (``schema``), and decode the
answers many hosts send alike once (``shared_answers``).

May import: the foundation modules and transport (the interface). The host side
(``probe/host/``) imports only the standard library.
"""
