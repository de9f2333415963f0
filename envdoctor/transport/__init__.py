"""Ways of reaching a host: :mod:`.local` and :mod:`.ssh`, behind :mod:`.interface`."""
