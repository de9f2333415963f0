"""The stdlib-only program sent to a host, and the controller code that runs it."""
