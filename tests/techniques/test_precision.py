"""Tests for trainscope.techniques.precision: no-op fp32, bf16 autocast on CPU, clear
refusals, GPU paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainscope.errors import DeviceError, TrainscopeError
from trainscope.techniques.precision import BF16, FP16, TF32, Precision, make_precision

CPU = torch.device("cpu")


def _model_and_opt(device: torch.device) -> tuple[nn.Linear, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _train_step(p: Precision, model: nn.Module, opt: torch.optim.Optimizer, scale: float = 1.0):
    x = torch.randn(16, 8, device=p.device)
    opt.zero_grad(set_to_none=True)
    with p.autocast():
        out = model(x)
        loss = out.float().pow(2).mean() * scale
    p.backward(loss)
    p.step(opt)
    return out


# ---------------------------------------------------------------------------------- CPU


def test_fp32_is_a_no_op() -> None:
    p = make_precision("fp32", CPU)
    assert type(p) is Precision and p.name == "fp32"
    model, opt = _model_and_opt(CPU)
    before = model.weight.detach().clone()
    with p.autocast():
        assert not torch.is_autocast_enabled("cpu")
        assert model(torch.randn(2, 8)).dtype == torch.float32
    _train_step(p, model, opt)
    assert not torch.equal(model.weight, before)  # backward + step really trained
    assert p.skipped_steps == 0
    assert p.state_dict() == {"skipped_steps": 0}
    p.close()  # nothing to undo, must not fail


def test_bf16_autocast_on_cpu() -> None:
    p = make_precision("bf16", CPU)
    assert isinstance(p, BF16) and p.name == "bf16"
    model, opt = _model_and_opt(CPU)
    x = torch.randn(2, 8)
    with p.autocast():
        assert torch.is_autocast_enabled("cpu")
        assert model(x).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")  # the context ends cleanly
    assert model(x).dtype == torch.float32
    before = model.weight.detach().clone()
    out = _train_step(p, model, opt)
    assert out.dtype == torch.bfloat16
    # Parameters and their gradients stay fp32 (autocast casts copies, not the weights).
    assert model.weight.dtype == torch.float32 and model.weight.grad.dtype == torch.float32
    assert not torch.equal(model.weight, before)
    assert p.skipped_steps == 0 and p.state_dict() == {"skipped_steps": 0}


@pytest.mark.parametrize(
    ("name", "cls", "words"),
    [("tf32", TF32, ("tf32", "GPU", "CPU")), ("fp16", FP16, ("fp16", "CUDA", "CPU"))],
)
def test_gpu_only_precisions_refuse_cpu(name: str, cls: type, words: tuple[str, ...]) -> None:
    # Never a silent fallback to fp32: a study must not report fp32 under another label.
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with pytest.raises(DeviceError) as exc:
        make_precision(name, CPU)
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg
    with pytest.raises(DeviceError):
        cls(CPU)
    # A refused tf32 must not have flipped the process-wide switches.
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == saved


def test_bf16_refuses_other_device_types() -> None:
    with pytest.raises(DeviceError, match="bf16 is not supported on device meta"):
        make_precision("bf16", torch.device("meta"))


@pytest.mark.parametrize("name", ["fp8", "FP32", "", "float16"])
def test_unknown_precision_name(name: str) -> None:
    with pytest.raises(DeviceError, match=f"unknown precision {name!r}"):
        make_precision(name, CPU)


def test_precision_errors_are_user_errors() -> None:
    # The CLI prints TrainscopeErrors as one line without a traceback.
    assert issubclass(DeviceError, TrainscopeError)


# ---------------------------------------------------------------------------------- GPU

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
def test_fp16_counts_skipped_steps_on_inf_loss() -> None:
    dev = torch.device("cuda")
    p = make_precision("fp16", dev)
    assert isinstance(p, FP16)
    model, opt = _model_and_opt(dev)
    with p.autocast():
        assert model(torch.randn(2, 8, device=dev)).dtype == torch.float16
    scale0 = p.scaler.get_scale()

    before = model.weight.detach().clone()
    _train_step(p, model, opt, scale=float("inf"))  # inf gradients: the step is skipped
    assert p.skipped_steps == 1
    assert p.scaler.get_scale() < scale0
    assert torch.equal(model.weight, before)

    _train_step(p, model, opt)  # a finite step goes through and is not counted
    assert p.skipped_steps == 1
    assert not torch.equal(model.weight, before)
    assert "scaler" in p.state_dict()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8,
    reason="tf32 needs compute capability >= 8.0",
)
def test_tf32_sets_and_restores_backend_flags() -> None:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        p = make_precision("tf32", torch.device("cuda"))
        assert p.name == "tf32"
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.backends.cudnn.allow_tf32 is True
        p.close()
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
