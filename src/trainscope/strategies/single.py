"""``single``: one process on one device (the baseline every other strategy is compared to)."""

from trainscope.strategies.base import Strategy


class Single(Strategy):
    """One process, one device: the interface's no-op defaults."""

    name = "single"
