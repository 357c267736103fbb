"""The comm probe: collectives that pass through the dispatcher, counted on one step."""

from __future__ import annotations

import pytest
import torch

from tests.strategies import test_strategies
from trainscope.profiling.comm_probe import CollectiveCounter, CommProbe
from trainscope.runtime.dist import DistInfo

# A real gloo process group of one rank (the strategies tests' fixture).
world_of_one = test_strategies.world_of_one


@pytest.mark.timeout(120)
def test_functional_collectives_are_counted_with_their_bytes(world_of_one: DistInfo) -> None:
    import torch.distributed as dist
    from torch.distributed import _functional_collectives as funcol

    x = torch.ones(10, 3)
    with CollectiveCounter() as counter:
        y = funcol.all_reduce(x, "sum", dist.group.WORLD)
        z = funcol.all_gather_tensor(torch.ones(4), 0, dist.group.WORLD)
        total = (y.sum() + z.sum()).item()  # waits on both
    assert total == 34.0
    ops = counter.ops
    assert ops["all_reduce"]["calls"] == 1 and ops["all_reduce"]["bytes"] == 10 * 3 * 4
    assert ops["all_gather_into_tensor"]["bytes"] == 4 * 4
    assert all(v["seconds"] > 0 for v in ops.values())
    # Plain tensor work, and the functional collectives' helpers, are not counted.
    assert set(ops) == {"all_reduce", "all_gather_into_tensor"}


def test_the_probe_counts_its_step_only_and_says_nothing_without_collectives() -> None:
    class State:
        step = 0

    calls = []

    def step(state, batches, timer):  # noqa: ANN001, ANN202
        state.step += 1
        calls.append(state.step)
        return torch.ones(2).sum()

    probe = CommProbe(step, at=2)
    state = State()
    for _ in range(3):
        probe(state, None, None)
    assert calls == [1, 2, 3] and probe.figures == {"step": 2, "ops": {}}
    assert probe.record() is None  # nothing went through the dispatcher's collectives
