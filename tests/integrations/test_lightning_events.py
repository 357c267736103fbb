"""The Lightning integration in this process, on a tiny LightningModule: the record,
no global hook left behind, a fit that raises recorded as failed, and the callback
without trainscope's profiler recording nothing (and saying so)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import requires
from tests.script.helpers import summary

pytestmark = [requires("lightning"), pytest.mark.timeout(120)]


def _fit(root: Path, fail_at: int | None = None, **trainer: object) -> object:
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

        def training_step(self, batch: tuple, idx: int) -> torch.Tensor:
            if fail_at is not None and idx == fail_at:
                raise ValueError("planted failure")
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def validation_step(self, batch: tuple, idx: int) -> None:
            self(batch[0])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,)))
    fit = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, default_root_dir=root,
                    logger=False, enable_progress_bar=False, enable_model_summary=False,
                    enable_checkpointing=False, **trainer)  # fmt: skip
    fit.fit(Tiny(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
    return fit


def _global_hooks() -> tuple[int, int]:
    from torch.nn.modules import module

    return len(module._global_forward_pre_hooks), len(module._global_forward_hooks)


def test_a_fit_leaves_the_record_and_no_global_hook(tmp_path: Path) -> None:
    from trainscope.integrations.lightning import Callback, Profiler

    before = _global_hooks()
    fit = _fit(tmp_path, profiler=Profiler(out=str(tmp_path / "run")), callbacks=[Callback()])
    s = summary(tmp_path / "run")
    assert s["status"] == "completed" and s["source"]["kind"] == "lightning"
    assert s["steps"] == fit.global_step == 12 and s["samples"] == 12 * 8  # type: ignore[attr-defined]
    assert s["model"] == "Tiny" and s["num_parameters"] == 10
    assert all(s["stages_s"][k] > 0 for k in ("data_wait", "forward", "backward",
                                               "optimizer", "evaluation"))  # fmt: skip
    assert len(s["first_losses"]) == 5
    assert _global_hooks() == before


def test_a_fit_that_raises_is_recorded_as_failed(tmp_path: Path) -> None:
    from trainscope.integrations.lightning import Callback, Profiler

    with pytest.raises(ValueError, match="planted failure"):
        _fit(tmp_path, fail_at=3, profiler=Profiler(out=str(tmp_path / "run")),
             callbacks=[Callback()])  # fmt: skip
    s = summary(tmp_path / "run")
    assert s["status"] == "failed" and "planted failure" in str(s["error"])
    assert s["steps"] == 3


def test_the_callback_alone_records_nothing_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainscope.integrations.lightning import Callback

    monkeypatch.chdir(tmp_path)  # where a record would go by default (runs/)
    with pytest.warns(UserWarning, match="needs Trainer\\(profiler="):
        _fit(tmp_path, callbacks=[Callback()])
    assert not (tmp_path / "runs").exists()


def test_lightnings_action_names_map_onto_the_stages() -> None:
    from trainscope.integrations.lightning import stage_of

    assert stage_of("[_TrainingEpochLoop].train_dataloader_next") == "data_wait"
    assert stage_of("[Strategy]DDPStrategy.backward") == "backward"
    assert stage_of("[LightningModule]Net.on_before_backward") is None
    assert stage_of("[Strategy]SingleDeviceStrategy.validation_step") == "evaluation"
    assert stage_of("[_EvaluationLoop].val_next") == "evaluation"
    assert stage_of("save_checkpoint") == "checkpoint"
    assert stage_of("[Strategy]SingleDeviceStrategy.training_step") is None  # the callback's
