"""The package version (one place: the package, the cache keys and --version read it)."""
__version__ = "0.1.0"
