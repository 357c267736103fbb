"""``trainscope profile`` on scripts the tests write: the stages each script plants are
found where they were planted, steps are optimizer steps (accumulation, two optimizers),
and the record says how each script ended."""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.script.helpers import PLANTED, PLANTED_S, profile, steps, summary, write

PLAIN = """
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x, y = torch.randn(96, 5), torch.randint(0, 2, (96,))
model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
print("ran as", __name__, sys.argv[1:])
"""


def test_planted_stage_times_are_found_where_they_were_planted(here: Path) -> None:
    script = write(here, "planted.py", PLANTED.format(**PLANTED_S))
    assert profile("-q", "--out", "run", "--", str(script)) == 0
    s = summary(here / "run")
    n = PLANTED_S["steps"]
    got = s["stages_s"]
    for stage, key in (("data_wait", "data"), ("forward", "forward"),
                       ("backward", "backward"), ("optimizer", "optimizer")):  # fmt: skip
        floor = n * PLANTED_S[key]
        # The sleeps are floors of the totals. What instrumentation adds is small beside
        # them: judged on the median step, as a first call's one-off cost (lazy imports,
        # slower still on a loaded machine) is the stage's, not the hooks'.
        assert floor <= got[stage], (stage, got[stage], floor)
        median = statistics.median(r["stages"][stage] for r in steps(here / "run"))
        assert median <= 1.5 * PLANTED_S[key] + scaled(0.005), (stage, median)
    evals = 2 * PLANTED_S["eval"]
    assert evals <= got["evaluation"] <= 1.5 * evals + scaled(0.1)
    assert got["other"] >= n * PLANTED_S["other"]
    assert got["checkpoint"] > 0
    assert sum(got.values()) == pytest.approx(s["wall_time_s"])
    assert s["steps"] == n and s["samples"] == 4 * n
    for record in steps(here / "run"):
        # A step runs from the end of the one before: the script's sleep after a step is
        # in the next step's other.
        assert record["stages"]["other"] >= PLANTED_S["other"] * 0.99 or record["step"] == 1
        assert record["batch_size"] == 4


def test_the_script_runs_as_python_runs_it(here: Path, capsys: pytest.CaptureFixture) -> None:
    script = write(here, "plain.py", PLAIN)
    assert profile("-q", "--out", "run", str(script), "--lr", "3") == 0
    assert "ran as __main__ ['--lr', '3']" in capsys.readouterr().out
    s = summary(here / "run")
    assert s["status"] == "completed"
    assert s["source"]["kind"] == "script"
    assert s["source"]["argv"] == [str(script), "--lr", "3"]
    assert len(s["source"]["sha256"]) == 64
    assert s["steps"] == 24 and s["samples"] == 192
    assert s["loader"] == "torch" and s["num_workers"] == 0
    assert s["model"] == "Sequential" and s["precision"] == "fp32"
    assert s["memory"]["parameters_bytes"] == (5 * 16 + 16 + 16 * 2 + 2) * 4
    assert s["memory"]["optimizer_states_bytes"] > 0
    assert s["script"]["optimizer_steps"] == {"0: Adam": 24}
    assert s["first_losses"] and all(isinstance(v, float) for v in s["first_losses"])
    assert (here / "run" / "system.jsonl").is_file() and (here / "run" / "env.json").is_file()


def test_gradient_accumulation_is_one_step_of_several_micro_batches(here: Path) -> None:
    script = write(
        here,
        "accum.py",
        """
        import torch
        from torch import nn
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(6):
            for micro in range(4):
                loss = model(torch.randn(8, 4)).pow(2).mean() / 4
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["steps"] == 6 and s["samples"] == 6 * 4 * 8
    records = steps(here / "run")
    assert [r["micro_batches"] for r in records] == [4] * 6
    assert all(r["batch_size"] == 32 for r in records)


def test_a_schedulers_step_is_the_optimizers_but_its_first_is_setup(here: Path) -> None:
    script = write(
        here,
        "sched.py",
        """
        import time
        import torch
        from torch import nn
        def factor(epoch):
            time.sleep(0.02)  # the schedule's own arithmetic, planted
            return 0.9 ** epoch
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)  # steps once: set-up
        time.sleep(0.05)  # more set-up
        for step in range(5):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            sched.step()
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["steps"] == 5
    assert s["stages_s"]["setup"] >= 0.07  # the constructor's step did not end set-up
    assert s["stages_s"]["optimizer"] >= 5 * 0.02
    assert s["stages_s"]["other"] < 0.02 + scaled(0.05)  # no scheduler step left in it


def test_a_closures_own_code_is_other_and_the_optimizer_keeps_its_update(here: Path) -> None:
    """Lightning and LBFGS: forward and backward run inside ``step(closure)``; the
    closure's own code (Lightning's training_step bookkeeping) is the script's, not the
    optimizer's, and the gradients it makes are counted."""
    script = write(
        here,
        "closure.py",
        """
        import time
        import torch
        from torch import nn
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # SGD.step hooked
        class SlowUpdate(torch.optim.SGD):
            def step(self, closure=None):
                loss = closure()
                time.sleep(0.01)  # the update itself
                super().step()
                return loss
        model = nn.Linear(4, 1)
        opt = SlowUpdate(model.parameters(), lr=0.01)
        def closure():
            time.sleep(0.03)  # logging, metrics: the closure's own code
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            return loss
        for step in range(4):
            opt.step(closure)
        for step in range(2):
            opt.step(closure=closure)
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    got = s["stages_s"]
    assert s["steps"] == 6
    assert 6 * 0.01 <= got["optimizer"] < 6 * 0.03  # the update, not the closure's sleep
    assert got["other"] >= 6 * 0.03
    assert got["forward"] > 0 and got["backward"] > 0
    assert s["memory"]["gradients_bytes"] == 5 * 4  # made inside the closure
    for record in steps(here / "run"):
        assert record["stages"]["other"] >= 0.03 * 0.99


def test_two_optimizers_a_gan_loop_counts_iterations(here: Path) -> None:
    script = write(
        here,
        "gan.py",
        """
        import torch
        from torch import nn
        G, D = nn.Linear(3, 5), nn.Linear(5, 1)
        opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
        for it in range(5):
            real, z = torch.randn(16, 5), torch.randn(16, 3)
            d_loss = D(real).mean() - D(G(z).detach()).mean()
            opt_d.zero_grad(); d_loss.backward(); opt_d.step()
            g_loss = -D(G(z)).mean()
            opt_g.zero_grad(); g_loss.backward(); opt_g.step()
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["steps"] == 5
    assert s["script"]["optimizer_steps"] == {"0: Adam": 5, "1: Adam": 5}
    assert s["script"]["models"] == ["Linear", "Linear"]


def test_steps_ends_the_script_cleanly(here: Path) -> None:
    script = write(here, "plain.py", PLAIN)
    assert profile("-q", "--out", "run", "--steps", "5", str(script)) == 0
    s = summary(here / "run")
    assert s["status"] == "completed" and s["steps"] == 5
    assert any("--steps 5" in n for n in s["notes"])


def test_a_script_that_never_steps_says_no_training_step_was_seen(here: Path) -> None:
    script = write(
        here,
        "eval_only.py",
        """
        import torch
        from torch import nn
        model = nn.Linear(3, 3).eval()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(2, 3))
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["status"] == "completed" and s["steps"] == 0
    assert any("no training step seen" in n for n in s["notes"])
    assert s["stages_s"]["evaluation"] > 0


def test_the_exit_code_is_the_scripts(here: Path) -> None:
    script = write(here, "three.py", "import sys\nsys.exit(3)\n")
    assert profile("-q", "--out", "run", str(script)) == 3
    s = summary(here / "run")
    assert s["status"] == "failed" and "exited with code 3" in s["error"]
    write(here, "zero.py", "import sys\nsys.exit(0)\n")
    assert profile("-q", "--out", "run0", "zero.py") == 0
    assert summary(here / "run0")["status"] == "completed"


def test_an_exception_is_the_scripts_traceback_and_a_failed_record(
    here: Path, capsys: pytest.CaptureFixture
) -> None:
    script = write(
        here,
        "boom.py",
        """
        import torch
        def explode():
            raise ValueError("bad batch")
        x = torch.zeros(2)
        explode()
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and 'boom.py", line 5' in err and "ValueError: bad batch" in err
    assert "trainscope/script" not in err and "trainscope/cli" not in err
    s = summary(here / "run")
    assert s["status"] == "failed" and s["error"].startswith("ValueError: bad batch")


@pytest.mark.parametrize(
    "make, expect",
    [
        (lambda d: d / "missing.py", "no such file"),
        (lambda d: d, "a directory"),
        (lambda d: write(d, "notes.txt", "this is not python at all ("), "not a Python script"),
        (
            lambda d: (d / "blob.py").write_bytes(b"\x00\x01\xff") and d / "blob.py",
            "not a Python script",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_run_folder(
    here: Path, capsys: pytest.CaptureFixture, make, expect: str
) -> None:
    target = make(here)
    assert profile("--out", "run", str(target)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expect in err[0], err
    assert not (here / "run").exists()


def test_no_script_and_bad_numbers_are_refused(here: Path, capsys: pytest.CaptureFixture) -> None:
    assert profile("--out", "run") == 2
    assert "needs a script" in capsys.readouterr().err
    write(here, "plain.py", PLAIN)
    assert profile("--steps", "0", "plain.py") == 2
    assert "--steps must be at least 1" in capsys.readouterr().err


def test_a_module_runs_as_python_m_runs_it(here: Path, capsys: pytest.CaptureFixture) -> None:
    pkg = here / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write(pkg, "train.py", PLAIN)
    assert profile("-q", "--out", "run", "-m", "mypkg.train", "--x") == 0
    assert "ran as __main__ ['--x']" in capsys.readouterr().out
    s = summary(here / "run")
    assert s["source"]["kind"] == "module" and s["source"]["module"] == "mypkg.train"
    assert profile("--out", "run2", "-m", "no_such_module_here") == 2


def test_evaluation_and_checkpoints_are_their_own_stages(here: Path) -> None:
    script = write(
        here,
        "evals.py",
        """
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
        for epoch in range(2):
            model.train()
            for x, y in DataLoader(data, batch_size=10):
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step(); opt.zero_grad()
            model.eval()
            for x, y in DataLoader(data, batch_size=20):  # no no_grad(): eval mode says it
                model(x)
            torch.save(model.state_dict(), f"ckpt{epoch}.pt")
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["steps"] == 8 and s["samples"] == 80  # the evaluation batches are not samples
    assert s["stages_s"]["evaluation"] > 0 and s["stages_s"]["checkpoint"] > 0
    loaders = s["script"]["loaders"]
    assert [x["training"] for x in loaders] == [True, False, True, False]
    assert (here / "ckpt1.pt").is_file()  # what the script writes is its own


def test_a_training_batch_fetched_before_model_train_is_still_training(here: Path) -> None:
    """As Hugging Face's Trainer does: after an evaluation the next training batch is
    fetched while the model is still in eval mode, and model.train() comes after."""
    script = write(
        here,
        "late_train.py",
        """
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        train = DataLoader(TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,))),
                           batch_size=8)
        held_out = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))),
                              batch_size=16)
        for epoch in range(2):
            for x, y in train:  # the batch after an evaluation: fetched in eval mode
                model.train()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step(); opt.zero_grad()
                model.eval()
                for hx, hy in held_out:
                    model(hx)
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["steps"] == 12 and s["samples"] == 12 * 8
    records = steps(here / "run")
    assert [r["batch_size"] for r in records] == [8] * 12
    # each step waited for its batch: not an evaluation's wait
    assert all(r["stages"]["data_wait"] > 0 for r in records)
    assert [x["training"] for x in s["script"]["loaders"]] == [True, False]


def test_a_script_that_changes_directory_and_uses_workers(here: Path) -> None:
    (here / "elsewhere").mkdir()
    script = write(
        here,
        "moves.py",
        """
        import os
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        os.chdir("elsewhere")
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
        if __name__ == "__main__":
            for x, y in DataLoader(data, batch_size=8, num_workers=2):
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step(); opt.zero_grad()
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["steps"] == 4 and s["num_workers"] == 2
    assert not (here / "elsewhere" / "run").exists()


def test_the_python_api_measures_a_block(here: Path) -> None:
    import torch
    from torch import nn

    import trainscope

    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trainscope.profile(out="nb", steps=3) as session:
        for _ in range(10):
            model(torch.randn(4, 3)).sum().backward()
            opt.step()
            opt.zero_grad()
    s = session.summary
    assert s["steps"] == 3 and s["status"] == "completed"
    assert s["source"]["kind"] == "python"
    assert json.loads((here / "nb" / "summary.json").read_text())["steps"] == 3
    # The hooks are gone: training after the block is not measured.
    from torch.nn.modules import module as nn_module

    assert not nn_module._global_forward_pre_hooks


def test_a_compiled_model_is_measured_and_its_graph_left_alone(
    here: Path, capsys: pytest.CaptureFixture
) -> None:
    script = write(
        here,
        "compiled.py",
        """
        import torch
        from torch import nn
        from torch._dynamo.utils import counters
        counters.clear()  # this test process may have compiled before
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        fast = torch.compile(model, backend="eager")  # dynamo's tracing, no inductor
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(4):
            fast(torch.randn(3, 4)).sum().backward()
            opt.step(); opt.zero_grad()
        # The hooks must not break the graph: each module of the model in a graph of its
        # own (torch.compiler.disable'd hooks did that) is a model not compiled at all.
        print("graph breaks", sum(counters["graph_break"].values()))
        print("graphs", counters["stats"]["unique_graphs"])
    """,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert profile("-q", "--out", "run", str(script)) == 0
    out = capsys.readouterr().out
    assert "graph breaks 0" in out and "graphs 1" in out
    # torch's warning about global hooks on a compiled module is about trainscope's
    # hooks, not the script's: it is kept from the script's output.
    assert not [w for w in caught if "global hooks" in str(w.message)]
    s = summary(here / "run")
    assert s["status"] == "completed" and s["steps"] == 4
    assert s["stages_s"]["forward"] > 0 and s["memory"]["parameters_bytes"] == (40 + 9) * 4


def test_a_model_compiled_in_place_is_seen_and_put_back(here: Path) -> None:
    """``module.compile()`` compiles the module's whole call, hooks and all: its forward
    is seen through its compiled call, wrapped for the run and put back after it."""
    import torch
    from torch import nn
    from torch._dynamo.utils import counters

    import trainscope

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with trainscope.profile(out=str(here / "run")) as session:
        model.compile(backend="eager")
        for step in range(1, 6):
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            if step == 2:  # the memory probe's step may recompile once; none after it
                after_probe = sum(counters["graph_break"].values())
        assert sum(counters["graph_break"].values()) == after_probe
    s = session.summary  # type: ignore[attr-defined]
    assert s["steps"] == 5 and s["model"] == "Sequential"
    assert s["stages_s"]["forward"] > 0 and s["memory"]["parameters_bytes"] == (40 + 9) * 4
    # put back as module.compile() left it: no trainscope frame in the module's call
    assert "trainscope" not in (model._compiled_call_impl.__code__.co_filename or "")


@pytest.mark.gpu
def test_on_cuda_stages_are_cuda_events_and_each_has_its_peak(here: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    script = write(
        here,
        "cuda.py",
        """
        import torch
        from torch import nn
        model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(20):
            x = torch.randn(512, 256, device="cuda")
            model(x).square().mean().backward()
            opt.step(); opt.zero_grad()
    """,
    )
    assert profile("-q", "--out", "run", str(script)) == 0
    s = summary(here / "run")
    assert s["timing_mode"] == "cuda_events" and s["device"].startswith("cuda")
    assert s["steps"] == 20 and s["stages_s"]["forward"] > 0
    peaks = s["memory"]["cuda"]["stage_peak_allocated_bytes"]
    assert {"forward", "backward", "optimizer"} <= set(peaks)
    assert s["peak_memory_kind"] == "cuda_max_allocated"
