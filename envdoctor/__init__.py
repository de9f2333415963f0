"""envdoctor: diagnose and repair the software environments of remote GPU hosts."""

__version__ = "0.1.0"
