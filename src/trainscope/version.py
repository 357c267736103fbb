"""The installed trainscope's version (a leaf every layer may read)."""

__version__ = "0.1.0"
