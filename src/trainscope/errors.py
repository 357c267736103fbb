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


class RecordError(TrainscopeError):
    """A record file (summary, trainer state, manifest, study, cost model) is readable
    JSON but a field is missing, of another type or out of range; the message names the
    file and the field (see :mod:`trainscope.records.schema`)."""

    def __init__(
        self, message: str, path: object = None, field: str = "", problem: str = ""
    ) -> None:
        super().__init__(message)
        self.path = path
        """The file, as the reader named it."""
        self.field = field
        """The dotted name of the field ("" for the record as a whole)."""
        self.problem = problem or message
        """The message without the file's name: ``field 'kind' should be a string, got 3``."""


class DivergedError(TrainscopeError):
    """Training produced a non-finite loss (NaN or infinity) and was stopped."""


class DeviceError(TrainscopeError):
    """The requested device or precision does not exist on this machine."""


class Terminated(BaseException):
    """The process was told to stop by a signal (SIGTERM, SIGHUP, SIGQUIT).

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` swallows it:
    it unwinds to the run, which records ``failed`` with the signal's name, and to the
    CLI, which prints one line and exits with 128 + the signal number.
    """

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        try:
            self.signame = signal.Signals(signum).name
        except ValueError:
            self.signame = f"signal {signum}"
        super().__init__(f"terminated by {self.signame}")


class Preempted(Terminated):
    """A scheduler took the machine back (SLURM's pre-timeout signal, a preemption, a pod
    eviction): every rank stopped at one agreed step after writing a checkpoint there.

    A :class:`Terminated`, so that the command line exits with 128 + the signal number
    (a code Kubernetes restarts a pod on); the run records ``preempted`` (or
    ``cancelled``, when SLURM says the job was cancelled), not ``failed``.
    """

    def __init__(
        self, signum: int, step: int, checkpoint: str | None, status: str = "preempted"
    ) -> None:
        super().__init__(signum)
        self.step = step
        self.checkpoint = checkpoint
        self.status = status
        """preempted | cancelled (as SLURM's controller told rank 0)."""

    def __str__(self) -> str:
        saved = (f"checkpoint {self.checkpoint} written" if self.checkpoint
                 else "no checkpoint could be written")  # fmt: skip
        return f"{self.status} by {self.signame} at step {self.step}: {saved}"
