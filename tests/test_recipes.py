"""Each built-in workload's default recipe: filled in under every setting given, shown in
``run --help`` and written out in the saved config."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainscope.cli import main
from trainscope.config import BUILTIN_WORKLOADS, from_dict, load_yaml
from trainscope.recipes import DIGITS, GPT_CHAR, MNIST, recipe_for


def _train(name: str, options: dict | None = None, **sections: dict) -> tuple[dict, dict]:
    cfg = from_dict({"workload": {"name": name, "options": options or {}}, **sections})
    d = cfg.to_dict()
    return d["train"], d["data"]


def test_each_workload_trains_with_its_own_recipe() -> None:
    train, data = _train("mnist")
    assert (train["optimizer"], train["lr"], train["schedule"]) == ("adamw", 6e-3, "cosine")
    assert (train["warmup_steps"], train["epochs"], data["batch_size"]) == (100, 8, 64)
    train, data = _train("gpt-char")
    # nanoGPT's shakespeare_char settings.
    assert train["optimizer"] == "adamw" and train["lr"] == 1e-3
    assert train["betas"] == [0.9, 0.99] and train["weight_decay"] == 0.1
    assert (train["schedule"], train["warmup_steps"], train["min_lr_ratio"]) == ("cosine", 100, 0.1)
    assert train["grad_clip"] == 1.0 and data["batch_size"] == 64
    # text-cls: SGD at 0.05 stayed at chance on SST-2; AdamW with a linear warm-up.
    train, _ = _train("text-cls")
    assert (train["optimizer"], train["lr"], train["schedule"]) == ("adamw", 1e-3, "linear")
    train, _ = _train("text-cls", {"pretrained": "some/model"})
    assert train["lr"] == 5e-5
    train, _ = _train("text-cls", {"pretrained": "m", "lora_r": 8})
    assert train["lr"] == 5e-4


def test_digits_and_synthetic_get_a_stable_recipe_and_own_workloads_the_generic_defaults() -> None:
    digits, digits_data = _train("digits")
    assert (digits["optimizer"], digits["lr"], digits["momentum"]) == ("sgd", 0.02, 0.9)
    assert (digits["schedule"], digits["warmup_steps"], digits["weight_decay"]) == (
        "cosine",
        100,
        5e-4,
    )
    assert digits["epochs"] == 45 and digits_data["batch_size"] == 32
    synthetic, synthetic_data = _train("synthetic")
    # The same optimizer settings; the run's length stays the generic 30 epochs.
    assert {**synthetic, "epochs": 45} == digits and synthetic["epochs"] == 30
    assert synthetic_data == digits_data
    own, own_data = _train("mypkg.mod:make")
    assert (own["optimizer"], own["lr"], own["schedule"], own["weight_decay"]) == (
        "sgd",
        0.05,
        "constant",
        0.0,
    )
    assert own["epochs"] == 30 and own_data["batch_size"] == 32
    assert recipe_for("mypkg.mod:make", {}) is None


def test_any_setting_given_wins_over_the_recipe() -> None:
    train, data = _train("mnist", train={"lr": 0.01, "schedule": "constant"}, data={})
    assert (train["optimizer"], train["lr"], train["schedule"]) == ("adamw", 0.01, "constant")
    assert data["batch_size"] == 64
    _, data = _train("gpt-char", data={"batch_size": 8})
    assert data["batch_size"] == 8


def test_another_optimizer_drops_the_settings_tuned_for_the_recipes_own() -> None:
    generic, _ = _train("mypkg.mod:make")
    train, data = _train("text-cls", train={"optimizer": "sgd"})
    # SGD at AdamW's lr would barely move; the generic SGD settings apply instead.
    for key in ("lr", "momentum", "weight_decay", "betas"):
        assert train[key] == generic[key], key
    assert train["schedule"] == "linear" and data["batch_size"] == 32  # the rest stays
    train, _ = _train("gpt-char", train={"optimizer": "adam", "lr": 2e-3})
    assert train["lr"] == 2e-3 and train["betas"] is None and train["weight_decay"] == 0.0
    # muon over an AdamW recipe keeps it: AdamW trains everything Muon does not.
    train, _ = _train("gpt-char", train={"optimizer": "muon"})
    assert (train["lr"], train["betas"], train["weight_decay"]) == (1e-3, [0.9, 0.99], 0.1)
    train, _ = _train("digits", train={"optimizer": "muon"})
    assert train["lr"] == generic["lr"] and train["momentum"] == generic["momentum"]
    # ... and adamw over the cpu preset's muon recipe keeps its AdamW settings.
    train, data = _train("gpt-char", {"preset": "cpu"}, train={"optimizer": "adamw"})
    assert (train["lr"], train["betas"], train["weight_decay"]) == (1e-3, [0.9, 0.99], 0.1)
    assert train["max_steps_per_epoch"] == 600 and data["batch_size"] == 12


def test_the_cpu_preset_trains_with_the_recipe_its_time_to_target_study_found() -> None:
    train, data = _train("gpt-char", {"preset": "cpu"})
    assert (train["optimizer"], train["muon_lr"], train["lr"]) == ("muon", 0.03, 1e-3)
    assert (train["epochs"], train["max_steps_per_epoch"], data["batch_size"]) == (1, 600, 12)
    assert (train["schedule"], train["warmup_steps"], train["grad_clip"]) == ("cosine", 50, 1.0)


def test_a_saved_config_replays_unchanged() -> None:
    for name in BUILTIN_WORKLOADS:
        d = from_dict({"workload": {"name": name}}).to_dict()
        assert from_dict(d).to_dict() == d, name
    # A config written for SGD stays SGD when read back (nothing refilled by the recipe).
    d = from_dict({"workload": {"name": "mnist"}, "train": {"optimizer": "sgd"}}).to_dict()
    assert from_dict(d).to_dict()["train"]["lr"] == 0.05


def test_run_help_shows_every_workloads_recipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split("default recipes")[1].split())
    for name in BUILTIN_WORKLOADS:
        assert name in text, name
    assert "nanoGPT" in text and "time-to-target" in text and "Hugging Face" in text
    assert GPT_CHAR.title.split(":")[0] in text and MNIST.title[:20] in text
    assert DIGITS.title[:30] in text


def test_the_saved_config_of_a_run_holds_its_recipe(
    mnist_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["run", "--workload", "mnist", "--data-dir", str(mnist_dir), "--no-download"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "2", "--out", str(out), "-q"]
    assert main(argv) == 0
    saved = load_yaml(out / "config.yaml")
    assert saved["train"]["optimizer"] == "adamw" and saved["train"]["schedule"] == "cosine"
    assert saved["data"]["batch_size"] == 64
