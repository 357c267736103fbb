"""GLUE sentence(-pair) classification data: TSV reader, tokenisers, padded batches.

The data come from the standard GLUE TSV files in a local folder (``DIR/train.tsv`` and
``DIR/dev.tsv``, or ``DIR/SST-2/train.tsv``), or through Hugging Face ``datasets`` when it
is installed and no folder is given. Texts are tokenised once, up front, into lists of
token ids; :class:`PadCollate` pads each batch to its longest row.

GLUE's test labels are hidden, so the dev set is the evaluation split.

``tokenizers`` and ``transformers`` are imported inside the functions that use them: this
module is importable (and its TSV reader usable) without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch.utils.data import Dataset

from trainscope.errors import ConfigError, DataError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The trained WordPiece tokenizer's special tokens, in id order ([PAD] is 0)."""


@dataclass(frozen=True)
class GlueTask:
    """Where one GLUE task's texts and labels live, in the TSV files and in ``datasets``."""

    name: str
    """Canonical name, also the folder name in the GLUE download (SST-2, RTE, ...)."""
    hf_config: str
    """The task's configuration name in the ``nyu-mll/glue`` data set (sst2, rte, ...)."""
    text_a: str
    """TSV column of the first (or only) text."""
    text_b: str | None
    """TSV column of the second text of a pair; None for single sentences."""
    labels: tuple[str, ...]
    """The label values as written in the TSV files, in class-id order."""
    label_names: tuple[str, ...]
    """Readable class names, in class-id order (the order ``datasets`` uses too)."""
    hf_text_a: str
    """Column of the first text in ``datasets``."""
    hf_text_b: str | None = None
    """Column of the second text in ``datasets``."""
    label_column: str = "label"
    """TSV column of the label."""

    @property
    def num_labels(self) -> int:
        """Number of classes."""
        return len(self.labels)

    @property
    def is_pair(self) -> bool:
        """Whether each sample is a pair of texts."""
        return self.text_b is not None


def _task(
    name: str,
    hf_config: str,
    texts: tuple[str, str | None],
    labels: tuple[str, ...],
    label_names: tuple[str, ...] | None = None,
    hf_texts: tuple[str, str | None] | None = None,
    label_column: str = "label",
) -> GlueTask:
    """A :class:`GlueTask` whose ``datasets`` text columns are its TSV ones unless
    ``hf_texts`` says otherwise, and whose class names are its label values unless
    ``label_names`` does."""
    hf_a, hf_b = hf_texts or texts
    return GlueTask(
        name, hf_config, *texts, labels, label_names or labels, hf_a, hf_b, label_column
    )


_ENTAILMENT = ("entailment", "not_entailment")

GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        _task("SST-2", "sst2", ("sentence", None), ("0", "1"), ("negative", "positive")),
        _task("RTE", "rte", ("sentence1", "sentence2"), _ENTAILMENT),
        _task("QNLI", "qnli", ("question", "sentence"), _ENTAILMENT),
        _task(
            "MRPC",
            "mrpc",
            ("#1 String", "#2 String"),
            ("0", "1"),
            ("not_equivalent", "equivalent"),
            hf_texts=("sentence1", "sentence2"),
            label_column="Quality",
        ),
    )
}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def glue_task(name: str) -> GlueTask:
    """The task called ``name``, spelt loosely (``SST-2``, ``sst2`` and ``sst-2`` all work)."""
    for task in GLUE_TASKS.values():
        if _key(name) in (_key(task.name), _key(task.hf_config)):
            return task
    raise ConfigError(f"unknown GLUE task {name!r}: choose one of {', '.join(GLUE_TASKS)}")


@dataclass
class GlueSplit:
    """One split as read: texts (a second text per row for pair tasks) and class ids."""

    texts_a: list[str]
    texts_b: list[str] | None
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


# --------------------------------------------------------------------------- reading


def find_split_file(data_dir: str | Path, task: GlueTask, split: str) -> Path:
    """``DIR/<split>.tsv``, or the same inside a task folder (``DIR/SST-2/<split>.tsv``)."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise DataError(f"GLUE {task.name}: data folder {root} does not exist")
    folders = [root] + [root / d for d in dict.fromkeys((task.name, task.hf_config))]
    for folder in folders:
        path = folder / f"{split}.tsv"
        if path.is_file():
            return path
    tried = ", ".join(str(f / f"{split}.tsv") for f in folders)
    raise DataError(f"GLUE {task.name}: no {split}.tsv found (looked for {tried})")


def read_glue_tsv(path: str | Path, task: GlueTask, *, limit: int | None = None) -> GlueSplit:
    """Read one GLUE TSV file (a header row, then one sample per line).

    Lines are split on tabs and nothing else: GLUE sentences contain unbalanced quotes, so
    a CSV reader with quoting would merge lines. ``limit`` keeps the first rows only.
    A file that cannot be read or is not UTF-8 text is a one-line DataError.
    """
    path = Path(path)
    try:
        return _read_tsv(path, task, limit)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({_first_line(exc)})") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or _first_line(exc)}") from None


def _read_tsv(path: Path, task: GlueTask, limit: int | None) -> GlueSplit:
    wanted = [c for c in (task.text_a, task.text_b, task.label_column) if c is not None]
    label_ids = {v: i for i, v in enumerate(task.labels)}
    texts_a: list[str] = []
    texts_b: list[str] = []
    labels: list[int] = []
    # utf-8-sig drops a byte-order mark some editors add, which would rename column one.
    with path.open(encoding="utf-8-sig", newline="") as f:
        header = f.readline().rstrip("\r\n").split("\t")
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DataError(
                f"{path}: not a GLUE {task.name} file: missing column(s) "
                f"{', '.join(missing)} (header has {', '.join(header) or 'nothing'})"
            )
        col = {c: header.index(c) for c in wanted}
        for lineno, line in enumerate(f, start=2):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != len(header):
                raise DataError(
                    f"{path}:{lineno}: expected {len(header)} tab-separated fields, "
                    f"found {len(fields)}"
                )
            label = fields[col[task.label_column]].strip()
            if label not in label_ids:
                raise DataError(
                    f"{path}:{lineno}: unknown {task.name} label {label!r} "
                    f"(expected one of {', '.join(task.labels)})"
                )
            labels.append(label_ids[label])
            texts_a.append(fields[col[task.text_a]])
            if task.text_b is not None:
                texts_b.append(fields[col[task.text_b]])
            if limit is not None and len(labels) >= limit:
                break
    if not labels:
        raise DataError(f"{path}: no samples after the header")
    return GlueSplit(texts_a, texts_b if task.is_pair else None, labels)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _from_datasets(task: GlueTask, limits: tuple[int | None, int | None]) -> list[GlueSplit]:
    """Train and dev splits through Hugging Face ``datasets`` (downloads on first use)."""
    hint = f"pass --data-dir DIR with the GLUE {task.name} TSVs (DIR/train.tsv, DIR/dev.tsv)"
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"GLUE {task.name}: no data folder given and the 'datasets' package is not "
            f"installed: {hint}"
        ) from None
    try:
        # "nyu-mll/glue" is the current home of the data set once called "glue".
        loaded = datasets.load_dataset("nyu-mll/glue", task.hf_config)
    except Exception as e:  # network, hub and cache errors all mean the same to the user
        raise DataError(
            f"cannot load GLUE {task.name} through datasets (offline?): {_first_line(e)}; {hint}"
        ) from None
    out = []
    for split, limit in zip(("train", "validation"), limits):
        rows = loaded[split]
        n = len(rows) if limit is None else min(limit, len(rows))
        labels = [int(v) for v in list(rows["label"])[:n]]
        if any(not 0 <= v < task.num_labels for v in labels):
            raise DataError(f"GLUE {task.name} {split}: labels outside 0..{task.num_labels - 1}")
        texts_b = list(rows[task.hf_text_b])[:n] if task.hf_text_b else None
        out.append(GlueSplit(list(rows[task.hf_text_a])[:n], texts_b, labels))
    return out


def load_glue(
    task: GlueTask,
    data_dir: str | Path | None,
    *,
    download: bool = True,
    train_limit: int | None = None,
    eval_limit: int | None = None,
) -> tuple[GlueSplit, GlueSplit]:
    """The (train, dev) splits of ``task``: from ``data_dir``'s TSVs, else ``datasets``.

    ``download=False`` refuses the ``datasets`` route, which may reach the network.
    """
    if data_dir is not None:
        train = read_glue_tsv(find_split_file(data_dir, task, "train"), task, limit=train_limit)
        dev = read_glue_tsv(find_split_file(data_dir, task, "dev"), task, limit=eval_limit)
        return train, dev
    if not download:
        raise DataError(
            f"GLUE {task.name}: no data folder given and downloading is off: pass --data-dir "
            f"DIR with the GLUE {task.name} TSVs (DIR/train.tsv, DIR/dev.tsv)"
        )
    train, dev = _from_datasets(task, (train_limit, eval_limit))
    return train, dev


# --------------------------------------------------------------------------- tokenising


def train_wordpiece(
    texts: Sequence[str], vocab_size: int = 8000, *, lowercase: bool = True
) -> Tokenizer:
    """A WordPiece tokenizer trained on ``texts``, normalised and split as BERT's is.

    BERT normalisation (lower-casing, accent stripping, Chinese characters split), BERT's
    pre-tokenizer, the special tokens of :data:`SPECIAL_TOKENS`, and the templates
    ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` (type ids 0 for A, 1 for B). Training on
    the task's own training split takes a second or two and needs no network.

    The result is the same in every process: every rank of a multi-process run trains its
    own copy and they must agree on every id.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing

    normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    # tokenizers' WordPiece trainer numbers the "##c" (word-inner character) tokens in hash
    # map order, which differs between processes, and breaks ties between equally frequent
    # merges by those numbers: two trainings on the same text can disagree
    # (huggingface/tokenizers#1794). Naming every "##c" up front, in sorted order, as an
    # extra special token fixes their ids, and with them every merge.
    alphabet = sorted(set(normalizer.normalize_str("\n".join(texts))) - set(" \t\n\r"))
    inner = [f"##{c}" for c in alphabet]
    trained = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trained.normalizer = normalizer
    trained.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, *inner], show_progress=False
    )
    trained.train_from_iterator(texts, trainer=trainer)

    # Rebuilt from the vocabulary so that only the five real special tokens are special
    # (the "##c" stay ordinary WordPiece entries, as in BERT's own vocabulary).
    tok = Tokenizer(models.WordPiece(trained.get_vocab(), unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tok


class TextEncoder(Protocol):
    """Turns texts (or pairs) into token ids; what :func:`encode_split` needs of a tokenizer."""

    pad_id: int
    vocab_size: int

    def encode(
        self, texts_a: Sequence[str], texts_b: Sequence[str] | None, max_length: int
    ) -> tuple[list[list[int]], list[list[int]] | None]:
        """Token ids per row (truncated to ``max_length``) and token type ids, if any."""
        ...


class WordPieceEncoder:
    """A :class:`TextEncoder` over a ``tokenizers.Tokenizer`` (e.g. from :func:`train_wordpiece`).

    ``token_types=False`` drops the segment ids (RoBERTa has no segment embeddings).
    """

    def __init__(self, tokenizer: Tokenizer, *, token_types: bool = True) -> None:
        self.tokenizer = tokenizer
        self.token_types = token_types
        pad = tokenizer.token_to_id("[PAD]")
        self.pad_id = 0 if pad is None else pad
        self.vocab_size = tokenizer.get_vocab_size()

    def encode(
        self, texts_a: Sequence[str], texts_b: Sequence[str] | None, max_length: int
    ) -> tuple[list[list[int]], list[list[int]] | None]:
        """Token ids per row (truncated to ``max_length``) and token type ids, if any."""
        # Longest-first truncation of a pair shortens the longer text, keeping both texts
        # and the final [SEP]; cutting the joined ids in the collate would drop sentence B.
        self.tokenizer.enable_truncation(max_length=max_length)
        inputs: list[Any] = list(texts_a) if texts_b is None else list(zip(texts_a, texts_b))
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets we do not use.
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        encodings = encode(inputs)
        ids = [e.ids for e in encodings]
        types = [e.type_ids for e in encodings] if self.token_types else None
        return ids, types


class PretrainedEncoder:
    """A :class:`TextEncoder` over a ``transformers`` tokenizer (``AutoTokenizer``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        pad = tokenizer.pad_token_id
        self.pad_id = 0 if pad is None else int(pad)
        self.vocab_size = len(tokenizer)

    def encode(
        self, texts_a: Sequence[str], texts_b: Sequence[str] | None, max_length: int
    ) -> tuple[list[list[int]], list[list[int]] | None]:
        """Token ids per row (truncated to ``max_length``) and token type ids, if any."""
        enc = self.tokenizer(
            list(texts_a),
            None if texts_b is None else list(texts_b),
            truncation=True,
            max_length=max_length,
        )
        # Tokenizers of models without segment embeddings (RoBERTa) return no type ids.
        return enc["input_ids"], enc.get("token_type_ids")


# --------------------------------------------------------------------------- batches


class TokenizedDataset(Dataset):
    """One split tokenised up front: sample ``i`` is ``(input_ids, token_type_ids, label)``.

    ``token_type_ids`` is None when the encoder gives none. Rows are plain lists of ints;
    :class:`PadCollate` turns a batch of them into padded tensors.
    """

    def __init__(
        self,
        input_ids: list[list[int]],
        token_type_ids: list[list[int]] | None,
        labels: Sequence[int],
    ) -> None:
        if len(input_ids) != len(labels) or (
            token_type_ids is not None and len(token_type_ids) != len(labels)
        ):
            raise ValueError("input_ids, token_type_ids and labels must have one row per sample")
        self.input_ids = input_ids
        self.token_type_ids = token_type_ids
        self.labels = list(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], list[int] | None, int]:
        types = None if self.token_type_ids is None else self.token_type_ids[i]
        return self.input_ids[i], types, self.labels[i]

    @property
    def mean_tokens(self) -> float:
        """Mean tokens per sample (special tokens included, padding not)."""
        return sum(map(len, self.input_ids)) / max(len(self.input_ids), 1)


def encode_split(encoder: TextEncoder, split: GlueSplit, max_length: int) -> TokenizedDataset:
    """Tokenise a whole split at once (batched: the Rust tokenizers run in parallel)."""
    ids, types = encoder.encode(split.texts_a, split.texts_b, max_length)
    return TokenizedDataset(ids, types, split.labels)


class PadCollate:
    """DataLoader collate: pad a batch to its longest row (at most ``max_length`` tokens).

    Returns ``({"input_ids", "attention_mask"[, "token_type_ids"]}, labels)``, all int64;
    the mask is 1 on real tokens and 0 on padding. A class rather than a closure so that
    DataLoader workers started with ``spawn`` can pickle it.
    """

    def __init__(self, pad_id: int, max_length: int) -> None:
        self.pad_id = pad_id
        self.max_length = max_length

    def __call__(
        self, batch: Sequence[tuple[Sequence[int], Sequence[int] | None, int]]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        width = min(max(len(ids) for ids, _, _ in batch), self.max_length)
        n = len(batch)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        with_types = batch[0][1] is not None
        types = torch.zeros((n, width), dtype=torch.long) if with_types else None
        for row, (ids, type_ids, _) in enumerate(batch):
            k = min(len(ids), width)
            input_ids[row, :k] = torch.as_tensor(ids[:k], dtype=torch.long)
            mask[row, :k] = 1
            if types is not None and type_ids is not None:
                types[row, :k] = torch.as_tensor(type_ids[:k], dtype=torch.long)
        inputs = {"input_ids": input_ids, "attention_mask": mask}
        if types is not None:
            inputs["token_type_ids"] = types
        labels = torch.tensor([label for _, _, label in batch], dtype=torch.long)
        return inputs, labels
