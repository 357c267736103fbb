"""The Python API: ``trainscope.run(...)`` and ``trainscope.report(...)`` for notebooks and
scripts, with the same configuration and the same rules as the command line.

    import trainscope
    result = trainscope.run(workload="mnist", data_dir="D", epochs=3, out="runs/mnist")
    result.summary["test_accuracy"], result.run_dir
    trainscope.report(result.run_dir)   # report.md, report.html, tables.tex, plots/

Keyword arguments are the ``trainscope run`` flags with underscores (``batch_size=64``
for ``--batch-size 64``); ``config`` is a YAML file, a nested dict (as in config.yaml)
or a :class:`~trainscope.config.RunConfig`; ``set`` takes any dotted config key
(``set={"train.lr": 0.1}``). As on the command line, only an ``out``/``overwrite`` given
here (not one inside ``config``) may replace an existing run directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainscope.cli.flags import run_flags
from trainscope.config import (
    RunConfig,
    deletion_only_from_command_line,
    from_dict,
    load_yaml,
    merge,
)
from trainscope.diagnosis import diagnose
from trainscope.errors import ConfigError
from trainscope.launch.cluster import adopt_scheduler
from trainscope.launch.launcher import run_or_launch
from trainscope.records.study_dir import is_study_dir
from trainscope.reports.run_report import build_run_report
from trainscope.reports.study_report import build_study_report
from trainscope.train.console import RunConsole


@dataclass
class RunResult:
    """What :func:`run` returns: the run's summary and where its record is."""

    summary: dict[str, Any]
    run_dir: Path

    @property
    def status(self) -> str | None:
        """``completed``, or ``failed`` (the summary's ``error`` says why)."""
        return self.summary.get("status")


def _flag_keys() -> dict[str, str]:
    """Keyword name (``batch_size``) -> dotted config key, from the CLI's own flags."""
    return {flag[2:].replace("-", "_"): dest for flag, (dest, _) in run_flags().items()}


def settings_to_overrides(settings: dict[str, Any], extra: dict[str, Any] | None = None) -> dict:
    """Keyword settings (and dotted ``extra`` keys) as the CLI's dotted overrides."""
    keys = _flag_keys()
    overrides: dict[str, Any] = {}
    for name, value in settings.items():
        if name not in keys:
            close = ", ".join(sorted(k for k in keys if name.split("_")[0] in k)[:5])
            hint = f" (did you mean {close}?)" if close else ""
            raise ConfigError(f"trainscope.run() got an unknown setting {name!r}{hint}")
        overrides[keys[name]] = value
    return {**overrides, **(extra or {})}


def run(
    config: str | os.PathLike[str] | dict[str, Any] | Any = None,
    *,
    set: dict[str, Any] | None = None,  # noqa: A002 (the CLI's --set)
    quiet: bool = False,
    progress: bool = False,
    executor: Any = None,
    **settings: Any,
) -> Any:
    """Train as ``trainscope run`` does and return the summary and the run directory.

    With ``executor`` (a submitit executor, e.g. ``submitit.AutoExecutor(folder)``; the
    ``cluster`` extra) the run is checked here and submitted: the return value is
    submitit's job, whose ``result()`` is this function's :class:`RunResult` (one per
    task: each SLURM task is a rank). Its run directory is fixed before it is submitted.

    ``quiet`` prints nothing; ``progress`` shows progress bars (off by default: a notebook
    cell keeps only the summary). With ``nproc`` > 1 the run is launched through torchrun
    as on the command line, and the summary is read from its directory (its ``status``
    says whether it completed). In one process a failing run raises, as the command
    exits non-zero, after recording ``failed`` and the error in its directory; a bad
    setting raises :class:`~trainscope.errors.ConfigError` before anything runs.
    """
    overrides = settings_to_overrides(settings, set)
    config_file: str | None = None
    if isinstance(config, RunConfig):
        base = config.to_dict()
    elif isinstance(config, dict):
        base = config
    elif config is not None:
        config_file = str(config)
        base = load_yaml(config_file)
    else:
        base = {}
    # out / overwrite only from the arguments of this call, never from the config given.
    base = {k: v for k, v in base.items() if k not in ("out", "overwrite", "resume")}
    cfg = from_dict(merge(base, overrides))
    deletion_only_from_command_line(cfg, overrides, config_file)
    cfg.runtime.progress = progress
    from trainscope.train.run import default_out

    if executor is not None:  # checked here, trained where the executor runs it
        out = cfg.out or str(default_out(cfg))
        return executor.submit(run, config, set=set, quiet=quiet, progress=progress,
                               **{**settings, "out": out})  # fmt: skip
    cfg = adopt_scheduler(cfg)  # under srun or in a PyTorchJob pod: the scheduler's rank
    if cfg.out is None:  # every rank and this process must agree on the directory
        cfg.out = str(default_out(cfg))
    outcome = run_or_launch(
        cfg,
        RunConsole(enabled=not quiet, progress=progress),
        extra_args=["--quiet"] * quiet + ["--no-progress"] * (not progress),
    )
    summary = outcome.summary or {
        "status": "failed",
        "error": outcome.error or f"the launched run exited {outcome.code}",
    }
    return RunResult(summary, Path(cfg.out))


def report(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Any:
    """Build the report of a run or a study directory (as ``trainscope report``); returns
    the report object (``markdown_path``, ``html_path``, ``files``, ``tables``)."""
    if is_study_dir(path):
        return build_study_report(path, out)
    return build_run_report(path, out)


def doctor(path: str | os.PathLike[str], memory_limit_bytes: int | None = None) -> Any:
    """Diagnose a run from its record (as ``trainscope doctor``): a
    :class:`~trainscope.diagnosis.Diagnosis` whose ``findings`` are ranked, most
    important first (``as_list()`` gives them as ``--json`` prints them).
    ``memory_limit_bytes``: the memory it must fit in (default: its device's)."""
    return diagnose(path, memory_limit_bytes=memory_limit_bytes)


__all__ = ["RunResult", "doctor", "report", "run", "settings_to_overrides"]
