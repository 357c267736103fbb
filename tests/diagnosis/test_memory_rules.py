"""The memory rules fire near the memory limit, on what holds the memory, and stay silent
otherwise (records written by the test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.diagnosis.test_rules import write_run
from trainscope.diagnosis import diagnose
from trainscope.diagnosis.memory_rules import memory_limit

MIB = 1 << 20

pytestmark = pytest.mark.timeout(60)


def memory(params: int, grads: int, states: int, acts: int, **split: int) -> dict[str, Any]:
    """A ``memory`` section as the probe writes it (bytes)."""
    return {
        "step": 2, "parameters_bytes": params, "buffers_bytes": 0, "gradients_bytes": grads,
        "optimizer_states_bytes": states, "activations_bytes": acts,
        "activations": {"saved_by_autograd_bytes": acts, **split},
        "model_states_bytes": params + grads + states,
        "total_bytes": params + grads + states + acts,
        "checkpointing": {"policy": "none", "blocks": 0}, "sharded": False,
    }  # fmt: skip


ACTS = memory(1 * MIB, 1 * MIB, 2 * MIB, 36 * MIB, blocks=4, inside_blocks_bytes=32 * MIB,
              block_inputs_bytes=2 * MIB)  # fmt: skip
STATES = memory(8 * MIB, 8 * MIB, 16 * MIB, 4 * MIB)


def test_activations_near_the_limit_propose_checkpointing_with_the_bytes(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", summary={"memory": ACTS})
    (f,) = diagnose(run, memory_limit_bytes=44 * MIB).findings  # 40 of 44 MiB: 91%
    assert f.rule == "activations-near-limit" and f.fix == {"--checkpointing": "full"}
    assert f.measure == "memory" and not f.numerics
    assert "about 30.0 MiB less, activations from 36.0 MiB to 6.0 MiB" in f.gain
    assert "forward 0.800 ms" in f.gain  # the time it costs: at most one more forward
    assert f.severity == "major" and f.gain_share == pytest.approx(30 / 40)
    assert f.command.endswith(
        "--checkpointing full --out " + str(tmp_path / "a-activations-near-limit")
    )
    # Far from the limit, or already checkpointed: silent.
    assert diagnose(run, memory_limit_bytes=400 * MIB).findings == []
    done = {**ACTS, "checkpointing": {"policy": "full", "blocks": 4}}
    assert diagnose(write_run(tmp_path / "c", summary={"memory": done}),
                    memory_limit_bytes=44 * MIB).findings == []  # fmt: skip


def test_without_the_block_split_the_gain_is_not_invented(tmp_path: Path) -> None:
    plain = memory(1 * MIB, 1 * MIB, 2 * MIB, 36 * MIB)
    (f,) = diagnose(write_run(tmp_path / "a", summary={"memory": plain}),
                    memory_limit_bytes=44 * MIB).findings  # fmt: skip
    assert f.gain.startswith("not estimated") and f.gain_share is None


def test_optimizer_states_near_the_limit_propose_fsdp_for_several_ranks(tmp_path: Path) -> None:
    ddp = write_run(tmp_path / "d", summary={"memory": STATES, "strategy": "ddp",
                                             "world_size": 2})  # fmt: skip
    (f,) = diagnose(ddp, memory_limit_bytes=40 * MIB).findings
    assert f.rule == "optimizer-states-near-limit" and f.fix == {"--strategy": "fsdp"}
    assert "about 16.0 MiB less per process" in f.gain and f.measure == "memory"
    one = write_run(tmp_path / "s", summary={"memory": STATES})
    (g,) = diagnose(one, memory_limit_bytes=40 * MIB).findings
    assert g.fix == {} and "needs several processes" in g.gain
    sharded = write_run(tmp_path / "f", summary={"memory": {**STATES, "sharded": True},
                                                 "strategy": "fsdp", "world_size": 2})  # fmt: skip
    assert diagnose(sharded, memory_limit_bytes=40 * MIB).findings == []
    # Activations the largest part: the states rule is silent (the other one speaks).
    assert [x.rule for x in diagnose(write_run(tmp_path / "a", summary={"memory": ACTS}),
            memory_limit_bytes=44 * MIB).findings] == ["activations-near-limit"]  # fmt: skip


def test_the_device_limit_comes_from_env_json(tmp_path: Path) -> None:
    from trainscope.diagnosis.facts import read_facts

    gpu = write_run(tmp_path / "g", summary={"memory": ACTS, "device": "cuda:1",
                                             "peak_memory_bytes": 75 << 30})  # fmt: skip
    gpus = [{"index": 0, "total_memory_bytes": 40 << 30},
            {"index": 1, "total_memory_bytes": 80 << 30}]  # fmt: skip
    (gpu / "env.json").write_text(json.dumps({"gpus": gpus}))
    used, limit, what = memory_limit(read_facts(gpu))
    assert (used, limit) == (75 << 30, 80 << 30) and "GPU" in what
    assert "activations-near-limit" in [f.rule for f in diagnose(gpu).findings]
    cpu = write_run(tmp_path / "c", summary={"memory": ACTS, "peak_memory_bytes": 1 << 30})
    (cpu / "env.json").write_text(json.dumps({"host_memory_bytes": 24 << 30}))
    assert memory_limit(read_facts(cpu))[1] == 24 << 30
    assert diagnose(cpu).findings == []  # 1 of 24 GiB
    (cpu / "env.json").write_text("{}")  # a limit nobody recorded: no finding, no error
    assert memory_limit(read_facts(cpu)) is None and diagnose(cpu).findings == []


@pytest.mark.parametrize(
    "bad",
    [{"total_bytes": -1}, {"total_bytes": "many"}, {**ACTS, "activations_bytes": None},
     {**ACTS, "activations": "x"}, "not a section"],
)  # fmt: skip
def test_a_damaged_memory_section_gives_no_traceback(tmp_path: Path, bad: Any) -> None:
    run = write_run(tmp_path / "d", summary={"memory": bad})
    findings = diagnose(run, memory_limit_bytes=1 * MIB).findings
    assert all(f.rule.endswith("near-limit") for f in findings)
