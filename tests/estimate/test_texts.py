"""What ``estimate-memory`` says in words (issue 43): the K of "weights + gradients + K"
named, no communication allowance for a single process, and an arrow that Markdown and
LaTeX show as an arrow (no ``->`` that the Markdown writer turns into ``-&gt;``)."""

from __future__ import annotations

from trainscope.estimate import archs
from trainscope.estimate.core import Setup, dominant_line, estimate
from trainscope.estimate.render import estimate_table
from trainscope.estimate.states import per_parameter
from trainscope.util.textsafe import latex_escape, markdown_text


def test_per_parameter_says_what_k_is() -> None:
    amp = per_parameter("amp", "adam")
    assert amp.startswith("2 + 2 + 12 = 16 bytes per parameter")
    assert "K = the optimizer's states" in amp
    assert "4 for the fp32 master copy" in amp and "8 for Adam's two moments" in amp
    sgd = per_parameter("fp32", "sgd")
    assert sgd.startswith("4 + 4 + 4 = 12") and "4 for the momentum" in sgd
    assert "master copy" not in sgd  # fp32 keeps none


def _gpt2_xl(world_size: int) -> Setup:
    return Setup(archs.named("gpt2-xl"), world_size=world_size, precision="amp",
                 batch_size=1, seq_len=1024)  # fmt: skip


def test_one_process_has_no_communication_allowance() -> None:
    one = estimate(_gpt2_xl(1))
    for col in one.columns.values():
        assert col.components()["communication"] == 0
        assert not [a for a in col.allowances if a.kind == "communication"]
    rows = [r[0] for r in estimate_table(one).rows]
    assert "allowance: communication" not in rows and "allowance: temporaries" in rows
    eight = estimate(_gpt2_xl(8))  # several processes: DDP's buckets are there
    assert eight.columns["ddp"].components()["communication"] == 2 * 1_557_611_200


def test_the_dominant_line_has_an_arrow_every_format_shows() -> None:
    line = dominant_line(estimate(_gpt2_xl(8)))
    assert "->" not in line and "→" in line
    assert "&gt;" not in markdown_text(line) and "textgreater" not in latex_escape(line)
