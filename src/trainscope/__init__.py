"""trainscope: a workbench for making PyTorch training fast and lean, and for showing why.

Importing the package must stay cheap: nothing here imports torch (``trainscope --help``
and the report commands run without it).
"""

from typing import Any

from trainscope.version import __version__


def run(*args: Any, **kwargs: Any) -> Any:
    """Train as ``trainscope run`` does; see :func:`trainscope.api.run`."""
    from trainscope.api import run as _run

    return _run(*args, **kwargs)


def report(*args: Any, **kwargs: Any) -> Any:
    """Build a run's or a study's report; see :func:`trainscope.api.report`."""
    from trainscope.api import report as _report

    return _report(*args, **kwargs)


def doctor(*args: Any, **kwargs: Any) -> Any:
    """What to fix in a run, from its record; see :func:`trainscope.api.doctor`."""
    from trainscope.api import doctor as _doctor

    return _doctor(*args, **kwargs)


def profile(*args: Any, **kwargs: Any) -> Any:
    """Measure the training code in a ``with`` block as ``trainscope profile`` measures a
    script; see :func:`trainscope.script.profile.profile`."""
    from trainscope.script.profile import profile as _profile

    return _profile(*args, **kwargs)


__all__ = ["__version__", "doctor", "profile", "report", "run"]
