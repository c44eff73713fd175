"""The fast paths fail closed: rendering by shape follows an allow-list (every other operation of `str`, `int`,
jinja2's filters and tests renders the record directly), and each fast path is checked through the whole run, not
only at its start; `exact=True` is the plain path they are checked against."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from datasets import load_from_disk

from hf_chat_templates import TemplateChoice, prepare
from hf_chat_templates.training import shapes as shapes_module
from hf_chat_templates.training.followed import INT_INERT, STR_INERT, Length, Taint, Tracker
from hf_chat_templates.training.loading import compile_template
from hf_chat_templates.training.shape_environment import FOLLOWED_FILTERS, FOLLOWED_TESTS

from ..helpers import chatml_folder, write_jsonl

TITLE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'system' %}{{ m.content.title() }}{% else %}{{ m.content }}{% endif -%}"
    "<|im_end|>\n{%- endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)


def _taint(text: str = "be brief") -> tuple[Taint, Tracker]:
    tracker = Tracker([text])
    return tracker.marked(("leaf", 0), lambda values: values[0]), tracker


def test_no_attribute_of_str_or_int_is_inherited_unreviewed() -> None:
    """A method added to `str` or `int` in a later Python (or one nobody listed) cannot slip through: every one is
    the shape's own (followed, or refusing), or object machinery that never reads the text."""
    assert [n for n in dir(str) if n not in STR_INERT and n not in vars(Taint)] == []
    assert [n for n in dir(int) if n not in INT_INERT and n not in vars(Length)] == []


@pytest.mark.parametrize(
    ("use", "named"),
    [
        (lambda t: t.title(), "str.title"),
        (lambda t: t.join(["a", "b"]), "str.join"),
        (lambda t: t * 2, "mul() of a string"),
        (lambda t: "%s!" % t, "rmod() of a string"),  # noqa: UP031
        (lambda t: t.translate({}), "str.translate"),
        (lambda t: t.encode(), "str.encode"),
        (lambda t: list(t), "iter() of a string"),
        (lambda t: hash(t), "hash() of a string"),
        (lambda t: t.format(), "str.format"),
        (lambda t: t.__reduce_ex__(2), "reduce_ex() of a string"),
    ],
)
def test_a_str_operation_not_followed_renders_directly(use: Any, named: str) -> None:
    taint, tracker = _taint()
    use(taint)
    assert tracker.untracked == named


@pytest.mark.parametrize(
    "use, question",
    [
        (lambda n: n > 3, False),
        (lambda n: bool(n), False),
        (lambda n: n + 1, True),
        (lambda n: n.bit_length(), True),
        (lambda n: n.real, True),
        (lambda n: str(n), True),
        (lambda n: f"{n}", True),
    ],
)
def test_a_length_compared_is_a_question_any_other_use_asks_for_the_exact_length(use: Any, question: bool) -> None:
    taint, tracker = _taint("hello")
    use(Length.of(taint))
    assert any(key[0] == "len" for key in tracker.checks) is question and tracker.checks


@pytest.mark.parametrize("kind", ["filter", "test"])
def test_every_filter_and_test_not_on_the_allow_list_renders_directly(kind: str) -> None:
    """Walk jinja2's and transformers' tables: each filter or test not vetted, given a string of the data (alone or
    inside a list), marks the shape as not followed."""
    environment = compile_template("", shapes=True).environment
    table = environment.filters if kind == "filter" else environment.tests
    allowed = (
        FOLLOWED_FILTERS | {"length", "count", "join", "tojson"}
        if kind == "filter"
        else FOLLOWED_TESTS | {"in", "sequence", "iterable"}
    )
    unvetted = sorted(set(table) - allowed)
    assert "title" in unvetted or kind == "test"
    for name in unvetted:
        for wrap in (lambda t: t, lambda t: [t]):
            taint, tracker = _taint("3 be brief")
            source = f"{{{{ x | {name} }}}}" if kind == "filter" else f"{{{{ x is {name} }}}}"
            with contextlib.suppress(Exception):
                environment.from_string(source).render(x=wrap(taint))
            assert tracker.untracked, f"the {kind} {name!r} on a string of the data was not refused"


def _records(k: int, late: int) -> list[dict[str, Any]]:
    """`k` records, the first `late` of them without a system prompt."""
    out = []
    for n in range(k):
        messages = [{"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": f"answer {n}"}]
        if n >= late:
            messages.insert(0, {"role": "system", "content": f"be brief, number {n}"})
        out.append({"messages": messages})
    return out


def _rows(folder: Path) -> list[tuple[list[int], list[int]]]:
    data = load_from_disk(str(folder))
    return list(zip(data["input_ids"], data["labels"]))


def test_a_title_branch_first_met_late_gives_the_ids_of_the_plain_path_and_transformers(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = chatml_folder(tmp_path / "tok")
    template = tmp_path / "title.jinja"
    template.write_text(TITLE, encoding="utf-8")
    records = _records(40, late=20)
    data = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in records])
    fast = prepare(folder, data, tmp_path / "fast", TemplateChoice(template=template, stop_tokens=["<|im_end|>"]))
    exact = prepare(
        folder, data, tmp_path / "exact", TemplateChoice(template=template, stop_tokens=["<|im_end|>"]), exact=True
    )
    assert _rows(tmp_path / "fast") == _rows(tmp_path / "exact")
    assert fast.shapes.direct == 20 and fast.shapes.filled == 20  # the system branch renders directly
    assert exact.to_dict()["exact"] and "fast paths: off (--exact" in exact.describe()
    tok = AutoTokenizer.from_pretrained(str(folder))
    ids = tok.apply_chat_template(records[30]["messages"], chat_template=TITLE, tokenize=True, return_dict=True)
    assert _rows(tmp_path / "fast")[30][0] == list(ids["input_ids"])
    assert "Be Brief, Number 30" in tok.decode(_rows(tmp_path / "fast")[30][0])


def _plant_fault(monkeypatch: pytest.MonkeyPatch, after: int, old: str, new: str) -> None:
    """Filling a shape writes `new` for `old` from its call `after + 1` on: a fast path wrong only late in a run."""
    fill = shapes_module.Shape.fill
    calls = [0]

    def faulty(self: Any, values: Any) -> Any:
        calls[0] += 1
        text, spans = fill(self, values)
        return (text.replace(old, new) if calls[0] > after else text), spans

    monkeypatch.setattr(shapes_module.Shape, "fill", faulty)


def _fast_equals_exact(tmp_path: Path, records: list[dict[str, Any]], check_every: int) -> Any:
    """The fast run's report, once its rows are found equal to the plain path's."""
    folder = chatml_folder(tmp_path / "tok")
    data = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in records])
    fast = prepare(folder, data, tmp_path / "fast", check_every=check_every)
    prepare(folder, data, tmp_path / "exact", exact=True)
    assert _rows(tmp_path / "fast") == _rows(tmp_path / "exact")
    return fast


def test_a_difference_met_late_turns_shapes_off_names_the_record_and_redoes_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast path wrong only from the 30th record on (a fault planted in filling shapes) is caught by the checks
    spread over the run, not only the first records': the batch is rendered again directly, the record named."""
    _plant_fault(monkeypatch, 30, "answer", "ANSWER")
    fast = _fast_equals_exact(tmp_path, _records(80, late=80), check_every=8)
    assert fast.shapes_off.startswith("line 32: a checked record renders differently from its shape at character")
    assert "'answer 31" in fast.shapes_off and "'ANSWER 31" in fast.shapes_off
    assert "rendering by shape: off: line 32" in fast.describe()


def test_the_checks_are_counted_and_the_plain_path_is_one_switch(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    data = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in _records(100, late=100)])
    report = prepare(folder, data, tmp_path / "fast", check_every=10)
    # the first 16 and one in 10 after them; the new shape's first record is among the first
    assert report.shapes.checked == 16 + len([n for n in range(17, 101) if n % 10 == 0])
    assert report.segments.checked >= 16 + 8
    assert "checked against the plain path" in report.describe()
    exact = prepare(folder, data, tmp_path / "exact", exact=True)
    assert exact.shapes.filled == 0 and exact.segments.lookups == 0
    assert _rows(tmp_path / "fast") == _rows(tmp_path / "exact")
    with pytest.raises(ValueError, match="at least 1"):
        prepare(folder, data, tmp_path / "bad", check_every=0)


def test_the_first_record_of_every_new_shape_is_compared_with_its_direct_rendering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the first records and between samples, a shape first met late is still checked: its first record's
    filled-in text against the conversation rendered directly."""
    _plant_fault(monkeypatch, 20, "be brief", "BE BRIEF")
    fast = _fast_equals_exact(tmp_path, _records(30, late=20), check_every=1000)
    assert fast.shapes_off.startswith("line 21: a checked record renders differently from its shape")


MISSES = [
    ("{% for i in range(m.content | length) %}.{% endfor %}{{ m.content }}", "abc", "zz"),
    ("{% if 'x' in m.content | tojson %}X{% endif %}{{ m.content }}", "a", "x"),
    ("{{ m | string | upper }}", "123", "abc"),
    (
        "{% set all = ' '.join(messages | map(attribute='content')) %}{% if 'q' in all %}Q{% endif %}{{ m.content }}",
        "a",
        "q",
    ),
    ("{{ 'hello world' | replace(m.content, '') }}{{ m.content }}", "zzz", "world"),
    ("{{ ('>' | safe) + m.content }}", "abc", "a&b"),
    ("{{ ('<%s>' | safe) % m.content }}", "abc", "a&b"),
    ("{{ ('<b>' | safe).join([m.content, 'x']) }}", "abc", "a<b"),
    ("{% if messages[0].content is sameas m.content %}S{% endif %}{{ m.content }}", "ab", "a"),
    ("{% set ns = namespace(c=m.content) %}{{ '{0.c}'.format(ns) | length }}{{ m.content }}", "a", "qqq"),
    ("{{ ([m.content] ~ '') | length }}{{ m.content }}", "a", "qqq"),
    ("{{ [1, 2, 3, 4, 5][m.content | length] }}{{ m.content }}", "a", "qqq"),
    ("{{ '%d' % (m.content | length) }}{{ (m.content | length) | tojson }}", "a", "qqq"),
]


def _filled_later(source: str, first: str, later: str) -> tuple[Any, Any]:
    """A later record of an already-built shape, past the first records and between samples: (filled, direct)."""
    import functools

    from hf_chat_templates import _compat
    from hf_chat_templates.template.spans import assistant_spans
    from hf_chat_templates.training.shapes import SAMPLE_RECORDS, ShapeRenderer

    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n" + source + "<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    stops, controls = ("<|im_end|>",), ("<|im_start|>", "<|im_end|>")
    shaped, plain = (compile_template(template, shapes=flag) for flag in (True, False))
    by_shape = _compat.fast_renderer(shaped, {**shaped.globals, "documents": None})
    by_direct = _compat.fast_renderer(plain, {**plain.globals, "documents": None})

    def direct(messages: list[dict[str, Any]]) -> Any:
        try:
            found = assistant_spans(
                lambda p, g: by_direct({"messages": p, "tools": None, "add_generation_prompt": g}),
                messages,
                stops,
                controls,
            )
        except Exception as err:
            return type(err).__name__
        return found.text, found.spans

    renderer = ShapeRenderer(by_shape, None, stops, controls, check_every=10**9)
    renderer.proven = SAMPLE_RECORDS
    got = None
    for content in (first, later):
        messages = [{"role": "user", "content": "12"}, {"role": "assistant", "content": content}]
        try:
            got = renderer.render_record(messages, None, functools.partial(direct, messages))[:2]
        except Exception as err:
            got = type(err).__name__
    return got, direct(messages)


@pytest.mark.parametrize("source, first, later", MISSES, ids=[m[0][:40] for m in MISSES])
def test_what_a_template_does_with_the_data_is_followed_or_refused_never_taken_on_the_marker(
    source: str, first: str, later: str
) -> None:
    got, expected = _filled_later(source, first, later)
    assert got == expected


def test_format_and_percent_with_strings_of_the_data_stay_filled_in() -> None:
    for source in ("{{ '<%s>' | format(m.content) }}", "{{ '<%s|%s>' % (m.content, m.role) }}"):
        got, expected = _filled_later(source, "abc", "a%sb")
        assert got == expected
