"""The command line: ``trainscope`` and its sub-commands (``commands``) and the flags
that build a run's configuration (``flags``). Importing it imports no torch."""

from trainscope.cli.commands import build_parser, main, overrides_from_args

__all__ = ["build_parser", "main", "overrides_from_args"]
