"""GLUE TSV reading, the datasets fallback's errors, WordPiece tokenising and padded batches.

The TSV files are made here: SST-2-like sentences whose label is decided by one sentiment
word among neutral ones, and RTE-like pairs where sentence2 is a piece of sentence1
(entailment) or made of words sentence1 lacks (not_entailment). Nothing downloads.
"""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from trainscope.data.glue import (
    GLUE_TASKS,
    SPECIAL_TOKENS,
    GlueSplit,
    PadCollate,
    TokenizedDataset,
    find_split_file,
    glue_task,
    load_glue,
    read_glue_tsv,
)
from trainscope.errors import ConfigError, DataError

NEUTRAL = (
    "the a movie film plot actor story scene was is it this that and of with its very "
    "quite rather script music ending cast director"
).split()
POSITIVE = ("good", "great", "superb", "lovely")
NEGATIVE = ("bad", "awful", "dull", "poor")
OTHER = "red blue green tall short fast slow warm cold dry".split()  # never in sentence1


def sst2_rows(n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` (sentence, label) rows: label 1 iff the sentence holds a POSITIVE word.

    Some rows carry unbalanced double quotes, as real GLUE sentences do.
    """
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = rng.randint(0, 1)
        words = rng.choices(NEUTRAL, k=rng.randint(4, 12))
        words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
        if i % 7 == 0:
            words.insert(rng.randint(0, len(words)), '"')
        rows.append((" ".join(words), label))
    return rows


def write_sst2(folder: Path, n_train: int = 600, n_dev: int = 200, seed: int = 0) -> Path:
    """Write SST-2-format ``train.tsv`` and ``dev.tsv`` into ``folder``; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1)):
        lines = ["sentence\tlabel"] + [f"{t}\t{y}" for t, y in sst2_rows(n, s)]
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def rte_rows(n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` (sentence1, sentence2, label) rows with RTE's label words."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        s1 = rng.choices(NEUTRAL, k=rng.randint(6, 12))
        if rng.random() < 0.5:
            start = rng.randint(0, len(s1) - 3)
            s2, label = s1[start : start + rng.randint(2, 3)], "entailment"
        else:
            s2, label = rng.choices(OTHER, k=rng.randint(2, 4)), "not_entailment"
        rows.append((" ".join(s1), " ".join(s2), label))
    return rows


def write_rte(folder: Path, n_train: int = 200, n_dev: int = 50, seed: int = 0) -> Path:
    """Write RTE-format ``train.tsv`` and ``dev.tsv`` (index, sentence1, sentence2, label)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1)):
        lines = ["index\tsentence1\tsentence2\tlabel"]
        lines += [f"{i}\t{a}\t{b}\t{y}" for i, (a, b, y) in enumerate(rte_rows(n, s))]
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


# --------------------------------------------------------------------------- tasks


def test_task_names_are_spelt_loosely() -> None:
    assert glue_task("SST-2") is glue_task("sst2") is glue_task("Sst_2") is GLUE_TASKS["SST-2"]
    assert glue_task("rte").name == "RTE" and glue_task("RTE").is_pair
    assert glue_task("SST-2").num_labels == 2 and not glue_task("SST-2").is_pair
    with pytest.raises(ConfigError, match="unknown GLUE task 'nope'.*SST-2"):
        glue_task("nope")


# --------------------------------------------------------------------------- reading


def test_read_sst2_keeps_quotes_and_counts(tmp_path: Path) -> None:
    folder = write_sst2(tmp_path, n_train=100, n_dev=30)
    split = read_glue_tsv(folder / "train.tsv", GLUE_TASKS["SST-2"])
    rows = sst2_rows(100, 0)
    assert len(split) == 100 and split.texts_b is None
    assert split.texts_a == [t for t, _ in rows]
    assert split.labels == [y for _, y in rows]
    assert any('"' in t for t in split.texts_a)  # unbalanced quotes did not merge lines
    assert len(read_glue_tsv(folder / "train.tsv", GLUE_TASKS["SST-2"], limit=7)) == 7


def test_read_rte_pairs_and_label_words(tmp_path: Path) -> None:
    folder = write_rte(tmp_path, n_train=40, n_dev=10)
    split = read_glue_tsv(folder / "dev.tsv", GLUE_TASKS["RTE"])
    rows = rte_rows(10, 1)
    assert split.texts_a == [a for a, _, _ in rows]
    assert split.texts_b == [b for _, b, _ in rows]
    assert split.labels == [0 if y == "entailment" else 1 for _, _, y in rows]


@pytest.mark.parametrize(
    ("task", "header", "row", "expect"),
    [
        ("QNLI", "index\tquestion\tsentence\tlabel", "0\twho?\tme.\tnot_entailment", 1),
        (
            "MRPC",
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
            "1\t11\t12\tA cat sat .\tThe cat sat .",
            1,
        ),
    ],
)
def test_read_other_pair_tasks(
    tmp_path: Path, task: str, header: str, row: str, expect: int
) -> None:
    path = tmp_path / "dev.tsv"
    path.write_text(f"{header}\r\n{row}\r\n\r\n", encoding="utf-8")  # CRLF, trailing blank
    split = read_glue_tsv(path, GLUE_TASKS[task])
    assert split.labels == [expect] and split.texts_b is not None and len(split) == 1
    assert not split.texts_b[0].endswith("\r")


def test_split_files_are_found_flat_or_in_a_task_folder(tmp_path: Path) -> None:
    sst2 = GLUE_TASKS["SST-2"]
    flat = write_sst2(tmp_path / "flat", 10, 5)
    assert find_split_file(flat, sst2, "dev") == flat / "dev.tsv"
    nested = write_sst2(tmp_path / "glue" / "SST-2", 10, 5)
    assert find_split_file(tmp_path / "glue", sst2, "train") == nested / "train.tsv"
    lower = write_sst2(tmp_path / "hf" / "sst2", 10, 5)
    assert find_split_file(tmp_path / "hf", sst2, "train") == lower / "train.tsv"
    with pytest.raises(DataError, match=r"no dev.tsv found \(looked for .*glue.RTE.dev.tsv"):
        find_split_file(tmp_path / "glue", GLUE_TASKS["RTE"], "dev")
    with pytest.raises(DataError, match="does not exist"):
        find_split_file(tmp_path / "missing", sst2, "train")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sentence\tscore\nnice\t1\n", r"missing column\(s\) label \(header has sentence, score\)"),
        ("sentence\tlabel\nfine\t1\nnice\tpositive\n", r"train.tsv:3: unknown SST-2 label 'pos"),
        ("sentence\tlabel\nfine\t1\nfine\tstill\t1\n", r"train.tsv:3: expected 2 .* found 3"),
        ("sentence\tlabel\n\n", "no samples after the header"),
        ("", "missing column"),
    ],
)
def test_bad_files_give_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "train.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message) as info:
        read_glue_tsv(path, GLUE_TASKS["SST-2"])
    assert "\n" not in str(info.value)


def test_binary_or_unreadable_files_give_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "train.tsv"
    path.write_bytes(b"sentence\tlabel\n\xff\xfe\x00\x89 not text\t1\n")
    with pytest.raises(DataError, match=r"train\.tsv is not UTF-8 text") as info:
        read_glue_tsv(path, GLUE_TASKS["SST-2"])
    assert "\n" not in str(info.value)
    with pytest.raises(DataError, match=r"cannot read .*: Is a directory"):
        read_glue_tsv(tmp_path, GLUE_TASKS["SST-2"])


def test_a_byte_order_mark_does_not_rename_the_first_column(tmp_path: Path) -> None:
    path = tmp_path / "train.tsv"
    path.write_text("\ufeffsentence\tlabel\nfine\t1\n", encoding="utf-8")
    assert read_glue_tsv(path, GLUE_TASKS["SST-2"]).labels == [1]


def test_load_glue_from_a_folder_applies_the_limits(tmp_path: Path) -> None:
    folder = write_rte(tmp_path / "RTE", 40, 20)
    train, dev = load_glue(GLUE_TASKS["RTE"], tmp_path, train_limit=25, eval_limit=5)
    assert (len(train), len(dev)) == (25, 5)
    assert train.texts_b is not None and dev.texts_a[0] == rte_rows(20, 1)[0][0]
    assert folder.is_dir()


# --------------------------------------------------------------------------- datasets path


def test_without_a_folder_or_datasets_the_error_names_data_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(DataError, match="'datasets' package is not installed.*--data-dir") as e:
        load_glue(GLUE_TASKS["SST-2"], None)
    assert "\n" not in str(e.value)


def test_without_a_folder_and_downloading_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match="downloading is off: pass --data-dir"):
        load_glue(GLUE_TASKS["RTE"], None, download=False)


def _fake_datasets(load_dataset: object) -> types.ModuleType:
    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    return module


def test_datasets_failing_offline_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nmore detail")

    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(offline))
    with pytest.raises(DataError, match=r"offline\?\): ConnectionError: Couldn't reach") as e:
        load_glue(GLUE_TASKS["SST-2"], None)
    assert "\n" not in str(e.value) and "--data-dir" in str(e.value)


def test_datasets_columns_are_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def load_dataset(path: str, name: str) -> dict[str, dict[str, list]]:
        calls.append((path, name))
        split = {"sentence1": ["a b", "c d", "e"], "sentence2": ["a", "x", "e"], "label": [0, 1, 0]}
        return {"train": split, "validation": split}

    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(load_dataset))
    train, dev = load_glue(GLUE_TASKS["RTE"], None, eval_limit=2)
    assert calls == [("nyu-mll/glue", "rte")]
    assert train == GlueSplit(["a b", "c d", "e"], ["a", "x", "e"], [0, 1, 0])
    assert dev == GlueSplit(["a b", "c d"], ["a", "x"], [0, 1])


# --------------------------------------------------------------------------- tokenising


@pytest.fixture
def wordpiece():
    """A WordPiece tokenizer trained on 300 SST-2-like sentences (needs ``tokenizers``)."""
    pytest.importorskip("tokenizers")
    from trainscope.data.glue import train_wordpiece

    return train_wordpiece([t for t, _ in sst2_rows(300, 0)], vocab_size=500)


def test_trained_wordpiece_has_bert_specials_and_normalisation(wordpiece) -> None:
    assert [wordpiece.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert wordpiece.get_vocab_size() <= 500
    enc = wordpiece.encode("The GOOD Film")
    assert enc.tokens == ["[CLS]", "the", "good", "film", "[SEP]"]  # lower-cased
    assert wordpiece.encode("the film ☃").tokens[-2] == "[UNK]"  # a character never seen
    pair = wordpiece.encode("the good film", "a plot")
    assert pair.tokens.count("[SEP]") == 2 and pair.tokens[0] == "[CLS]"
    assert pair.type_ids == [0] * 5 + [1] * 3


def test_wordpiece_encoder_truncates_pairs_keeping_both(wordpiece) -> None:
    from trainscope.data.glue import WordPieceEncoder

    encoder = WordPieceEncoder(wordpiece)
    long_a = " ".join(["the movie"] * 20)
    ids, types_ = encoder.encode([long_a, "good"], ["a plot of the film", "bad"], 16)
    assert types_ is not None and len(ids[0]) == 16 and len(types_[0]) == 16
    assert ids[0][-1] == wordpiece.token_to_id("[SEP]") and 1 in types_[0]
    assert len(ids[1]) == 5  # [CLS] good [SEP] bad [SEP]: short rows are not padded
    no_types = WordPieceEncoder(wordpiece, token_types=False)
    assert no_types.encode(["good"], None, 16)[1] is None
    assert encoder.pad_id == 0 and encoder.vocab_size == wordpiece.get_vocab_size()


def test_encode_split_gives_id_lists_and_mean_length(wordpiece) -> None:
    from trainscope.data.glue import WordPieceEncoder, encode_split

    split = GlueSplit(["good film", "the bad plot was dull"], None, [1, 0])
    data = encode_split(WordPieceEncoder(wordpiece), split, 128)
    assert len(data) == 2
    ids, type_ids, label = data[1]
    assert isinstance(ids, list) and len(ids) == 7 and type_ids == [0] * 7 and label == 0
    assert data.mean_tokens == pytest.approx((4 + 7) / 2)


def test_the_trained_tokenizer_round_trips_through_json(wordpiece) -> None:
    from tokenizers import Tokenizer

    again = Tokenizer.from_str(json.dumps(json.loads(wordpiece.to_str())))
    assert (
        again.encode("the good film", "a plot").ids
        == wordpiece.encode("the good film", "a plot").ids
    )


@pytest.mark.slow  # starts two Python processes
@pytest.mark.timeout(180)
def test_wordpiece_training_is_the_same_in_every_process(tmp_path: Path) -> None:
    """Ranks of a multi-process run each train the tokenizer: they must agree on every id
    (tokenizers alone numbers some tokens in per-process hash order)."""
    pytest.importorskip("tokenizers")
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps([t for t, _ in sst2_rows(400, 3)]))
    script = (
        "import json, sys; from trainscope.data.glue import train_wordpiece; "
        "print(train_wordpiece(json.load(open(sys.argv[1])), 150).to_str())"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(texts)], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outputs[0] == outputs[1] and len(outputs[0]) > 1000


# --------------------------------------------------------------------------- batches


def test_pad_collate_pads_masks_and_truncates() -> None:
    batch = [([2, 10, 11, 3], [0, 0, 0, 0], 1), ([2, 12, 3], [0, 0, 0], 0), ([2, 3], [0, 0], 1)]
    inputs, labels = PadCollate(pad_id=0, max_length=128)(batch)
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert inputs["input_ids"].tolist() == [[2, 10, 11, 3], [2, 12, 3, 0], [2, 3, 0, 0]]
    assert inputs["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
    assert labels.dtype == torch.long and labels.tolist() == [1, 0, 1]
    assert all(t.dtype == torch.long for t in inputs.values())

    # Rows longer than max_length are cut; without type ids there is no such key.
    inputs, _ = PadCollate(pad_id=1, max_length=3)([([5] * 6, None, 0), ([5], None, 1)])
    assert set(inputs) == {"input_ids", "attention_mask"}
    assert inputs["input_ids"].tolist() == [[5, 5, 5], [5, 1, 1]]
    assert inputs["attention_mask"].sum(1).tolist() == [3, 1]


def test_pad_collate_pickles_for_worker_processes() -> None:
    collate = pickle.loads(pickle.dumps(PadCollate(pad_id=0, max_length=8)))
    inputs, labels = collate([([2, 3], None, 1)])
    assert inputs["input_ids"].shape == (1, 2) and labels.tolist() == [1]


def test_tokenized_dataset_checks_lengths() -> None:
    with pytest.raises(ValueError, match="one row per sample"):
        TokenizedDataset([[1, 2]], None, [0, 1])
    data = TokenizedDataset([[1, 2], [3]], [[0, 0], [0]], [0, 1])
    assert data[1] == ([3], [0], 1) and data.mean_tokens == 1.5
