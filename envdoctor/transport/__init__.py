"""Ways of reaching a host: :mod:`.local` and :mod:`.ssh`, behind :mod:`.interface`; where a
host is, asked of OpenSSH (:mod:`.openssh`, ``ssh -G``) or read as OpenSSH reads its config
(:mod:`.ssh_config`, :mod:`.ssh_config_resolve`); host keys and algorithms as ssh judges them.

May import: only the foundation modules (errors, logsafe). Never the inventory, the engine
or anything above.
"""
