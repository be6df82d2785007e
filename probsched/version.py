"""The package version (read by the package face, the command line and saved models)."""

__version__ = "0.1.0"
