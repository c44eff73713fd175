"""Every loss counted: a record whose assistant turns are all left out counts toward --max-skipped, named with the
cause and the fix; turns left out of records that still train are counted in tokens; `--per-turn` trains each
turn on the conversation cut after it, as `apply_chat_template` renders that cut conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datasets import load_from_disk

from hf_chat_templates import TemplateChoice, prepare
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import chatml_folder, run, write_jsonl

HEAD = "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
END = "<|im_end|>\n{%- endfor -%}"
# DeepSeek-R1-Distill's way: the generation prompt ends with "<think>\n", which an answer without reasoning never
# starts with
THINKING = (
    HEAD + "{{ m.content }}" + END + "{%- if add_generation_prompt -%}<|im_start|>assistant\n<think>\n{%- endif -%}"
)
# Qwen3's way: an answer's reasoning is written only after the last user message (history rewritten)
REWRITES = (
    "{%- set ns = namespace(last=0) -%}{%- for m in messages -%}{%- if m.role == 'user' -%}"
    "{%- set ns.last = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    + HEAD
    + "{%- if m.role == 'assistant' and loop.index0 > ns.last and m.reasoning_content -%}"
    "<think>{{ m.reasoning_content }}</think>{%- endif -%}{{ m.content }}"
    + END
    + "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)


def _chat(turns: int, reasoning: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for k in range(turns):
        messages.append({"role": "user", "content": f"question {k}"})
        answer: dict[str, Any] = {"role": "assistant", "content": f"answer {k}"}
        if reasoning:
            answer["reasoning_content"] = f"thought {k}"
        messages.append(answer)
    return {"messages": messages}


def _setup(tmp_path: Path, template: str, records: list[dict[str, Any]]) -> tuple[Path, Path, Path]:
    folder = chatml_folder(tmp_path / "tok")
    path = tmp_path / "template.jinja"
    path.write_text(template, encoding="utf-8")
    data = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in records])
    return folder, path, data


def test_a_record_whose_every_turn_is_left_out_counts_and_names_the_cause(tmp_path: Path, capsys: Any) -> None:
    folder, template, data = _setup(tmp_path, THINKING, [_chat(1), _chat(2)])
    report = prepare(folder, data, tmp_path / "out", TemplateChoice(template=template, stop_tokens=["<|im_end|>"]))
    assert not report.ok and report.over_limit and report.tally.skipped["every turn left out"] == 2
    why = report.skipped[0][1]
    assert why.startswith("every assistant turn is left out of training (message 1: the generation prompt")
    assert "the prompt writes '<think>' where the conversation writes 'answer 0" in why
    assert "not even the conversation cut after it renders as its prompt followed by the answer" in why
    code, out, _ = run(
        capsys, "prepare", str(folder), "--conversations", str(data), "--output", str(tmp_path / "cli"),
        "--template", str(template), "--stop-token", "<|im_end|>",
    )  # fmt: skip
    assert code == 1 and "2 with every assistant turn left out" in out
    assert (
        "  refused: 2 of 2 records could not be used (2 every turn left out), more than --max-skipped 0 allows; fix "
        "them, or raise the limit (--max-skipped N records, or P% of them) to accept the loss"
    ) in out.splitlines()
    assert not (tmp_path / "cli").exists()


def test_turns_left_out_of_records_that_still_train_are_counted_with_the_fix(tmp_path: Path) -> None:
    folder, template, data = _setup(tmp_path, REWRITES, [_chat(3, reasoning=True), _chat(1, reasoning=True)])
    report = prepare(
        folder,
        data,
        tmp_path / "out",
        TemplateChoice(template=template, stop_tokens=["<|im_end|>"]),
        max_skipped="100%",
    )
    assert report.ok and report.written == 2
    assert report.turns_left_out == 2 and report.tokens_left_out == 14
    (line, message, why), *_ = report.left_out
    assert (line, message) == (1, 1) and "--per-turn trains it" in why
    described = report.describe()
    assert "left out of training: 2 assistant turn(s)" in described and "line 1, message 1:" in described
    assert report.to_dict()["turns_left_out"] == 2


def test_per_turn_rows_equal_apply_chat_template_of_each_cut_conversation(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    records = [_chat(3, reasoning=True), _chat(1, reasoning=True), {"messages": [{"role": "user", "content": "q"}]}]
    folder, template, data = _setup(tmp_path, REWRITES, records)
    report = prepare(
        folder,
        data,
        tmp_path / "out",
        TemplateChoice(template=template, stop_tokens=["<|im_end|>"]),
        per_turn=True,
        max_skipped=1,
    )
    assert report.ok and report.written == 4 and report.turns_left_out == 0 and report.per_turn
    assert "--per-turn: 4 examples" in report.describe()
    assert report.describe().startswith("prepared 4 examples (--per-turn) from the 3 records of")
    rows = load_from_disk(str(tmp_path / "out"))
    tok = AutoTokenizer.from_pretrained(str(folder))
    cut = [records[0]["messages"][: 2 * k] for k in (1, 2, 3)] + [records[1]["messages"]]
    for row, messages in zip(rows, cut):
        ids = list(
            tok.apply_chat_template(messages, chat_template=REWRITES, tokenize=True, return_dict=True)["input_ids"]
        )
        prompt = tok.apply_chat_template(
            messages[:-1], chat_template=REWRITES, tokenize=True, return_dict=True, add_generation_prompt=True
        )["input_ids"]
        assert row["input_ids"] == ids
        trained = [i for i, label in zip(ids, row["labels"]) if label != IGNORE_INDEX]
        # the last turn only: its reasoning, answer and stop token, after its prompt
        assert row["labels"][: len(prompt)] == [IGNORE_INDEX] * len(prompt)
        assert (
            tok.decode(trained)
            == f"<think>thought {len(messages) // 2 - 1}</think>answer {len(messages) // 2 - 1}<|im_end|>"
        )


def test_per_turn_with_weighted_turns_makes_examples_of_the_weighted_ones(tmp_path: Path) -> None:
    record = _chat(3)
    record["messages"][3]["weight"] = 0
    folder, template, data = _setup(tmp_path, REWRITES, [record])
    report = prepare(
        folder,
        data,
        tmp_path / "out",
        TemplateChoice(template=template, stop_tokens=["<|im_end|>"]),
        per_turn=True,
        train_on="weighted",
    )
    assert report.written == 2


def test_per_turn_counts_a_record_once_and_names_the_examples_turn(tmp_path: Path) -> None:
    folder, template, data = _setup(tmp_path, THINKING, [_chat(3), _chat(1)])
    report = prepare(
        folder, data, tmp_path / "out", TemplateChoice(template=template, stop_tokens=["<|im_end|>"]), per_turn=True
    )
    assert report.tally.skipped["every turn left out"] == 2 and "2 of 2 records could not be used" in report.over_limit
    (line, why), *_ = report.skipped
    assert line == 1 and why.startswith("the turn of a --per-turn example is left out of training (message 1: ")
