"""Which assistant turns train: all of them, the last one, or those whose message's `weight` / `train` says so; and
the counts a report needs to compare the choice with training every turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TrainingFeatures
from hf_chat_templates.errors import UsageError
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import CONVERSATIONS, GOOD, marked

TWO_TURNS = CONVERSATIONS[1]


def trained_text(folder: Path, record: dict[str, Any], **options: Any) -> str:
    from transformers import AutoTokenizer

    columns, problems = TrainingFeatures(folder, **options).features([record])
    assert problems == []
    tok = AutoTokenizer.from_pretrained(str(folder))
    return tok.decode([label for label in columns["labels"][0] if label != IGNORE_INDEX])


def weighted(*weights: dict[str, Any]) -> dict[str, Any]:
    """TWO_TURNS with the keys in `weights` set on its two assistant messages, in order."""
    answers = iter(weights)
    return {"messages": [{**m, **next(answers)} if m["role"] == "assistant" else m for m in TWO_TURNS["messages"]]}


def test_all_trains_every_assistant_turn(good: Path) -> None:
    assert trained_text(good, TWO_TURNS) == "Yes<|im_end|>Also yes<|im_end|>"


def test_last_masks_the_earlier_assistant_turns(good: Path) -> None:
    assert trained_text(good, TWO_TURNS, train_on="last") == "Also yes<|im_end|>"


def test_last_with_hand_written_generation_markers(good: Path) -> None:
    assert trained_text(good, TWO_TURNS, template=marked(False, True), train_on="last") == "Also yes<|im_end|>"


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        (({"weight": 0}, {"weight": 1}), "Also yes<|im_end|>"),
        (({"weight": 1}, {"weight": 0.0}), "Yes<|im_end|>"),
        (({"train": False}, {}), "Also yes<|im_end|>"),
        (({}, {}), "Yes<|im_end|>Also yes<|im_end|>"),
        (({"weight": 1, "train": True}, {"train": False}), "Yes<|im_end|>"),
    ],
)
def test_weighted_trains_the_turns_whose_message_says_so(good: Path, weights: tuple, expected: str) -> None:
    assert trained_text(good, weighted(*weights), train_on="weighted") == expected
    assert trained_text(good, weighted(*weights), template=marked(False, True), train_on="weighted") == expected


def test_the_weight_keys_do_not_change_the_ids(good: Path) -> None:
    plain = TrainingFeatures(good).features([TWO_TURNS])[0]["input_ids"]
    for train_on in ("all", "weighted"):
        with_keys = TrainingFeatures(good, train_on=train_on).features([weighted({"weight": 0}, {"train": True})])
        assert with_keys[0]["input_ids"] == plain


def test_weighted_takes_the_keys_off_before_rendering(good: Path) -> None:
    from transformers import AutoTokenizer

    writes_messages = GOOD.replace("{{- m.content -}}", "{{- m | tojson -}}")
    tok = AutoTokenizer.from_pretrained(str(good))
    record = weighted({"weight": 0}, {"weight": 1})
    for train_on, shown in (("weighted", False), ("all", True)):
        ids = TrainingFeatures(good, template=writes_messages, train_on=train_on).features([record])[0]["input_ids"]
        assert ('"weight"' in tok.decode(ids[0])) is shown


@pytest.mark.parametrize(
    ("weights", "why"),
    [
        (({"weight": 0}, {"weight": 0}), "no assistant turn to train (train_on=weighted)"),
        (({"weight": 0.5}, {}), "message 2: weight 0.5 is not 0 or 1"),
        (({"train": "yes"}, {}), "message 2: train 'yes' is not true or false"),
        (({"weight": 1, "train": False}, {}), "message 2: weight 1 and train False disagree"),
    ],
)
def test_weighted_reports_records_it_cannot_train(good: Path, weights: tuple, why: str) -> None:
    columns, problems = TrainingFeatures(good, train_on="weighted").features([weighted(*weights), TWO_TURNS])
    assert problems == [(0, why)]
    assert len(columns["input_ids"]) == 1


def test_generation_markers_that_do_not_match_the_assistant_messages_are_reported(good: Path) -> None:
    no_marker_on_the_last = {"messages": [*TWO_TURNS["messages"][:-1], {"role": "assistant", "content": ""}]}
    features = TrainingFeatures(good, template=marked(False, False), train_on="last")
    _, problems = features.features([no_marker_on_the_last])
    assert problems == [
        (0, "its 1 {% generation %} span(s) cannot be matched to its 2 assistant message(s) for train_on=last")
    ]


def test_the_stats_say_what_train_on_all_would_train(good: Path) -> None:
    records = [TWO_TURNS, CONVERSATIONS[0], weighted({"weight": 0}, {"weight": 0})]
    every = TrainingFeatures(good).batch_table(*TrainingFeatures(good).render_batch(records))[2]
    last = TrainingFeatures(good, train_on="last")
    table, _, stats = last.batch_table(*last.render_batch(records))
    assert every.assistant_tokens == every.trained_tokens
    assert stats.assistant_tokens == every.trained_tokens > stats.trained_tokens
    labels = [label for row in table.column("labels").to_pylist() for label in row]
    assert stats.trained_tokens == sum(label != IGNORE_INDEX for label in labels)
    assert stats.tokens == len(labels) == every.tokens
    weighted_features = TrainingFeatures(good, train_on="weighted")
    table, problems, stats = weighted_features.batch_table(*weighted_features.render_batch(records))
    assert table.num_rows == 2 and [i for i, _ in problems] == [2]
    assert stats.assistant_tokens == every.trained_tokens  # the record weighted 0 everywhere counts for "all"
    assert (stats + stats).trained_tokens == 2 * stats.trained_tokens


def test_an_unknown_choice_is_refused_before_loading() -> None:
    with pytest.raises(UsageError, match="train_on must be one of all, last, weighted"):
        TrainingFeatures("no/such/folder", train_on="first")
