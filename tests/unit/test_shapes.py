"""Rendering by shape: a record filled into its shape's rendering equals the template rendered for it (text and
assistant spans) on the published templates and the bundled ones, whatever its text holds; records whose text the
template tests differently are rendered directly and counted; what cannot be followed turns shapes off, named."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates import _compat, list_families, prepare
from hf_chat_templates.template.spans import assistant_spans
from hf_chat_templates.training.loading import compile_template
from hf_chat_templates.training.shapes import CHECKED, SAMPLE_RECORDS, ShapeRenderer, static_reason

from ..helpers import chatml_folder, corpus_manifest, corpus_names, corpus_templates, write_jsonl

EXAMPLES = int(os.environ.get("HF_CHAT_TEMPLATES_HYPOTHESIS_EXAMPLES", "40"))
DATE = {"date_string": "26 Jul 2024", "strftime_now": lambda fmt: "26 Jul 2024"}
# Text a template may test, trim, escape or split on: think tags, JSON's specials, whitespace at the ends, the
# markers' own spelling, control tokens of the templates
TEXT = st.lists(
    st.sampled_from(
        [*'ab é🦙\n\t.{}"\\', " the", "  ", "</think>", "<think>", "@@1@@", "<|im_end|>", "\n\n", "```", "'", "["]
    ),
    min_size=1,
    max_size=10,
).map("".join)


def _tool_call(text: str, k: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": f"get_{k}", "arguments": {"city": text, "days": k}}}


SHAPES = ("plain", "system", "multi", "tool", "reasoning")


def conversation(shape: str, texts: list[str]) -> list[dict[str, Any]]:
    """A conversation of `shape`, its strings taken from `texts` in order (cycled)."""
    t = iter(texts * 8)
    messages: list[dict[str, Any]] = [{"role": "system", "content": next(t)}] if shape != "plain" else []
    messages += [{"role": "user", "content": next(t)}]
    if shape == "tool":
        call = {"role": "assistant", "content": "", "tool_calls": [_tool_call(next(t), 1), _tool_call(next(t), 2)]}
        messages += [call, {"role": "tool", "content": next(t)}, {"role": "tool", "content": next(t)}]
    if shape == "reasoning":
        messages += [{"role": "assistant", "content": next(t), "reasoning_content": next(t)}]
        messages += [{"role": "user", "content": next(t)}]
    messages.append({"role": "assistant", "content": next(t)})
    if shape == "multi":
        messages += [{"role": "user", "content": next(t)}, {"role": "assistant", "content": next(t)}]
    return messages


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_1",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def templates() -> list[tuple[str, str, tuple[str, ...], tuple[str, ...], dict[str, Any]]]:
    """(name, source, stop tokens, control tokens, variables) of every published and bundled template."""
    out = []
    for name in corpus_names():
        manifest = corpus_manifest(name)
        variables = {
            "bos_token": manifest.get("bos_token", ""),
            "eos_token": manifest.get("eos_token", ""),
            **manifest.get("kwargs", {}),
        }
        controls = tuple(manifest.get("special_tokens", []) + manifest.get("added_tokens", []))
        for template_name, path in corpus_templates(name).items():
            source = path.read_text(encoding="utf-8")
            out.append((f"{name}/{template_name}", source, tuple(manifest["stop_tokens"]), controls, variables))
    for family in list_families():
        for variant in family.variants.values():
            variables = {
                "bos_token": "<|begin_of_text|>",
                "eos_token": variant.stop_tokens[0],
                **variant.kwarg_defaults,
            }
            out.append(
                (
                    f"{family.name}/{variant.name}",
                    variant.template,
                    variant.stop_tokens,
                    variant.control_tokens,
                    variables,
                )
            )
    return out


TEMPLATES = templates()


def renderers(source: str, variables: dict[str, Any]) -> tuple[Any, Any]:
    """(the template compiled for shapes, the template compiled as prepare renders directly)."""
    out = []
    for shapes in (True, False):
        compiled = compile_template(source, shapes=shapes)
        out.append(_compat.fast_renderer(compiled, {**compiled.globals, **DATE, **variables, "documents": None}))
    return out[0], out[1]


def direct(render: Any, messages: list[dict[str, Any]], tools: Any, stops: Any, controls: Any) -> Any:
    found = assistant_spans(
        lambda prefix, gp: render({"messages": prefix, "tools": tools, "add_generation_prompt": gp}),
        messages,
        stops,
        controls,
    )
    return found.text, found.spans


def outcome(fn: Any) -> Any:
    try:
        return fn()
    except Exception as err:  # the template refuses the record: the same way both ways
        return type(err).__name__


@pytest.mark.parametrize("name, source, stops, controls, variables", TEMPLATES, ids=[t[0] for t in TEMPLATES])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_record_filled_into_its_shape_equals_its_rendering(
    name: str, source: str, stops: Any, controls: Any, variables: dict[str, Any], data: Any
) -> None:
    by_shape, plain = renderers(source, variables)
    renderer = ShapeRenderer(by_shape, None, stops, controls)
    renderer.proven = SAMPLE_RECORDS  # compared here, on every record, not on a sample
    # several shapes through one renderer (shapes that start alike share the renderings of their first messages),
    # each one built by its first record and filled in for the next
    for shape in data.draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=4)) * 2:
        tools = TOOLS if shape == "tool" else None
        messages = _compat.alias_reasoning_fields(conversation(shape, data.draw(st.lists(TEXT, min_size=1))))
        rendered = functools.partial(direct, plain, messages, tools, stops, controls)
        expected = outcome(rendered)
        got = outcome(functools.partial(renderer.render_record, messages, tools, rendered))
        assert (got[:2] if isinstance(got, tuple) else got) == expected, name


@pytest.mark.parametrize("name, source, stops, controls, variables", TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_every_published_and_bundled_template_is_filled_in_from_shapes(
    name: str, source: str, stops: Any, controls: Any, variables: dict[str, Any]
) -> None:
    """Not a property that holds because everything is rendered directly: each template's plain conversations come
    from their shape (the shapes a template refuses to render are rendered directly, and raise there)."""
    by_shape, plain = renderers(source, variables)
    off = static_reason(source, variables)
    renderer = ShapeRenderer(by_shape, None, stops, controls, off=off)
    assert not off
    hows = []
    tools = TOOLS if name.endswith("/tool_use") else None  # the template transformers uses given tools
    for texts in (["Hello there", "How are you?", "Fine."], ["Another question", "Another answer", "x"]):
        messages = conversation("multi", texts)
        rendered = functools.partial(direct, plain, messages, tools, stops, controls)
        hows.append(renderer.render_record(messages, tools, rendered)[2].removesuffix(CHECKED))
    assert hows == ["new", "shape"], renderer.off


def shape_renderer(source: str, stops: tuple[str, ...] = ("<|im_end|>",)) -> tuple[ShapeRenderer, Any]:
    by_shape, plain = renderers(source, {})
    controls = ("<|im_start|>", "<|im_end|>")
    renderer = ShapeRenderer(by_shape, None, stops, controls, off=static_reason(source, {}))
    return renderer, lambda m: direct(plain, m, None, stops, controls)


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ TEXT }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def run(renderer: ShapeRenderer, render: Any, contents: list[str]) -> list[str]:
    """How each two-message record with the answer `content` was rendered, checking it equals its rendering."""
    hows = []
    for content in contents:
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": content}]
        text, spans, how = renderer.render_record(messages, None, functools.partial(render, messages))
        assert (text, spans) == render(messages), content
        hows.append(how.removesuffix(CHECKED))
    return hows


def test_records_whose_text_answers_the_templates_test_otherwise_are_rendered_directly() -> None:
    source = CHATML.replace("{{ TEXT }}", "{% if '</think>' in m.content %}R:{% endif %}{{ m.content | trim }}")
    renderer, render = shape_renderer(source)
    assert run(renderer, render, ["a", " b ", "x</think>y", "c"]) == ["new", "shape", "direct", "shape"]


def test_what_cannot_be_followed_is_rendered_directly_or_turns_shapes_off_with_the_reason() -> None:
    renderer, render = shape_renderer(CHATML.replace("{{ TEXT }}", "{% for c in m.content %}{{ c }}{% endfor %}"))
    assert run(renderer, render, ["ab", "cd"]) == ["direct", "direct"]
    assert renderer.shapes and "iter" in next(iter(renderer.shapes.values())).untracked

    renderer, render = shape_renderer(CHATML.replace("{{ TEXT }}", "{{ m.content | title }}{{ m.role | title }}"))
    assert run(renderer, render, ["ab cd", "ef"]) == ["direct", "direct"]
    assert "the filter 'title' on a string of the data" in next(iter(renderer.shapes.values())).untracked


def test_the_data_in_the_templates_own_text_is_a_question_answered_per_record() -> None:
    # `in` a string of the template's own text: each record answers it, as `'x' in content` is answered
    source = CHATML.replace("{{ TEXT }}", "{% if m.content in 'Abcdef' %}!{% endif %}{{ m.content }}")
    renderer, render = shape_renderer(source)
    assert run(renderer, render, ["x", "Abc", "y", "cde"]) == ["new", "direct", "shape", "direct"]
    assert not renderer.off


def test_spans_move_with_the_text_put_in_place(tmp_path: Path) -> None:
    renderer, render = shape_renderer(CHATML.replace("{{ TEXT }}", "{{ m.content }}"))
    run(renderer, render, ["short", "a much longer answer than the first one", ""])


def test_prepare_says_how_records_were_rendered(tmp_path: Path) -> None:
    import json

    folder = chatml_folder(tmp_path / "tok")
    records = [
        {"messages": [{"role": "user", "content": f"q{k}"}, {"role": "assistant", "content": f"a{k}"}]}
        for k in range(20)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", [json.dumps(r) for r in records])
    report = prepare(folder, data, tmp_path / "out")
    assert (
        "rendering by shape: on (20 of 20 records filled in from 1 shapes, 16 of them also rendered directly and "
        "equal)" in report.describe()
    )
    shapes = {"on": True, "off_reason": None, "filled": 20, "built": 1, "direct": 0, "checked": 16}
    assert report.to_dict()["shapes"] == shapes


def test_a_record_whose_shape_text_spells_a_marker_is_rendered_directly() -> None:
    source = CHATML.replace("{{ TEXT }}", "{{ m.content }}{% for k, v in (m.extra or {}).items() %}{{ k }}{% endfor %}")
    renderer, render = shape_renderer(source)
    for messages in (
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "extra": {"@@0@@": 1}}],
        [{"role": "user@@1@@", "content": "a"}, {"role": "assistant", "content": "b"}],
    ):
        text, spans, how = renderer.render_record(messages, None, functools.partial(render, messages))
        assert (how, (text, spans)) == ("direct", render(messages))
    assert "@@" in static_reason("{{ '@@0@@' }}", {})


def test_spans_that_depend_on_the_text_are_found_again_on_each_records_text() -> None:
    # The generation prompt ends with "<think>\n": an answer only has a span when its text starts with it too
    source = CHATML.replace("{{ TEXT }}", "{{ m.content }}").replace(
        "assistant\n{% endif %}", "assistant\n<think>\n{% endif %}"
    )
    renderer, render = shape_renderer(source)
    contents = ["plain", "<think>\nreasoned", "plain again", "<think>\nmore"]
    assert run(renderer, render, contents) == ["new", "shape", "shape", "shape"]
    assert [
        bool(render([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": c}])[1]) for c in contents
    ] == [
        False,
        True,
        False,
        True,
    ]


def test_lengths_compared_sequences_and_equal_strings_of_the_data_are_followed_not_fixed() -> None:
    text = (
        "{% if m.content | length > 3 %}long:{% endif %}{% if m.content is sequence and m.content is iterable %}"
        "s:{% endif %}{% if m.content == m.name %}same:{% endif %}{{ m.content }}"
    )
    renderer, render = shape_renderer(CHATML.replace("{{ TEXT }}", text))
    hows = []
    for content, name in (("hello", "hello"), ("world!", "world!"), ("ab", "ab"), ("hello", "other"), ("xyz", "xyz")):
        messages = [
            {"role": "user", "content": "Hi", "name": "Hi"},
            {"role": "assistant", "content": content, "name": name},
        ]
        got = renderer.render_record(messages, None, functools.partial(render, messages))
        assert got[:2] == render(messages), content
        hows.append(got[2].removesuffix(CHECKED))
    # the first record's answers (long, same) hold for the second; "ab" is short, "hello"/"other" differ: direct
    assert hows == ["new", "shape", "direct", "direct", "direct"]


def test_negative_zero_and_an_answer_spelling_the_stop_token_are_not_filled_into_another_shape() -> None:
    source = CHATML.replace("{{ TEXT }}", "{{ m.content }}{{ m.x | tojson if m.x is defined else '' }}")
    renderer, render = shape_renderer(source, stops=("<|im_end|>", "<|stop|>"))
    for content, x in (("a", 0.0), ("b", -0.0), ("c <|stop|> d", 1.5), ("e", 1.5)):
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": content, "x": x}]
        got = renderer.render_record(messages, None, functools.partial(render, messages))
        assert got[:2] == render(messages), content
        assert got[2].removesuffix(CHECKED) == ("direct" if "<|stop|>" in content else "new")


def test_a_rendering_kept_for_one_shape_serves_another_only_where_its_record_answers_alike() -> None:
    # GLM 4.6 writes an answer only when `content.strip()`: the [system, user, assistant] rendering kept for an answer
    # "a" may not serve a longer conversation whose first answer is blank
    _, source, stops, controls, variables = next(t for t in TEMPLATES if t[0] == "glm-4.6/default")
    by_shape, plain = renderers(source, variables)
    renderer = ShapeRenderer(by_shape, None, stops, controls)
    renderer.proven = SAMPLE_RECORDS
    for shape, texts in (("system", ["a"]), ("multi", ["a", "a", "  "]), ("multi", ["b", "c", "d"])):
        messages = conversation(shape, texts)
        rendered = functools.partial(direct, plain, messages, None, stops, controls)
        assert renderer.render_record(messages, None, rendered)[:2] == rendered(), texts
