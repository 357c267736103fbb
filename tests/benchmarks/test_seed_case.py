"""benchmarks/seed_case.py: the implied bandwidths reproduce the seed's gaps."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trainscope.comm.cost_model import given
from trainscope.comm.predict import predict

PATH = Path(__file__).parents[2] / "benchmarks" / "seed_case.py"


def load():
    spec = importlib.util.spec_from_file_location("seed_case", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["seed_case"] = module
    spec.loader.exec_module(module)
    return module


def test_the_implied_bandwidths_give_back_the_seed_gaps(capsys) -> None:
    seed = load()
    grads = seed.bert_base()
    assert grads.total == 4 * 109_483_778  # BertForSequenceClassification, 2 labels
    b1, b2 = seed.implied(grads, 4, 5e-6)
    p = {x.strategy: x.comm_s for x in predict(grads, 4, given(5e-6, b1, 4))}
    assert p["gather-scatter"] - p["allreduce"] == pytest.approx(3.73 - 0.84)
    p = {x.strategy: x.comm_s for x in predict(grads, 4, given(5e-6, b2, 4))}
    assert p["allreduce"] == pytest.approx(0.84 - 0.44)
    sys.argv = ["seed_case.py"]
    seed.main()
    out = capsys.readouterr().out
    assert "implies a link of 0.68 GB/s" in out and "pcie4-x16" in out
