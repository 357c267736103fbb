"""A finding of the doctor: what is wrong, the figures it rests on, what fixing it should
gain and how that was estimated, the fix as a command line, and a severity (torch-free)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscope.diagnosis.facts import RunFacts
from trainscope.injections import as_arguments, for_fix
from trainscope.records.source import COMMAND_KINDS
from trainscope.util.numfmt import fmt_sig
from trainscope.util.spread import Spread

SEVERITIES = ("major", "moderate", "minor")
MAJOR_SHARE = 0.25
"""An estimated saving of at least a quarter of the step (or of the run) is major."""
MODERATE_SHARE = 0.10
"""At least a tenth is moderate; less is minor (within what a noisy machine moves)."""


def severity_of(share: float | None, default: str = "moderate") -> str:
    """The severity of a finding that would save ``share`` of the time."""
    if share is None:
        return default
    return "major" if share >= MAJOR_SHARE else "moderate" if share >= MODERATE_SHARE else "minor"


def figure(name: str, sp: Spread, unit: str = "s", scale: float = 1.0) -> str:
    """``"data wait 1.2 ms (1.1–1.4, IQR, n=35)"``: a median with its spread and n."""
    if not sp.ok:
        return f"{name}: not recorded"
    unit_text = {"s": " s", "ms": " ms", "": "", "%": "%"}.get(unit, f" {unit}")
    med = fmt_sig(sp.median * scale)
    if sp.n < 2 or sp.low is None or sp.high is None:
        return f"{name} {med}{unit_text} (n={sp.n})"
    low, high = fmt_sig(sp.low * scale), fmt_sig(sp.high * scale)
    return f"{name} {med}{unit_text} ({low}–{high}, {sp.kind}, n={sp.n})"


def ms(sp: Spread, name: str) -> str:
    """A per-step figure in milliseconds."""
    return figure(name, sp, "ms", 1e3)


def pct(share: float) -> str:
    """0.4123 -> ``"41%"``."""
    return f"{100 * share:.0f}%"


@dataclass
class Finding:
    """One thing to fix."""

    rule: str
    severity: str
    problem: str
    """What is wrong, in one sentence."""
    evidence: list[str]
    """The recorded figures it rests on, each with its spread and n."""
    gain: str
    """The estimated gain and how it was estimated."""
    fix: dict[str, Any]
    """The flags to change (``{"--num-workers": "auto"}``); empty: no flag fixes it."""
    gain_share: float | None = None
    """The share of the step (or run) the fix is estimated to save: the ranking key."""
    numerics: bool = False
    """The fix changes what is computed (lr, batch size, precision): compare the loss too."""
    command: str = ""
    notes: list[str] = field(default_factory=list)
    measure: str = "step"
    """What the fix saves, and so what ``--apply`` compares: ``step`` (steady-state step
    time), ``wall`` (the run's wall time: evaluation, checkpoints, compile), ``memory``
    (the tensor bytes a step holds) or ``sample`` (step time per sample: a batch change)."""

    def as_dict(self) -> dict[str, Any]:
        """The finding as ``--json`` prints it."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "problem": self.problem,
            "evidence": list(self.evidence),
            "estimated_gain": self.gain,
            "estimated_share_saved": self.gain_share,
            "fix": {k: v for k, v in self.fix.items()},
            "fix_command": self.command,
            "changes_numerics": self.numerics,
            "measured_by": self.measure,
            "notes": list(self.notes),
        }


FIRST = ("measured-under-load",)
"""Findings that come before every other: they say the others rest on bad figures."""


def rank(findings: list[Finding]) -> list[Finding]:
    """Most important first: a run measured under other load, then by severity, then
    fixes that keep numerics before those that change them, then by the estimated
    saving."""
    return sorted(
        findings,
        key=lambda f: (f.rule not in FIRST, SEVERITIES.index(f.severity), f.numerics,
                       -(f.gain_share or 0.0), f.rule),
    )  # fmt: skip


def half_of_stage(
    f: RunFacts, rule: str, stage: str, label: str, problem: str, gain: str, fix: dict
) -> Finding:
    """A step stage the fix is credited with halving (an estimate, said so in ``gain``)."""
    share = f.share(stage) or 0.0
    return Finding(
        rule,
        severity_of(share / 2),
        problem,
        [ms(f.stages[stage], label), ms(f.step_s, "step")],
        gain,
        fix,
        gain_share=share / 2,
    )


# The config key each fix flag sets (what ``doctor --apply`` changes in the run's config).
FLAG_KEYS = {
    "--num-workers": "data.num_workers",
    "--drop-last": "data.drop_last",
    "--pin-memory": "data.pin_memory",
    "--batch-size": "data.batch_size",
    "--eval-every": "train.eval_every",
    "--checkpoint-every": "train.checkpoint_every",
    "--lr": "train.lr",
    "--grad-clip": "train.grad_clip",
    "--strategy": "dist.strategy",
    "--precision": "runtime.precision",
    "--threads": "runtime.threads",
    "--checkpointing": "runtime.checkpointing",
    "--optimizer-impl": "train.optimizer_impl",
    "--bucket-mb": "dist.bucket_mb",
}


def _value(text: Any) -> Any:
    """A flag's value as the config holds it ("0.002" -> 0.002, "false" -> False)."""
    if not isinstance(text, str):
        return text
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def overrides_of(fix: dict[str, Any]) -> dict[str, Any]:
    """The dotted config overrides a fix's flags stand for."""
    out: dict[str, Any] = {}
    for flag, value in fix.items():
        if flag == "--set":
            key, _, text = str(value).partition("=")
            out[key] = _value(text)
        else:
            out[FLAG_KEYS[flag]] = _value(value)
    return out


def fix_command(run_dir: Path, rule: str, fix: dict[str, Any]) -> str:
    """The run's own configuration with the changed flags, into a folder of its own."""
    if not fix:
        return ""
    out = run_dir.parent / f"{run_dir.name}-{rule}"
    args = ["trainscope", "run", "--config", str(run_dir / "config.yaml"), *fix_flags(fix)]
    return shlex.join([*args, "--out", str(out)])


# What each fix flag means in a script of one's own: the code change that does the same.
SCRIPT_CHANGES = {
    "--num-workers": "DataLoader(..., num_workers={v})",
    "--pin-memory": "DataLoader(..., pin_memory=True)",
    "--optimizer-impl": "the optimizer built with {v}=True (torch.optim.AdamW(..., {v}=True))",
    "--eval-every": "evaluate half as often",
    "--checkpoint-every": "save checkpoints a quarter as often",
    "--batch-size": "a batch size of {v} (and a learning rate to match)",
    "--precision": "torch.autocast(device_type, dtype=torch.{v_dtype}) around the forward and loss",
    "--checkpointing": "torch.utils.checkpoint around the model's blocks",
    "--compile": "model = torch.compile(model)",
    "--lr": "a learning rate of {v}",
    "--threads": "torch.set_num_threads({v}) (or trainscope profile --threads {v})",
}
_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def script_command(summary: dict[str, Any], run_dir: Path, rule: str,
                   fix: dict[str, Any]) -> str:  # fmt: skip
    """A fix to a script run as the same script re-profiled with ``--inject`` (from the
    folder it ran in, into a folder of its own); "" where a flag has no ``--inject`` key
    or the record does not say what ran."""
    injected = for_fix(fix)
    source = summary.get("source") if isinstance(summary.get("source"), dict) else {}
    argv, cwd = source.get("argv"), source.get("cwd")
    if not injected or not isinstance(argv, list) or not argv:
        return ""
    if source.get("kind") not in COMMAND_KINDS:  # ran inside Python: no command to re-run
        return ""
    given = source.get("injected") if isinstance(source.get("injected"), dict) else {}
    command = ["trainscope", "profile", "--out", str(run_dir.parent / f"{run_dir.name}-{rule}"),
               *as_arguments({**given, **injected})]  # fmt: skip
    words = [str(a) for a in argv]
    if words[0].startswith("-m "):  # a module: "-m NAME" as one word in the record
        words = ["-m", words[0][3:], *words[1:]]
    line = shlex.join([*command, "--", *words])
    return f"cd {shlex.quote(str(cwd))} && {line}" if isinstance(cwd, str) and cwd else line


def script_change(fix: dict[str, Any]) -> str:
    """A fix's flags as the change to make in a script (``trainscope profile`` runs have
    no config to add flags to)."""
    parts = []
    for flag, value in fix.items():
        text = SCRIPT_CHANGES.get(flag)
        if text is None:
            parts.append(f"the script's equivalent of {' '.join(fix_flags({flag: value}))}")
        else:
            parts.append(text.format(v=value, v_dtype=_DTYPES.get(str(value), value)))
    return "; ".join(parts)


def fix_flags(fix: dict[str, Any]) -> list[str]:
    """A fix as command-line arguments (``--pin-memory``, ``--num-workers auto``)."""
    args: list[str] = []
    for flag, value in fix.items():
        args += [flag] if value is True else [flag, str(value)]
    return args
