"""A Hugging Face ``Trainer``: pretrained MiniLM-L6 fine-tuned on GLUE SST-2, offline.

Nothing here knows about trainscope. The model and tokenizer are read from a local
folder (``--model``, the shared ``minilm-l6`` copy by default) and the sentences from
SST-2's GLUE TSV files (``--data``), so with ``HF_HUB_OFFLINE=1`` nothing is downloaded.
A few dozen optimizer steps of AdamW, an evaluation on part of the dev set every
``--eval-every`` steps, and a checkpoint (``save_strategy="steps"``) at the same steps;
``report_to="none"``. About 40 s on a 2-core CPU.

Run it as a plain script, then measured, unchanged::

    HF_HUB_OFFLINE=1 python examples/profile/hf_trainer.py
    HF_HUB_OFFLINE=1 trainscope profile --out runs/hf -- examples/profile/hf_trainer.py
    trainscope report runs/hf && trainscope doctor runs/hf

The last line it prints is ``optimizer steps (state.global_step): N``: the count
trainscope's ``steps`` must equal.

``--trainscope-out DIR`` measures the same run from inside: the Trainer gets
trainscope's ``TrainerCallback`` (``trainscope.integrations.hf``), which writes the same
record to DIR (the one place this script names trainscope).
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
from pathlib import Path
from typing import Any

# Before transformers is imported: it reads these once. Offline, whatever the caller set.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

# The shared data folder beside the checkout (examples/profile/ -> ../../../shared/data).
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=SHARED / "minilm-l6")
    p.add_argument("--data", type=Path, default=SHARED / "sst2", help="train.tsv and dev.tsv")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (max_steps)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=15, help="steps between evals and saves")
    p.add_argument("--eval-rows", type=int, default=128, help="dev sentences evaluated")
    p.add_argument("--max-length", type=int, default=64, help="tokens per sentence at most")
    p.add_argument(
        "--out", type=Path, default=None, help="Trainer's output_dir (default: a temporary one)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--trainscope-out",
        type=Path,
        default=None,
        help="record the run with trainscope's TrainerCallback into DIR",
    )
    return p.parse_args()


class Sentences(torch.utils.data.Dataset):
    """GLUE TSV rows (``sentence<TAB>label``), tokenized once; padding is the collator's."""

    def __init__(self, path: Path, tokenizer: Any, max_length: int, rows: int | None) -> None:
        with path.open(newline="") as f:
            reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            data = [(r["sentence"], int(r["label"])) for _, r in zip(range(rows or 10**9), reader)]
        enc = tokenizer([s for s, _ in data], truncation=True, max_length=max_length)
        pairs = zip(enc["input_ids"], enc["attention_mask"], data)
        self.items = [{"input_ids": ids, "attention_mask": mask, "labels": label}
                      for ids, mask, (_, label) in pairs]  # fmt: skip

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def accuracy(pred: Any) -> dict[str, float]:
    """Dev accuracy from the Trainer's logits and labels."""
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


def fine_tune(args: argparse.Namespace, out: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    set_seed(args.seed)  # before the classifier head is initialised: runs repeat exactly
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    # Only as many training rows as the steps use: tokenizing all 67,349 takes longer.
    train = Sentences(args.data / "train.tsv", tokenizer, args.max_length,
                      rows=args.steps * args.batch_size)  # fmt: skip
    dev = Sentences(args.data / "dev.tsv", tokenizer, args.max_length, rows=args.eval_rows)
    training = TrainingArguments(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64, learning_rate=1e-4, warmup_steps=0,
        eval_strategy="steps", eval_steps=args.eval_every,
        save_strategy="steps", save_steps=args.eval_every, save_total_limit=1,
        logging_steps=10, report_to="none", use_cpu=True, seed=args.seed,
        dataloader_pin_memory=False, disable_tqdm=True,
    )  # fmt: skip
    callbacks = []
    if args.trainscope_out is not None:  # imported only when asked for
        from trainscope.integrations.hf import Callback

        callbacks.append(Callback(out=str(args.trainscope_out)))
    trainer = Trainer(
        model=model, args=training, train_dataset=train, eval_dataset=dev,
        data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy,
        callbacks=callbacks,
    )  # fmt: skip
    trainer.train()
    print(f"optimizer steps (state.global_step): {trainer.state.global_step}")


def main() -> None:
    args = parse_args()
    if args.out is not None:
        fine_tune(args, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="hf_trainer-") as tmp:
        fine_tune(args, Path(tmp))


if __name__ == "__main__":
    main()
