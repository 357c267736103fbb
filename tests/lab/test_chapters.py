"""The lab's chapters: every question of the issue listed, --only, and the data a
chapter asks for."""

from __future__ import annotations

import pytest

from trainscope.errors import ConfigError
from trainscope.lab import chapters as lab_chapters
from trainscope.lab.chapters import CHAPTERS, parse_only


def test_every_chapter_of_the_issue_is_listed_and_only_picks_some() -> None:
    assert [c.number for c in CHAPTERS] == list(range(1, 13))
    assert [c.number for c in parse_only("5, 2,5")] == [2, 5]
    assert len(parse_only(None)) == 12
    for bad, message in (("2,x", "chapter numbers"), ("13", "no chapter 13"), (",", "at least")):
        with pytest.raises(ConfigError, match=message):
            parse_only(bad)


def test_a_chapter_that_needs_data_asks_for_it_by_its_folder() -> None:
    c = lab_chapters.chapter(3)
    assert c.data == ("tinyshakespeare",)
    argv = c.argv(True, "/d/")
    assert argv[:2] == ["study", "checkpointing"]
    assert argv[argv.index("--data-dir") + 1] == "/d/tinyshakespeare"
    lora = lab_chapters.chapter(8).argv(False, "/d")
    assert lora[:2] == ["study", "finetune"]
    assert lora[lora.index("--pretrained") + 1] == "/d/minilm-l6"
    assert lora[lora.index("--data-dir") + 1] == "/d/sst2"
    assert lab_chapters.chapter(8).data == ("sst2", "minilm-l6")


def test_every_chapter_is_measured_by_a_study_or_a_registered_maker() -> None:
    from trainscope import registry
    from trainscope.lab.makers import maker

    for c in CHAPTERS:
        assert (c.study is None) != (c.maker is None), c.number
        if c.maker is not None:
            assert callable(maker(c.maker).make) and callable(maker(c.maker).section)
        elif c.command == ():
            assert registry.report_builder(str(c.study)) is not None, c.number


def test_the_collectives_fit_feeds_the_chapter_that_predicts_with_it() -> None:
    sync = lab_chapters.chapter(9)
    assert sync.argv(True, None, "/lab/studies/10-collectives")[-2:] == [
        "--cost-model", "/lab/studies/10-collectives"]  # fmt: skip
    assert "--cost-model" not in sync.argv(True, None, None)
    assert lab_chapters.chapter(10).argv(True, None)[0] == "collectives"
