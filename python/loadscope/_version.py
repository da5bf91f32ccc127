"""The version, in one place: the package, its metadata (pyproject reads it) and `loadscope --version`."""

__version__ = "0.1.0"
