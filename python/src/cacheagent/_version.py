"""The package version, read by the build backend (python/_build)."""

__version__ = "0.1.0"
