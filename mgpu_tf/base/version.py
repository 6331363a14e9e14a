"""The toolkit's release, which the root package and `mgpu-tf --version` show."""

__all__ = ["__version__"]

__version__ = "0.1.0"
