"""Launching: the torchrun command line, what is refused before any process starts, when
a run launches at all, and the validation of the ``dist`` config section."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import torch
from torch.distributed.run import get_args_parser

import trainscope
from trainscope.cli import build_parser, main, overrides_from_args
from trainscope.config import USER_OMP_ENV, DistConfig, RunConfig, from_dict, resolve
from trainscope.errors import ConfigError, DeviceError, TrainscopeError
from trainscope.launch import launcher as launch_module
from trainscope.launch.launcher import (
    AGENT_CODE,
    WORKER_CODE,
    check_launch,
    launch_env,
    needs_launch,
    run_any,
    run_or_launch,
    torchrun_argv,
)
from trainscope.records import launch_outcomes as outcomes

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
CONFIG_FILE = Path("/tmp/cfg.yaml")


def cfg_with(**dist: Any) -> RunConfig:
    runtime = dist.pop("runtime", {})
    return from_dict({"dist": dist, "runtime": runtime})


def parse_torchrun(argv: list[str]) -> Any:
    """torchrun's own parser over our argv (after ``python -c AGENT_CODE``)."""
    assert argv[:3] == [sys.executable, "-c", AGENT_CODE]
    return get_args_parser().parse_args(argv[3:])


def flag(argv: list[str], name: str) -> str | None:
    """The value of ``--name=value`` in argv (None when absent)."""
    values = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(values) <= 1, argv
    return values[0] if values else None


# ------------------------------------------------------------------------ torchrun_argv


def test_torchrun_argv_one_node_uses_a_private_local_rendezvous() -> None:
    argv = torchrun_argv(cfg_with(strategy="ddp", nproc=2), CONFIG_FILE, ["--quiet"])
    assert flag(argv, "nproc-per-node") == "2" and flag(argv, "nnodes") == "1"
    assert flag(argv, "rdzv-backend") == "c10d"
    host, port = flag(argv, "rdzv-endpoint").split(":")
    assert host == "127.0.0.1" and 0 < int(port) < 65536
    assert flag(argv, "master-port") is None and flag(argv, "node-rank") is None
    worker = [sys.executable, "-c", WORKER_CODE, "run", "--config", str(CONFIG_FILE), "--quiet"]
    assert argv[-9:] == ["--no-python", "--", *worker]
    args = parse_torchrun(argv)  # every flag is one torchrun knows
    # Workers are started as given (no ``python -m``, which would put the current
    # directory first on sys.path).
    assert args.no_python and not args.module and args.training_script == sys.executable
    assert args.training_script_args == worker[1:]
    assert "del sys.path[0]" in WORKER_CODE and "del sys.path[0]" in AGENT_CODE
    assert args.rdzv_endpoint == f"127.0.0.1:{port}" and args.nnodes == "1"


def test_torchrun_argv_one_node_picks_a_fresh_port_each_time() -> None:
    cfg = cfg_with(strategy="ddp", nproc=2)
    ports = {flag(torchrun_argv(cfg, CONFIG_FILE, []), "rdzv-endpoint") for _ in range(5)}
    assert len(ports) > 1


def test_torchrun_argv_several_nodes_with_master_addr_and_port() -> None:
    cfg = cfg_with(
        strategy="allreduce", nproc=4, nnodes=3, node_rank=2, master_addr="10.1.2.3",
        master_port=29555,
    )  # fmt: skip
    argv = torchrun_argv(cfg, CONFIG_FILE, [])
    assert flag(argv, "nproc-per-node") == "4" and flag(argv, "nnodes") == "3"
    assert flag(argv, "node-rank") == "2"
    assert flag(argv, "master-addr") == "10.1.2.3" and flag(argv, "master-port") == "29555"
    assert flag(argv, "rdzv-endpoint") is None and flag(argv, "rdzv-backend") is None
    args = parse_torchrun(argv)
    assert (args.node_rank, args.master_addr, args.master_port) == (2, "10.1.2.3", 29555)


def test_torchrun_argv_one_node_with_a_master_port_is_static() -> None:
    argv = torchrun_argv(cfg_with(strategy="ddp", nproc=2, master_port=29600), CONFIG_FILE, [])
    assert flag(argv, "nnodes") == "1" and flag(argv, "node-rank") == "0"
    assert flag(argv, "master-addr") == "127.0.0.1" and flag(argv, "master-port") == "29600"
    assert flag(argv, "rdzv-endpoint") is None


def test_torchrun_argv_with_a_rendezvous_endpoint() -> None:
    cfg = cfg_with(
        strategy="fsdp", nproc=2, nnodes=2, node_rank=1, rdzv_endpoint="head.example:29400",
        master_port=1234,  # the endpoint wins over master addr/port
    )  # fmt: skip
    argv = torchrun_argv(cfg, CONFIG_FILE, [])
    assert flag(argv, "nnodes") == "2" and flag(argv, "node-rank") == "1"
    assert flag(argv, "rdzv-backend") == "c10d"
    assert flag(argv, "rdzv-endpoint") == "head.example:29400"
    assert flag(argv, "master-addr") is None and flag(argv, "master-port") is None
    assert parse_torchrun(argv).rdzv_endpoint == "head.example:29400"


# ------------------------------------------------------------------------- check_launch


def fake_cuda(monkeypatch: pytest.MonkeyPatch, gpus: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)


@pytest.mark.parametrize("device", ["cpu", "auto", "cuda"])
def test_check_launch_refuses_nccl_without_cuda(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    fake_cuda(monkeypatch, 0)
    cfg = cfg_with(strategy="ddp", nproc=2, backend="nccl", runtime={"device": device})
    with pytest.raises(DeviceError, match="nccl needs CUDA"):
        check_launch(cfg)


def test_check_launch_refuses_nccl_on_the_cpu_of_a_gpu_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_cuda(monkeypatch, 2)
    cfg = cfg_with(strategy="ddp", nproc=2, backend="nccl", runtime={"device": "cpu"})
    with pytest.raises(DeviceError, match="nccl needs CUDA"):
        check_launch(cfg)


@pytest.mark.parametrize("device", ["cuda", "auto"])
@pytest.mark.parametrize("backend", ["nccl", "gloo", "auto"])
def test_check_launch_refuses_more_gpu_ranks_than_gpus(
    monkeypatch: pytest.MonkeyPatch, device: str, backend: str
) -> None:
    fake_cuda(monkeypatch, 2)
    cfg = cfg_with(strategy="ddp", nproc=3, backend=backend, runtime={"device": device})
    with pytest.raises(DeviceError, match=r"--nproc 3 .* 2 GPU\(s\)"):
        check_launch(cfg)


def test_check_launch_counts_gpus_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes of two GPUs make four ranks: each node needs only its own two GPUs."""
    fake_cuda(monkeypatch, 2)
    cfg = cfg_with(strategy="ddp", nproc=2, nnodes=2, master_port=29500, runtime={"device": "cuda"})
    check_launch(cfg)


@pytest.mark.parametrize(
    ("gpus", "dist", "device"),
    [
        (0, {"nproc": 2}, "cpu"),
        (0, {"nproc": 4, "backend": "gloo"}, "auto"),  # CPU ranks share the CPU
        (2, {"nproc": 2, "backend": "nccl"}, "cuda"),
        (2, {"nproc": 2}, "auto"),
        (1, {"nproc": 8}, "cpu"),  # CPU ranks on a GPU machine: no GPU per rank needed
    ],
)
def test_check_launch_accepts_what_can_run(
    monkeypatch: pytest.MonkeyPatch, gpus: int, dist: dict[str, Any], device: str
) -> None:
    fake_cuda(monkeypatch, gpus)
    check_launch(cfg_with(strategy="ddp", **dist, runtime={"device": device}))


# ------------------------------------------------------------------------- needs_launch


@pytest.fixture
def no_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in TORCHRUN_ENV:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_needs_launch_for_several_processes(no_torchrun_env: pytest.MonkeyPatch) -> None:
    assert needs_launch(cfg_with(strategy="ddp", nproc=2))
    assert needs_launch(cfg_with(strategy="ddp", nnodes=2, node_rank=1, master_port=29500))


@pytest.mark.parametrize("strategy", ["single", "dp", "ddp", "allreduce"])
def test_no_launch_for_a_world_of_one(no_torchrun_env: pytest.MonkeyPatch, strategy: str) -> None:
    assert not needs_launch(cfg_with(strategy=strategy))


def test_no_launch_under_torchrun(no_torchrun_env: pytest.MonkeyPatch) -> None:
    cfg = cfg_with(strategy="ddp", nproc=2)
    no_torchrun_env.setenv("RANK", "1")
    assert needs_launch(cfg)  # one variable alone is not torchrun
    no_torchrun_env.setenv("WORLD_SIZE", "2")
    no_torchrun_env.setenv("LOCAL_RANK", "1")
    assert not needs_launch(cfg)  # a worker never launches again


# ------------------------------------------------------------------------ run_or_launch


def fake_launch(
    monkeypatch: pytest.MonkeyPatch, code: int = 0, error: str | None = None
) -> list[tuple[list[str] | None, bool]]:
    """``launch`` replaced: each call's extra arguments and torchrun flag are kept, and a
    completed run's summary is left where a launched run writes it."""
    calls: list[tuple[list[str] | None, bool]] = []

    def launch(cfg: RunConfig, extra: list[str] | None = None, *, torchrun: bool = True):
        calls.append((extra, torchrun))
        if code == 0:
            Path(cfg.out).mkdir(parents=True, exist_ok=True)
            (Path(cfg.out) / "summary.json").write_text('{"status": "completed", "steps": 3}')
        return outcomes.LaunchResult(code, error, Path(cfg.out))

    monkeypatch.setattr(launch_module, "launch", launch)
    return calls


def test_run_or_launch_launches_what_needs_processes(
    no_torchrun_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = fake_launch(no_torchrun_env)
    cfg = from_dict({"dist": {"strategy": "ddp", "nproc": 2}, "out": str(tmp_path / "a")})
    outcome = run_or_launch(cfg, extra_args=["--quiet"])
    assert outcome.launched and outcome.code == 0 and outcome.error is None
    assert outcome.summary == {"status": "completed", "steps": 3}  # read back
    # One process in a process of its own: launched, without torchrun.
    cfg = from_dict({"out": str(tmp_path / "b")})
    assert run_or_launch(cfg, fresh_process=True).launched
    assert calls == [(["--quiet"], True), (None, False)]


def test_the_cli_the_api_and_studies_launch_through_run_or_launch(
    no_torchrun_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[bool, list[str] | None, bool]] = []

    def spy(cfg: RunConfig, console: Any = None, *, fresh_process: bool = False,
            extra_args: list[str] | None = None, own_process: bool = False) -> Any:  # fmt: skip
        seen.append((fresh_process, extra_args, own_process))
        return launch_module.RunOutcome(0, {"status": "completed"}, launched=True)

    # Where each caller looks the function up: the API imports it at its top; the CLI and
    # run_any find it in the launcher. The API first, so that importing it does not bind
    # the spy.
    no_torchrun_env.setattr("trainscope.api.run_or_launch", spy)
    no_torchrun_env.setattr(launch_module, "run_or_launch", spy)
    ddp = ["--strategy", "ddp", "--nproc", "2"]
    assert main(["run", *ddp, "--out", str(tmp_path / "cli"), "-q"]) == 0
    result = trainscope.run(strategy="ddp", nproc=2, out=str(tmp_path / "api"), quiet=True)
    assert result.status == "completed"
    assert run_any(from_dict({"out": str(tmp_path / "s")}), fresh_process=True) == {
        "status": "completed"
    }
    # Only the command line owns its process (its imports may freeze the collector's
    # objects: runtime.gc_imports); a notebook's or a study's process is left alone.
    assert seen == [
        (False, ["--quiet"], True),
        (False, ["--quiet", "--no-progress"], False),
        (True, ["--quiet", "--no-progress"], False),
    ]


def test_a_failed_launch_is_one_line_for_each_caller(
    no_torchrun_env: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fake_launch(no_torchrun_env, code=1, error="rank 1: boom")
    ddp = ["--strategy", "ddp", "--nproc", "2"]
    assert main(["run", *ddp, "--out", str(tmp_path / "cli"), "-q"]) == 1
    assert capfd.readouterr().err.splitlines() == ["trainscope: error: rank 1: boom"]
    result = trainscope.run(strategy="ddp", nproc=2, out=str(tmp_path / "api"), quiet=True)
    assert result.summary == {"status": "failed", "error": "rank 1: boom"}
    with pytest.raises(TrainscopeError, match=r"failed \(exit 1\): rank 1: boom"):
        run_any(from_dict({"out": str(tmp_path / "s")}), fresh_process=True)


# ------------------------------------------------------------------------------ the CLI


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("strategy", ["ddp", "allreduce"])
def test_cli_nccl_on_cpu_is_refused_before_any_process(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    strategy: str,
) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(
        "trainscope.launch.launcher.subprocess.run",
        lambda argv, **kw: started.append(argv) or CompletedProcess(argv, 0),
    )
    out = tmp_path / "run"
    code = main(["run", "--backend", "nccl", "--nproc", "2", "--strategy", strategy,
                 "--out", str(out), "-q"])  # fmt: skip
    got_out, err = capfd.readouterr()
    assert code == 1
    assert err.splitlines() == [
        "trainscope: error: backend nccl needs CUDA GPUs (and a CUDA device); "
        "use --backend gloo on CPU"
    ]
    assert got_out == "" and started == [] and not out.exists()


def test_cli_several_processes_need_a_multiprocess_strategy(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--backend", "nccl", "--nproc", "2", "--out", str(tmp_path / "r")])
    _, err = capfd.readouterr()
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith("trainscope: error: strategy single runs in one process")
    assert not (tmp_path / "r").exists()


def test_cli_flags_fill_the_dist_section() -> None:
    args = build_parser().parse_args(
        ["run", "--strategy", "fsdp", "--nproc", "2", "--nnodes", "3", "--node-rank", "1",
         "--master-addr", "10.0.0.9", "--master-port", "29511", "--rdzv-endpoint", "h:1",
         "--backend", "gloo", "--scale-lr"]
    )  # fmt: skip
    d = resolve(None, overrides_from_args(args)).dist
    assert d == DistConfig(
        strategy="fsdp", nproc=2, nnodes=3, node_rank=1, master_addr="10.0.0.9",
        master_port=29511, rdzv_endpoint="h:1", backend="gloo", scale_lr=True,
    )  # fmt: skip
    assert d.world_size == 6
    no_scale = build_parser().parse_args(["run", "--no-scale-lr"])
    assert resolve(None, overrides_from_args(no_scale)).dist.scale_lr is False


# --------------------------------------------------------------------- DistConfig checks

BAD_DIST: list[tuple[dict[str, Any], str]] = [
    ({"strategy": "horovod"}, "unknown strategy 'horovod'"),
    ({"strategy": "DDP"}, "unknown strategy 'DDP'"),
    ({"backend": "mpi"}, "unknown backend 'mpi'"),
    ({"nproc": 0}, "nproc must be a positive integer"),
    ({"nnodes": 0}, "nnodes must be a positive integer"),
    ({"strategy": "ddp", "nnodes": 2, "node_rank": 2, "master_port": 1}, r"node_rank .* 0\.\.1"),
    ({"node_rank": -1}, r"node_rank must be in 0\.\.0, got -1"),
    ({"node_rank": 1}, r"node_rank must be in 0\.\.0, got 1"),
    ({"strategy": "ddp", "nnodes": 2}, "several nodes need a meeting point"),
    ({"master_port": 0}, "master_port must be in 1..65535"),
    ({"master_port": 65536}, "master_port must be in 1..65535"),
    ({"strategy": "single", "nproc": 2}, "strategy single runs in one process"),
    ({"strategy": "dp", "nproc": 2}, "strategy dp runs in one process"),
    ({"strategy": "dp", "nnodes": 2, "master_port": 1}, "strategy dp runs in one process"),
    ({"timeout_s": 0}, "timeout_s must be >= 1"),
    ({"nproc": "2"}, "dist.nproc must be an integer"),
    ({"scale_lr": "yes"}, "dist.scale_lr must be true or false"),
    ({"hosts": 2}, "unknown config key dist.hosts"),
]


@pytest.mark.parametrize(("dist", "message"), BAD_DIST, ids=[str(d) for d, _ in BAD_DIST])
def test_dist_config_is_validated(dist: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_dict({"dist": dist})


@pytest.mark.parametrize(
    "dist",
    [
        {},
        {"strategy": "ddp", "nproc": 2},
        {"strategy": "ddp", "nnodes": 2, "node_rank": 1, "master_port": 29500},
        {"strategy": "fsdp", "nnodes": 2, "rdzv_endpoint": "h:29400"},
        {"strategy": "dp"},
        {"strategy": "gather-scatter", "backend": "gloo", "timeout_s": 1.5},
    ],
)
def test_valid_dist_configs(dist: dict[str, Any]) -> None:
    d = from_dict({"dist": dist}).dist
    assert d.world_size == d.nproc * d.nnodes


def test_launched_processes_get_a_safe_path_and_their_parent(tmp_path: Path) -> None:
    env = launch_env(str(tmp_path))
    assert env["PYTHONSAFEPATH"] == "1"  # Python >= 3.11: no current directory on sys.path
    assert env["TRAINSCOPE_LAUNCH_DIR"] == str(tmp_path)
    assert env["TRAINSCOPE_PARENT_PID"].isdigit()
    # The user's OMP_NUM_THREADS (or none) goes along: torchrun's default of 1 is not theirs.
    assert env[USER_OMP_ENV] == os.environ.get("OMP_NUM_THREADS", "")
