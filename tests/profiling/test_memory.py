"""The memory meter: tensor bytes by component, each storage counted once."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainscope.config import from_dict
from trainscope.profiling.memory import (
    MemoryProbe,
    SavedActivations,
    StorageTally,
    optimizer_state_tensors,
    tensor_bytes,
)
from trainscope.train.run import run


def test_saved_activations_count_each_storage_once() -> None:
    # Linear saves its input x; ReLU saves its output, which the second Linear saves too
    # (one storage, counted once); the weights are parameters, not activations.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(5, 4)
    with SavedActivations(model) as saved:
        out = model(x)
    out.sum().backward()
    assert saved.count.saved_by_autograd_bytes == 5 * 4 * 4 + 5 * 8 * 4
    assert saved.count.tensors == 2
    assert saved.count.autocast_weight_copies_bytes == 0


def test_in_flight_is_what_is_saved_and_not_yet_used_by_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    one = 5 * 4 * 4 + 5 * 8 * 4  # what one microbatch of 5 saves (see above)
    xs = [torch.randn(5, 4) for _ in range(4)]
    # All forwards, then all backwards (GPipe's order): everything is held at once.
    with SavedActivations(model) as gpipe:
        outs = [model(x) for x in xs]
        for out in outs:
            out.sum().backward()
    assert gpipe.count.saved_by_autograd_bytes == 4 * one
    assert gpipe.count.peak_in_flight_bytes == 4 * one
    # Each backward right after its forward (1F1B's steady state): one at a time. The
    # freed memory is reused at the same addresses; those are new storages, still counted.
    with SavedActivations(model) as one_by_one:
        for x in xs:
            model(x).sum().backward()
    assert one_by_one.count.saved_by_autograd_bytes == 4 * one
    assert one_by_one.count.peak_in_flight_bytes == one


def test_a_view_counts_its_whole_storage() -> None:
    base = torch.randn(10, 10, requires_grad=True)
    model = nn.Identity()
    with SavedActivations(model) as saved:
        y = (base * 2)[:, :3]  # the slice is a view of a 10 x 10 product
        z = y * y  # saves y (twice: one storage, the product's)
    z.sum().backward()
    assert saved.count.saved_by_autograd_bytes == 10 * 10 * 4


def test_nothing_is_counted_outside_the_context() -> None:
    model = nn.Linear(3, 3)
    with SavedActivations(model) as saved:
        pass
    model(torch.randn(2, 3)).sum().backward()
    assert saved.count.total_bytes == 0


def test_autocast_weight_copies_are_counted_apart() -> None:
    model = nn.Linear(16, 16)
    x = torch.randn(4, 16, requires_grad=True)  # a hidden layer's input: its gradient is due
    with SavedActivations(model) as saved, torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().sum().backward()
    # bf16 copy of the 16 x 16 weight (2 bytes each), saved for the input's gradient.
    assert saved.count.autocast_weight_copies_bytes == 16 * 16 * 2
    assert saved.count.saved_by_autograd_bytes == 4 * 16 * 2  # the input, cast to bf16


def test_storage_tally_and_tensor_bytes() -> None:
    t = torch.zeros(100)
    tally = StorageTally()
    assert tally.add(t) == 400 and tally.add(t[10:20]) == 0
    assert tensor_bytes([t, t[:5], torch.zeros(3, dtype=torch.float64)]) == 424
    assert tensor_bytes([torch.empty(0)]) == 0


def test_probe_counts_on_its_step_only() -> None:
    torch.manual_seed(0)
    model = nn.Linear(10, 2)
    opt = torch.optim.Adam(model.parameters())
    calls: list[int] = []

    class State:
        pass

    state = State()
    state.model, state.optimizer, state.device, state.step = model, opt, torch.device("cpu"), 0

    def step(st, batches, timer):
        x = next(batches)
        model(x).pow(2).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        st.step += 1
        calls.append(st.step)

    probe = MemoryProbe(step, at=2)
    batches = iter([torch.randn(3, 10) for _ in range(3)])
    probe(state, batches, None)
    assert probe.figures == {}
    probe(state, batches, None)
    probe(state, batches, None)
    f = probe.section()
    assert calls == [1, 2, 3] and f["step"] == 2
    assert f["parameters_bytes"] == f["gradients_bytes"] == (10 * 2 + 2) * 4
    # Adam: two moments per parameter and a float32 step counter per parameter tensor.
    assert f["optimizer_states_bytes"] == 2 * f["parameters_bytes"] + 2 * 4
    assert f["optimizer_states_bytes"] == tensor_bytes(optimizer_state_tensors(opt))
    assert f["activations_bytes"] == 3 * 10 * 4 + 3 * 2 * 4  # the input; pow's input
    assert f["model_states_bytes"] == 4 * f["parameters_bytes"] + 8


def test_probe_that_never_ran_says_so() -> None:
    section = MemoryProbe(lambda *a: None, at=2).section(checkpointing={"policy": "none"})
    assert "no step 2" in section["note"] and "parameters_bytes" not in section


def test_one_step_run_is_probed_on_its_only_step(tmp_path) -> None:
    cfg = from_dict(
        {
            "out": str(tmp_path / "r"),
            "train": {"epochs": 1, "max_steps_per_epoch": 1, "optimizer": "adamw"},
            "runtime": {"progress": False},
        }
    )
    mem = run(cfg)["memory"]
    assert mem["step"] == 1
    # AdamW's states exist only after the step: counted after it, so they are there.
    assert mem["optimizer_states_bytes"] > 2 * mem["parameters_bytes"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_stage_peaks_are_recorded(tmp_path) -> None:
    cfg = from_dict(
        {
            "out": str(tmp_path / "r"),
            "train": {"epochs": 1, "max_steps_per_epoch": 3},
            "runtime": {"device": "cuda", "progress": False},
        }
    )
    cuda = run(cfg)["memory"]["cuda"]
    assert set(cuda["stage_peak_allocated_bytes"]) >= {"forward", "backward", "optimizer"}
    assert all(v > 0 for v in cuda["stage_peak_allocated_bytes"].values())


class _Blocks(nn.Module):
    """Two blocks (``model.blocks``, as trainscope's models expose them) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8)) for _ in range(2)
        )
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def test_saved_bytes_are_split_at_the_blocks() -> None:
    torch.manual_seed(0)
    model = _Blocks()
    x = torch.randn(5, 8)
    with SavedActivations(model) as saved:
        out = model(x)
    out.sum().backward()
    c = saved.count
    # Each block saves its input (5x8), the ReLU's output (5x32, which the second Linear
    # saves too); the head saves the last residual sum: 5x8 outside the blocks.
    assert c.blocks == 2
    assert c.inside_blocks_bytes == 2 * (5 * 8 + 5 * 32) * 4
    assert c.block_inputs_bytes == 2 * 5 * 8 * 4
    assert c.saved_by_autograd_bytes == c.inside_blocks_bytes + 5 * 8 * 4
    assert not model.blocks[0]._forward_pre_hooks  # the hooks are gone after the step


@pytest.mark.timeout(120)
def test_the_split_predicts_what_full_checkpointing_keeps(tmp_path) -> None:
    # Checkpointing every block keeps only the blocks' inputs: the probe's split of the
    # uncheckpointed run predicts the checkpointed run's activations.
    from trainscope.techniques.activation_checkpointing import apply_checkpointing

    torch.manual_seed(0)
    model, x = _Blocks(), torch.randn(64, 8)
    with SavedActivations(model) as plain:
        model(x).sum().backward()
    apply_checkpointing(model, "full")
    with SavedActivations(model) as ckpt:
        model(x).sum().backward()
    c = plain.count
    predicted = c.total_bytes - c.inside_blocks_bytes + c.block_inputs_bytes
    assert ckpt.count.total_bytes == predicted and ckpt.count.blocks == 0
