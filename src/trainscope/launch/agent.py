"""The torchrun process of ``trainscope run --nproc N``: torchrun's own launcher, run
quietly, dying with its parent, and leaving what went wrong where the parent reads it.

torchrun (``torch.distributed.run``) would print its own multi-line report and a
traceback when a worker fails; trainscope's launcher prints one line instead, built from
the ranks' records and from what this process writes to ``agent.json`` in the launch
folder: which rank failed first, with its exit code or signal.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from trainscope.runtime.signals import die_with_parent


def _failure_text(exitcode: int) -> str:
    if exitcode < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv``; returns its exit status (never raises for a failure)."""
    die_with_parent()
    launcher = os.environ.get("TRAINSCOPE_PARENT_PID")
    # The workers die with this process in turn (they read the pid to check for a race).
    os.environ["TRAINSCOPE_PARENT_PID"] = str(os.getpid())
    try:
        return _torchrun(argv)
    finally:
        folder = os.environ.get("TRAINSCOPE_LAUNCH_DIR")
        if folder and launcher is not None and str(os.getppid()) != launcher:
            # The launcher was killed (SIGKILL: no cleanup of its own): its private
            # folder, which only it and this process use, goes with it.
            shutil.rmtree(folder, ignore_errors=True)


def _torchrun(argv: list[str] | None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    # torchrun's agent logs each worker's end, its own shutdown and its summary of a
    # failure, several lines each; the launcher says what happened in one line instead.
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run")):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    args = get_args_parser().parse_args(sys.argv[1:] if argv is None else argv)
    launch_dir = os.environ.get("TRAINSCOPE_LAUNCH_DIR")
    try:
        run(args)
        return 0
    except ChildFailedError as e:
        if launch_dir:
            first_rank, _ = e.get_first_failure()
            failures = {
                str(rank): {
                    "exitcode": f.exitcode,
                    "text": _failure_text(f.exitcode),
                    "time": f.timestamp,
                }
                for rank, f in e.failures.items()
            }
            data = {"first_rank": first_rank, "failures": failures, "time": time.time()}
            (Path(launch_dir) / "agent.json").write_text(json.dumps(data))
        return 1
    except SignalException as e:
        return 128 + int(e.sigval)


if __name__ == "__main__":  # pragma: no cover - started by trainscope.launch.launcher
    sys.exit(main())
