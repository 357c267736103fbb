"""The one ordered place where features meet the model: checkpointing, compile, strategy."""

from __future__ import annotations

import pytest
import torch

from trainscope.config import ConfigError, RuntimeConfig, from_dict
from trainscope.runtime.dist import DistInfo
from trainscope.strategies import make_strategy
from trainscope.train.compose import compose
from trainscope.train.run import run
from trainscope.workloads.gpt import GPT, GPTConfig


def _tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=3, n_head=2, n_embd=8, dropout=0))


def test_checkpointing_keeps_the_module_tree_and_state_dict_keys() -> None:
    plain = _tiny_gpt()
    keys = list(plain.state_dict())
    cpu = torch.device("cpu")
    strategy = make_strategy("single", DistInfo(), cpu)
    model, applied = compose(_tiny_gpt(), strategy, cpu, RuntimeConfig(checkpointing="every-2"))
    assert applied["checkpointing"] == {"policy": "every-2", "blocks": 2}  # blocks 0 and 2
    assert applied["compile"] is None
    assert list(model.state_dict()) == keys
    flags = [getattr(b, "_trainscope_checkpointed", False) for b in model.blocks]
    assert flags == [True, False, True]


@pytest.mark.parametrize("bad", ["every-0", "half", "every-x", "", 3])
def test_unknown_policies_are_refused(bad) -> None:
    with pytest.raises(ConfigError, match="checkpointing policy"):
        RuntimeConfig(checkpointing=bad)


@pytest.mark.slow  # inductor compiles C++ kernels: half a minute on 2 cores
@pytest.mark.timeout(300)
def test_compile_is_its_own_stage_and_trains_the_same(tmp_path) -> None:
    """--compile: compilation is timed apart (not in setup, not in the steps), the stages
    still add up to the wall time, and the losses are those of the eager run."""

    def one(name: str, compiled: bool) -> dict:
        return run(
            from_dict(
                {
                    # LeNet5 on 128 training samples and 32 in each evaluation split, in
                    # batches of 32: every batch has one shape, so the two graphs the
                    # warm-up compiles (training, evaluation) are all there is to compile.
                    "workload": {"name": "synthetic", "synthetic_samples": 128,
                                 "synthetic_shape": [1, 12, 12]},
                    "data": {"batch_size": 32},
                    "out": str(tmp_path / name),
                    "train": {"epochs": 1, "max_steps_per_epoch": 4, "log_every": 1},
                    "runtime": {"compile": compiled, "progress": False},
                }
            )
        )  # fmt: skip

    eager, compiled = one("eager", False), one("compiled", True)
    assert "compile" not in eager["stages_s"]
    info = compiled["compile"]
    assert info["units"] == "whole model"  # LeNet's blocks are nn.Sequential: see compose
    assert info["graphs"] >= 1 and compiled["stages_s"]["compile"] == info["seconds"] > 0
    stages = compiled["stages_s"]
    assert sum(stages.values()) == pytest.approx(compiled["wall_time_s"], rel=1e-6)
    assert stages["other"] > -0.05  # the compile time is not counted twice
    assert compiled["first_losses"] == pytest.approx(eager["first_losses"], rel=1e-4, abs=1e-5)
