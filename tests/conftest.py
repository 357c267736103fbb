"""Shared test fixtures: where the real shared data lives, and small MNIST-format folders.

Kept small and general on purpose; a fixture only one test module needs belongs in that
module.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from trainscope.data.idx import write_idx

REPO_ROOT = Path(__file__).resolve().parents[1]

# One torch thread per test process, and so per process a test starts (runs read
# OMP_NUM_THREADS through --threads auto; launched ranks inherit it). The suite runs in
# two pytest-xdist workers: with torch's default of one thread per core each, a busy
# 2-core machine ran the default digits run in 167 s instead of 3 (intra-op threads
# spin-waiting on cores others hold) and module fixtures hit the 300 s timeout.
# Tests never assert timings, so a user's own setting is overridden here on purpose.
os.environ["OMP_NUM_THREADS"] = "1"
# The suite's two workers load each other's cores on purpose, and its tests check what
# reports say, not timings: no repeat counts as measured under other load, and studies
# re-measure nothing (trainscope.util.load, trainscope.studies.remeasure). The tests of
# that rule plant their load and switch it back on (tests/studies/test_remeasure.py).
os.environ["TRAINSCOPE_IGNORE_LOAD"] = "1"
os.environ["TRAINSCOPE_REMEASURE"] = "0"

# Seconds a fixed piece of pure-Python work took on the machine the timeouts were sized
# on (a 2-vCPU VM, quiet), and the factor by which this machine is slower right now.
REFERENCE_WORK_S = 0.09
SLOWNESS_ENV = "TRAINSCOPE_TEST_SLOWNESS"


def _work() -> float:
    t0 = time.perf_counter()
    total = 0
    for i in range(1_500_000):
        total += i * i
    return time.perf_counter() - t0


def measured_slowness() -> float:
    """How much slower than the reference machine this one runs now (at least 1): the
    median of 5 timings of a fixed piece of work, or ``TRAINSCOPE_TEST_SLOWNESS``."""
    given = os.environ.get(SLOWNESS_ENV)
    if given:
        return max(1.0, float(given))
    return max(1.0, statistics.median(_work() for _ in range(5)) / REFERENCE_WORK_S)


SLOWNESS = measured_slowness()


def scaled(seconds: float) -> float:
    """A timeout sized for the reference machine, for this one: a test's waits grow with
    the work it does at this machine's speed, and a hang is still caught."""
    return seconds * SLOWNESS


def requires(*packages: str) -> pytest.MarkDecorator:
    """A mark that skips a test (or a module, as ``pytestmark``) unless every package is
    installed. Looked up with ``importlib.util.find_spec``, which does not import it:
    each test process collects every test module, and ``pytest.importorskip`` at module
    level made each pay peft's, transformers' and tensorboard's imports (~8 s on a 2-core
    machine) for tests that run in one of them."""
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


def pytest_report_header(config: pytest.Config) -> str:
    return f"trainscope: timeouts x{SLOWNESS:.2f} (this machine's speed now; {SLOWNESS_ENV})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scale every test's pytest-timeout by :data:`SLOWNESS`."""
    if SLOWNESS <= 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = marker.args[0] if marker is not None and marker.args else default
        if marker is not None and "timeout" in marker.kwargs:
            seconds = marker.kwargs["timeout"]
        if seconds:
            item.add_marker(pytest.mark.timeout(scaled(float(seconds))), append=False)


# The four standard MNIST file stems: (split prefix, kind).
MNIST_TRAIN_IMAGES = "train-images-idx3-ubyte"
MNIST_TRAIN_LABELS = "train-labels-idx1-ubyte"
MNIST_TEST_IMAGES = "t10k-images-idx3-ubyte"
MNIST_TEST_LABELS = "t10k-labels-idx1-ubyte"


def shared_mnist_dir() -> Path:
    """The shared MNIST copy: beside the checkout, or inside it on machines that carry it."""
    for candidate in (
        REPO_ROOT.parent / "shared" / "data" / "mnist",
        REPO_ROOT / "shared" / "data" / "mnist",
    ):
        if (candidate / "t10k-images-idx3-ubyte.gz").is_file():
            return candidate
    pytest.skip("shared MNIST data not present")


def write_mnist_dir(
    root: Path,
    n_train: int = 200,
    n_test: int = 50,
    *,
    size: int = 28,
    seed: int = 0,
    gz: bool = True,
) -> Path:
    """Write random MNIST-format files (uint8 images, labels 0..9) into ``root``.

    Labels cycle through 0..9 (shuffled), so every class is present when n >= 10.
    Returns ``root``.
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for images_stem, labels_stem, n in (
        (MNIST_TRAIN_IMAGES, MNIST_TRAIN_LABELS, n_train),
        (MNIST_TEST_IMAGES, MNIST_TEST_LABELS, n_test),
    ):
        images = rng.integers(0, 256, (n, size, size), dtype=np.uint8)
        labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
        write_idx(root / f"{images_stem}{suffix}", images)
        write_idx(root / f"{labels_stem}{suffix}", labels)
    return root


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The root of the checkout (the folder holding pyproject.toml)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout (or inside it where a machine carries it).

    Skips the test when the folder is absent: nothing is ever downloaded in tests.
    """
    for candidate in (REPO_ROOT.parent / "shared" / "data", REPO_ROOT / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    pytest.skip("shared data folder ../shared/data not present")


@pytest.fixture
def make_mnist_dir(tmp_path: Path) -> Callable[..., Path]:
    """A factory ``make(name="mnist", **kwargs)`` writing a small MNIST folder in tmp_path.

    Keyword arguments go to :func:`write_mnist_dir` (n_train, n_test, size, seed, gz).
    """

    def make(name: str = "mnist", **kwargs: object) -> Path:
        return write_mnist_dir(tmp_path / name, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture
def mnist_dir(make_mnist_dir: Callable[..., Path]) -> Path:
    """A small MNIST folder: 200 training and 50 test images of 28x28, gzip-compressed."""
    return make_mnist_dir()


@pytest.fixture
def isolated_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the CLI as a user would, inside ``tmp_path``: default run directories (runs/...)
    and the download cache stay there, and a TRAINSCOPE_DEBUG in the caller's environment
    does not turn errors into tracebacks. Returns ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAINSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINSCOPE_DEBUG", raising=False)
    return tmp_path


def raises_within_memory(
    expected: type[BaseException], call: Callable[[], object]
) -> tuple[BaseException, int]:
    """Call ``call``, which must raise ``expected``; return the exception and the peak of
    Python memory allocated meanwhile (tracemalloc), to bound what refusing it cost."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(expected) as caught:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return caught.value, peak


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: tiny models on a small shared CPU run faster without contention
    (``pytestmark = pytest.mark.usefixtures("one_thread")`` in a module that wants it)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def forked_launch() -> Iterator[list[tuple[str, list[str]]]]:
    """Launched processes (torchrun's ranks, a study's process per run) forked from this
    test process instead of started as fresh interpreters (``tests/forked_launch.py``):
    the same ``trainscope`` code in real processes, without ~3 s of start-up each. For
    tests of what the processes do, not of how they start. Module-scoped fixtures use
    ``with forked_launches():`` around their launches instead. The value is the list of
    what was launched (:func:`tests.forked_launch.forked_launches`)."""
    from tests.forked_launch import forked_launches

    with forked_launches() as launched:
        yield launched


class BuiltOnce:
    """Outputs of ``trainscope`` commands, each made once per test process and handed to
    every test that reads it as a copy of its own (see :func:`built_once`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[tuple[str, ...], Path] = {}

    def master(self, *argv: str) -> Path:
        """The folder ``trainscope ARGV --out FOLDER`` wrote (made on first use). Never
        hand it to code that writes: readers get :meth:`copy`."""
        from tests.forked_launch import forked_launches
        from trainscope.cli import main

        if argv not in self._made:
            out = self.root / f"{len(self._made)}-{argv[0]}"
            with forked_launches():
                code = main([*argv, "--out", str(out)])
            assert code == 0, f"trainscope {' '.join(argv)} exited {code}"
            self._made[argv] = out
        return self._made[argv]

    def copy(self, dest: Path, *argv: str) -> Path:
        """A copy at ``dest`` of what ``trainscope ARGV`` wrote (its marker included, so
        it is trainscope's own folder for ``--overwrite`` and report outputs)."""
        import shutil

        shutil.copytree(self.master(*argv), dest, symlinks=True)
        return dest


@pytest.fixture(scope="session")
def built_once(tmp_path_factory: pytest.TempPathFactory) -> BuiltOnce:
    """Build once, read many times: ``built_once.copy(tmp_path / "run", "run", *flags)``
    trains that run the first time any test of this process asks for it (a launch's ranks
    forked, as :func:`forked_launch`) and gives each test a fresh copy to read, report on
    or overwrite. Tests of how a command writes its output still run it themselves."""
    return BuiltOnce(tmp_path_factory.mktemp("built-once"))
