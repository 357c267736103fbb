"""A training target such as ``val_loss<=1.88`` or ``test_accuracy>=0.98`` (torch-free).

The metric names a split (``val`` or ``test``) and one figure of that split's
evaluation (``loss``, ``accuracy``, ``perplexity``, ``mse``, ... whatever the workload's
metrics compute). The run that has one evaluates at a steady interval of steps and stops
at the first evaluation that meets it (trainscope.train.target).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from trainscope.errors import ConfigError
from trainscope.util.checks import show

SPLITS = ("val", "test")
_FORM = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*(\S+)\s*")
_OPS = {
    "<=": lambda x, t: x <= t,
    ">=": lambda x, t: x >= t,
    "<": lambda x, t: x < t,
    ">": lambda x, t: x > t,
}
MAX_TEXT = 200
"""A target is a short expression: longer text is refused before it is matched."""


@dataclass(frozen=True)
class Target:
    """``metric op threshold``: met by an evaluation whose figure satisfies the comparison."""

    metric: str
    """``<split>_<figure>``, e.g. ``val_loss``."""
    op: str
    threshold: float

    @property
    def split(self) -> str:
        """The split whose evaluation the target reads: ``val`` or ``test``."""
        return self.metric.split("_", 1)[0]

    @property
    def figure(self) -> str:
        """The figure of that split's evaluation: ``loss``, ``accuracy``, ..."""
        return self.metric.split("_", 1)[1]

    @property
    def text(self) -> str:
        """The target as the user writes it (``val_loss<=1.88``)."""
        return f"{self.metric}{self.op}{self.threshold:g}"

    def met(self, value: float | None) -> bool:
        """Whether an evaluation's figure meets the target (never a missing or NaN one)."""
        if value is None or not math.isfinite(value):
            return False
        return bool(_OPS[self.op](value, self.threshold))

    def better(self, a: float | None, b: float | None) -> bool:
        """Whether figure ``a`` is closer to the target's side than ``b`` (the best so far)."""
        if a is None or not math.isfinite(a):
            return False
        if b is None or not math.isfinite(b):
            return True
        return a < b if self.op.startswith("<") else a > b


def parse_target(text: object, flag: str = "--target") -> Target:
    """``"val_loss<=1.88"`` -> :class:`Target`; one clear ConfigError for anything else."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise ConfigError(f"{flag} expects METRIC<=X or METRIC>=X, got {show(text)}")
    m = _FORM.fullmatch(text)
    if m is None:
        raise ConfigError(
            f"{flag} expects METRIC<=X or METRIC>=X (e.g. val_loss<=1.88, "
            f"test_accuracy>=0.98), got {show(text)}"
        )
    metric, op, raw = m.groups()
    split, _, figure = metric.partition("_")
    if split not in SPLITS or not figure:
        raise ConfigError(
            f"{flag} {show(text)}: the metric names the split it is read from, "
            f"val_<figure> or test_<figure> (e.g. val_loss, test_accuracy)"
        )
    try:
        threshold = float(raw)
    except ValueError:
        raise ConfigError(f"{flag} {show(text)}: {show(raw)} is not a number") from None
    if not math.isfinite(threshold):
        raise ConfigError(f"{flag} {show(text)}: the threshold must be a finite number")
    return Target(metric, op, threshold)


__all__ = ["SPLITS", "Target", "parse_target"]
