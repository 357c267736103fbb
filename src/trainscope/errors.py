"""User-facing errors.

Anything raised as a :class:`TrainscopeError` is a problem with the user's input or
environment (bad flag, missing data, unwritable directory). The CLI prints its message as
one line and exits non-zero, without a traceback. Anything else is a bug and keeps its
traceback.
"""


class TrainscopeError(Exception):
    """A problem the user can fix; its message is one self-contained line."""


class ConfigError(TrainscopeError):
    """The configuration is invalid (unknown name, out-of-range value, bad YAML)."""


class DataError(TrainscopeError):
    """A data set is missing, corrupt or cannot be downloaded."""


class DeviceError(TrainscopeError):
    """The requested device or precision does not exist on this machine."""
