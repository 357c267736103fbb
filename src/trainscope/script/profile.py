"""The user's script under trainscope's hooks, start to end, and however it ends.

:func:`profile_target` is ``trainscope profile``; :func:`profile` is the Python API's
``with trainscope.profile(out=...):`` around any code. Both leave a complete record:

- the script returned (or ``sys.exit(0)``): ``completed``, exit code 0;
- ``--steps N`` reached: ``completed``, with a note that says where it was ended, exit 0;
- ``sys.exit(n)``: ``failed`` ("the script exited with code n"), exit code n;
- an exception: its traceback (the script's frames), ``failed`` with its type, exit 1;
- Ctrl-C or a stop signal: ``failed`` saying so, and the one line and code of any run;
- an ``--inject`` setting that cannot apply to the model the script trains (refused when
  the model is first seen): ``failed`` with the reason, in one line, exit code 2.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from trainscope.errors import Terminated
from trainscope.injections import as_arguments, parse_injections
from trainscope.records import launch_outcomes
from trainscope.script.hooks import StepLimit
from trainscope.script.model_inject import InjectRefused
from trainscope.script.session import NO_STEP, ProfileOptions, ProfileSession
from trainscope.script.target import Target, print_script_traceback, run_target
from trainscope.train.console import RunConsole
from trainscope.util.textsafe import one_line


def profile_target(target: Target, options: ProfileOptions, quiet: bool = False) -> int:
    """Run ``target`` measured; returns its exit code (see module docs)."""
    session = ProfileSession(options, target.source_section(), target.stem)
    run_dir = session.claim()
    launch_outcomes.note_run_dir(run_dir)
    console = RunConsole(enabled=not quiet and session.place.rank == 0, progress=False)
    console.note(f"trainscope profile: {' '.join(target.source_section()['argv'])} -> {run_dir}")
    session.begin()
    try:
        ending = run_target(target, stop=(StepLimit, Terminated, KeyboardInterrupt, InjectRefused))
    except StepLimit as e:
        return _finish(session, console, 0, note=f"{e}: the script was ended there, cleanly")
    except InjectRefused as e:
        print(f"trainscope profile: {one_line(str(e))}", file=sys.stderr)
        launch_outcomes.report_end(one_line(str(e)), "error")
        return _finish(session, console, 2, status="failed", note=str(e))
    except (Terminated, KeyboardInterrupt) as e:
        session.end(e)  # the command line says it in one line and exits 128 + signal
        raise
    if ending.error is not None:
        print_script_traceback(ending.error)
        text = f"the script raised {type(ending.error).__name__}: {ending.error}"
        launch_outcomes.report_end(one_line(text), "error")
        return _finish(session, console, ending.code, error=ending.error)
    if ending.exit_message is not None:
        print(ending.exit_message, file=sys.stderr)  # sys.exit("text"), as Python prints it
    if ending.code:
        note = f"the script exited with code {ending.code}"
        launch_outcomes.report_end(note, "error")
        return _finish(session, console, ending.code, status="failed", note=note)
    return _finish(session, console, 0)


def _finish(session: ProfileSession, console: RunConsole, code: int, *,
            error: BaseException | None = None, status: str | None = None,
            note: str | None = None) -> int:  # fmt: skip
    summary = session.end(error, status=status, note=note)
    console.finish(summary, session.run_dir if session.place.rank == 0 else None)
    if session.place.rank == 0:
        for text in session.injector.notes():  # --inject that changed less than asked
            console.note(f"note: {text}")
    if not summary.get("steps") and session.place.rank == 0:
        console.note(f"note: {NO_STEP}; the time measured is in the stage table above")
    return code


@contextlib.contextmanager
def profile(out: str | None = None, *, overwrite: bool = False, steps: int | None = None,
            warmup_steps: int | None = None, log_every: int = 10, quiet: bool = True,
            name: str = "notebook",
            inject: dict[str, Any] | None = None) -> Iterator[ProfileSession]:  # fmt: skip
    """Measure the training code inside the ``with`` block as ``trainscope profile``
    measures a script; the record goes to ``out`` (default ``runs/<name>-<time>``).

    ``steps``: the block is ended after that many training steps (the exception that
    ends it is caught here, and the code after the block runs on). ``inject``: the
    settings of ``--inject`` (``{"num_workers": 4}``), checked as the command line checks
    them. The session's ``summary`` attribute holds the record once the block has ended."""
    from trainscope.script.session import DEFAULT_WARMUP_STEPS

    options = ProfileOptions(
        out=out, overwrite=overwrite, steps=steps, log_every=log_every,
        warmup_steps=DEFAULT_WARMUP_STEPS if warmup_steps is None else warmup_steps,
        injected=parse_injections(as_arguments(inject or {})[1::2]),
    )  # fmt: skip
    source = {"kind": "python", "argv": [name], "path": None, "module": None, "sha256": None}
    session = ProfileSession(options, source, name)
    session.claim()
    session.begin()
    console = RunConsole(enabled=not quiet, progress=False)
    summary: dict[str, Any]
    try:
        yield session
    except StepLimit as e:
        summary = session.end(status="completed", note=f"{e}: the block was ended there")
    except BaseException as e:
        session.summary = session.end(e)  # type: ignore[attr-defined]
        raise
    else:
        summary = session.end()
    session.summary = summary  # type: ignore[attr-defined]
    console.finish(summary, session.run_dir)


__all__ = ["profile", "profile_target"]
