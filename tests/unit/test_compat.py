"""Every public function of `hf_chat_templates._compat`, exercised for real against the installed transformers,
jinja2, tokenizers, datasets and llama-models, with its result checked.

`_compat` is the one module that reaches into private parts of other packages. When one of them renames or
changes such a part, the test of the function that uses it fails here and names it. A function added to `_compat`
without a test here fails `test_every_public_function_has_a_test`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import inspect
import sys
from pathlib import Path

import pytest

from hf_chat_templates import _compat

# The functions this module tests; each has at least one `test_<name>...` below.
COVERED = {
    "compile_template",
    "control_tokens",
    "normalize_messages",
    "alias_reasoning_fields",
    "plain_template_data",
    "render_conversations",
    "render_with_assistant_indices",
    "frozen_clock",
    "clock_frozen",
    "fast_renderer",
    "join_generator",
    "component_state",
    "model_state",
    "load_plain_tokenizer",
    "generation_tag",
    "dataset_state",
    "arrow_writer",
    "hidden_torch_out_of_sight",
    "quiet_no_torch_notice",
    "llama_header_ids",
}


def _public_functions() -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(_compat, inspect.isfunction)
        if not name.startswith("_") and value.__module__ == _compat.__name__
    }


def test_every_public_function_has_a_test() -> None:
    assert _public_functions() == COVERED
    tests = {name for name in vars(sys.modules[__name__]) if name.startswith("test_")}
    untested = [name for name in sorted(COVERED) if not any(t.startswith(f"test_{name}") for t in tests)]
    assert untested == []


# ---- transformers ----------------------------------------------------------------------------------------------

LOOP = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"


def test_compile_template_renders_messages() -> None:
    compiled = _compat.compile_template(LOOP + "{% if add_generation_prompt %}[assistant:{% endif %}")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert compiled.render(messages=messages) == "[user:hi][assistant:yo]"
    assert compiled.render(messages=messages[:1], add_generation_prompt=True) == "[user:hi][assistant:"


def test_compile_template_uses_transformers_settings() -> None:
    # trim_blocks + lstrip_blocks: a block tag's own line leaves no whitespace behind.
    compiled = _compat.compile_template(
        "{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n{% endif %}\n{% endfor %}"
    )
    assert compiled.render(messages=[{"content": "a"}, {"content": "b"}]) == "a\nb\n"
    # loopcontrols, the {% generation %} tag, and the raise_exception global are available.
    assert (
        _compat.compile_template(
            "{% for i in [1, 2, 3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}"
        ).render()
        == "1"
    )
    assert _compat.compile_template("<{% generation %}x{% endgeneration %}>").render() == "<x>"
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="no such role"):
        _compat.compile_template("{{ raise_exception('no such role') }}").render()


def test_compile_template_is_sandboxed() -> None:
    from jinja2.exceptions import SecurityError

    with pytest.raises(SecurityError, match=r"^access to attribute 'append' of 'list' object is unsafe\.$"):
        _compat.compile_template("{{ messages.append(1) }}").render(messages=[])


def test_control_tokens_are_the_special_tokens_and_those_the_templates_literals_hold(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from ..helpers import chatml_folder

    tok = AutoTokenizer.from_pretrained(str(chatml_folder(tmp_path / "tok")))
    written = _compat.control_tokens(tok, "<|im_start|>{{ messages[0].content }}")
    assert "<|im_start|>" in written and "<|im_end|>" in written  # written, and special
    assert set(written) <= {t.content for t in tok.added_tokens_decoder.values()}


def test_normalize_messages_drops_none_values() -> None:
    messages = [
        {"role": "user", "content": "hi", "name": None},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"a": None}}}]},
    ]
    assert _compat.normalize_messages(messages) == [
        {"role": "user", "content": "hi"},
        # only a message's own keys are dropped; values inside (tool arguments) are the caller's data
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": None}}}]},
    ]
    assert messages[0] == {"role": "user", "content": "hi", "name": None}  # the input is not changed


def test_normalize_messages_makes_objects_plain() -> None:
    @dataclasses.dataclass
    class Message:
        role: str
        content: str

    assert _compat.normalize_messages([Message("user", "hi")]) == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("field", ["reasoning_content", "thinking", "reasoning"])
def test_alias_reasoning_fields_aliases_each_name(field: str) -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", field: "because"}]
    aliased = _compat.alias_reasoning_fields(messages)
    assert aliased[0] == {"role": "user", "content": "q"}
    assert aliased[1]["reasoning_content"] == "because" and aliased[1]["thinking"] == "because"
    assert aliased[1]["content"] == "a" and aliased[1][field] == "because"
    assert messages[1] == {"role": "assistant", "content": "a", field: "because"}  # the input is not changed


def test_alias_reasoning_fields_leaves_messages_without_reasoning() -> None:
    messages = [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b", "thinking": None}]
    assert _compat.alias_reasoning_fields(messages) == messages


def test_plain_template_data() -> None:
    class Color(enum.StrEnum):
        RED = "red"

    @dataclasses.dataclass
    class Part:
        type: str
        text: str

    class Opaque:
        pass

    plain = _compat.plain_template_data(
        {"role": "user", "content": [Part("text", "hi")], "color": Color.RED, "n": (1, 2.5, None), "blob": Opaque()}
    )
    assert plain == {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}],
        "color": "red",
        "n": (1, 2.5, None),
        "blob": "<Opaque>",
    }
    assert type(plain["color"]) is str  # a str subclass (with its methods) is stripped to str


TEMPLATE = (
    "{{ bos_token }}{% if tools %}[tools:{{ tools | length }}]{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{{ greeting }}{% endif %}"
)
CONVERSATIONS = [
    [{"role": "user", "content": "a"}],
    [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}],
]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]


def test_render_conversations_matches_apply_chat_template(toy_tokenizer_master: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(toy_tokenizer_master))
    for tools in (None, TOOLS):
        for add in (False, True):
            expected = tok.apply_chat_template(
                CONVERSATIONS,
                chat_template=TEMPLATE,
                tools=tools,
                tokenize=False,
                add_generation_prompt=add,
                greeting="hello",
            )
            got = _compat.render_conversations(
                TEMPLATE, CONVERSATIONS, tools, add_generation_prompt=add, greeting="hello", **tok.special_tokens_map
            )
            assert got == expected
    assert _compat.render_conversations(
        TEMPLATE, CONVERSATIONS[:1], TOOLS, add_generation_prompt=True, bos_token="<s>", greeting="!"
    ) == ["<s>[tools:1]<user>a</user><assistant>!"]


def test_load_plain_tokenizer_is_what_auto_tokenizer_loads(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from ..helpers import chatml_folder

    folder = chatml_folder(tmp_path / "tok")
    plain = _compat.load_plain_tokenizer(str(folder))
    auto = AutoTokenizer.from_pretrained(str(folder))
    assert type(plain) is type(auto)
    assert type(plain).__name__ == "TokenizersBackend"
    assert plain("<|im_start|>hi").input_ids == auto("<|im_start|>hi").input_ids
    # from_pretrained pops the private flag: kept, it would be written into a saved tokenizer_config.json
    assert "_from_auto" not in plain.init_kwargs
    plain.save_pretrained(str(tmp_path / "saved"))
    assert "_from_auto" not in (tmp_path / "saved" / "tokenizer_config.json").read_text(encoding="utf-8")


def test_render_with_assistant_indices_gives_marked_spans() -> None:
    compiled = _compat.compile_template(
        "{% for m in messages %}{% if m.role == 'assistant' %}A:{% generation %}{{ m.content }}{% endgeneration %}"
        "{% else %}U:{{ m.content }}{% endif %}|{% endfor %}{{ suffix }}"
    )
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "ans"},
    ]
    text, spans = _compat.render_with_assistant_indices(compiled, messages, None, suffix="END")
    assert text == "U:hi|A:yo|U:q|A:ans|END"
    assert spans == [(7, 9), (16, 19)]
    assert [text[a:b] for a, b in spans] == ["yo", "ans"]
    assert all(type(a) is int and type(b) is int for a, b in spans)


def test_clock_frozen_says_whether_a_frozen_clock_block_is_open() -> None:
    assert not _compat.clock_frozen()
    with _compat.frozen_clock(dt.datetime(2001, 2, 3)):
        assert _compat.clock_frozen()
        with _compat.frozen_clock(dt.datetime(2002, 2, 3)):
            assert _compat.clock_frozen()
        assert _compat.clock_frozen()
    assert not _compat.clock_frozen()


def test_frozen_clock_freezes_strftime_now_and_restores_it() -> None:
    from transformers.utils import chat_template_utils

    compiled = _compat.compile_template("{{ strftime_now('%Y-%m-%d %H:%M') }}")
    moment = dt.datetime(2001, 2, 3, 4, 5, 6)
    original = chat_template_utils.datetime
    with _compat.frozen_clock(moment):
        assert compiled.render() == "2001-02-03 04:05"
    assert chat_template_utils.datetime is original
    assert not compiled.render().startswith("2001-")
    # restored when the block raises, too
    with pytest.raises(RuntimeError), _compat.frozen_clock(moment):
        assert compiled.render() == "2001-02-03 04:05"
        raise RuntimeError
    assert chat_template_utils.datetime is original
    assert not compiled.render().startswith("2001-")


FAST = (
    "{%- set ns = namespace(n=0) -%}{%- set top = 'T' -%}"
    "{{ bos_token }}{% for m in messages %}{% set ns.n = ns.n + 1 %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "#{{ ns.n }}{% if extra is defined %}+{{ extra }}{% endif %}{% if add_generation_prompt %}<assistant>{% endif %}"
    "{{ top }}{{ strftime_now('%Y') }}"
    "{% if messages and messages[0].role == 'bad' %}{{ raise_exception('bad role') }}{% endif %}"
)


def test_join_generator_hands_the_joined_values_to_the_environment() -> None:
    environment = _compat.compile_template("x").environment.overlay()
    environment.code_generator_class = _compat.join_generator()
    seen = []
    environment.join_strings = lambda items: seen.append(items) or "".join(map(str, items))  # type: ignore[attr-defined]
    source = "{{ 'a' ~ n ~ m.content }}{% for x in [1] %}{{ x ~ '!' }}{% endfor %}"
    assert environment.from_string(source).render(n=2, m={"content": "c"}) == "a2c1!"
    assert seen == [("a", 2, "c"), (1, "!")]


def test_generation_tag_parses_the_body_into_a_scope() -> None:
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(extensions=[_compat.generation_tag()])
    tree = env.parse("<{% generation %}{{ x }}!{% endgeneration %}>")
    scopes = list(tree.find_all(jinja2.nodes.Scope))
    assert len(scopes) == 1
    assert scopes[0].lineno == 1
    assert [type(n).__name__ for n in scopes[0].body] == ["Output"]
    assert env.from_string("<{% generation %}{{ x }}!{% endgeneration %}>").render(x=1) == "<1!>"


def test_generation_tag_refuses_an_unclosed_tag() -> None:
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(extensions=[_compat.generation_tag()])
    with pytest.raises(TemplateSyntaxError, match="Unexpected end of template"):
        env.parse("{% generation %}x")


def test_fast_renderer_equals_render() -> None:
    compiled = _compat.compile_template(FAST)
    variables = {**compiled.globals, "bos_token": "<s>"}
    snapshot = dict(variables)
    render = _compat.fast_renderer(compiled, variables)
    inputs = [
        {"messages": []},
        {"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "extra": 7},
        {"messages": [{"role": "user", "content": "a"}]},  # after a call with `extra`: nothing carried over
        {"messages": [{"role": "system", "content": "s"}], "bos_token": "<override>"},
    ]
    for extra in inputs:
        assert render(extra) == compiled.render(**{"bos_token": "<s>", **extra})
    assert render(inputs[2]).startswith("<s><user>a<assistant>b#2+7")
    assert "+" not in render(inputs[3])
    assert render(inputs[4]).startswith("<override>")
    assert variables == snapshot  # the merged globals are not written to
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="bad role"):
        render({"messages": [{"role": "bad", "content": "x"}]})


# ---- tokenizers ------------------------------------------------------------------------------------------------


def test_component_state_of_tokenizers_components() -> None:
    from tokenizers import decoders, normalizers, pre_tokenizers

    assert _compat.component_state(pre_tokenizers.ByteLevel(add_prefix_space=False)) == {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    assert _compat.component_state(decoders.ByteLevel())["type"] == "ByteLevel"
    assert _compat.component_state(normalizers.NFC()) == {"type": "NFC"}
    split = _compat.component_state(pre_tokenizers.Metaspace(replacement="_", prepend_scheme="never"))
    assert split["type"] == "Metaspace" and split["replacement"] == "_" and split["prepend_scheme"] == "never"
    assert _compat.component_state(None) == {}


def test_component_state_of_a_trained_tokenizer(toy_tokenizer_master: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(toy_tokenizer_master / "tokenizer.json"))
    assert _compat.component_state(tok.pre_tokenizer)["type"] == "ByteLevel"
    assert _compat.component_state(tok.decoder)["type"] == "ByteLevel"
    assert _compat.component_state(tok.post_processor)["type"] == "TemplateProcessing"


def test_model_state_is_the_models_json_bytes(toy_tokenizer_master: Path) -> None:
    import json

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(toy_tokenizer_master / "tokenizer.json"))
    state = _compat.model_state(tok.model)
    assert isinstance(state, bytes)
    model = json.loads(state)
    written = json.loads((toy_tokenizer_master / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    assert model["type"] == "BPE"
    assert model["vocab"] == written["vocab"]
    assert [list(m) if isinstance(m, list) else m.split(" ") for m in model["merges"]] == [
        list(m) if isinstance(m, list) else m.split(" ") for m in written["merges"]
    ]


def test_model_state_refuses_a_state_that_is_not_bytes() -> None:
    class Model:
        def __getstate__(self) -> dict[str, str]:
            return {"type": "BPE"}

    with pytest.raises(TypeError, match=r"Model.__getstate__\(\) returned dict, not bytes"):
        _compat.model_state(Model())


# ---- datasets --------------------------------------------------------------------------------------------------


def test_arrow_writer_writes_a_shard_datasets_reads(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    import pyarrow as pa

    path = tmp_path / "data.arrow"
    features = datasets.Features(
        {"input_ids": datasets.Sequence(datasets.Value("int32")), "name": datasets.Value("string")}
    )
    with _compat.arrow_writer(features=features, path=str(path)) as writer:
        writer.write_table(pa.table({"input_ids": [[1, 2], [3]], "name": ["a", "b"]}, schema=features.arrow_schema))
        writer.write_table(pa.table({"input_ids": [[4, 5, 6]], "name": ["c"]}, schema=features.arrow_schema))
        rows, _ = writer.finalize()
    assert rows == 3
    dataset = datasets.Dataset.from_file(str(path))
    assert dataset.to_dict() == {"input_ids": [[1, 2], [3], [4, 5, 6]], "name": ["a", "b", "c"]}
    assert dataset.features == features


def test_dataset_state_has_the_state_json_keys() -> None:
    datasets = pytest.importorskip("datasets")

    dataset = datasets.Dataset.from_dict({"x": [1, 2, 3], "y": ["a", "b", "c"]})
    state = _compat.dataset_state(dataset)
    assert tuple(state) == _compat.DATASET_STATE_KEYS
    assert state["_fingerprint"] == dataset._fingerprint and isinstance(state["_fingerprint"], str)
    assert state["_format_type"] is None and state["_format_columns"] is None
    assert state["_output_all_columns"] is False and state["_format_kwargs"] == {}
    formatted = _compat.dataset_state(dataset.with_format("numpy", columns=["x"]))
    assert formatted["_format_type"] == "numpy" and formatted["_format_columns"] == ["x"]
    assert formatted["_fingerprint"] != state["_fingerprint"]


def test_dataset_state_matches_save_to_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    import json

    dataset = datasets.Dataset.from_dict({"x": [1, 2]}).with_format("numpy")
    dataset.save_to_disk(str(tmp_path / "saved"))
    written = json.loads((tmp_path / "saved" / "state.json").read_text())
    state = _compat.dataset_state(dataset)
    assert {k: written[k] for k in _compat.DATASET_STATE_KEYS} == state


def test_hidden_torch_out_of_sight_takes_the_hidden_entry_out_and_puts_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's hidden torch (a None entry) is out of `sys.modules` within the context (datasets' pickler
    then leaves torch alone: tests/e2e/test_cli.py runs `prepare` so), and back after it; a real entry is left be."""
    monkeypatch.setitem(sys.modules, "torch", None)
    with _compat.hidden_torch_out_of_sight():
        assert "torch" not in sys.modules
    assert "torch" in sys.modules and sys.modules["torch"] is None
    real = object()
    monkeypatch.setitem(sys.modules, "torch", real)
    with _compat.hidden_torch_out_of_sight():
        assert sys.modules["torch"] is real
    assert sys.modules["torch"] is real


# ---- llama-models ----------------------------------------------------------------------------------------------


def test_llama_header_ids() -> None:
    pytest.importorskip("llama_models")
    from llama_models.llama3.chat_format import ChatFormat
    from llama_models.llama3.tokenizer import Tokenizer

    tokenizer = Tokenizer.get_instance()
    chat = ChatFormat(tokenizer)
    header = _compat.llama_header_ids(chat, "assistant")
    assert isinstance(header, list)
    start, end = tokenizer.special_tokens["<|start_header_id|>"], tokenizer.special_tokens["<|end_header_id|>"]
    assert header == [
        start,
        *tokenizer.encode("assistant", bos=False, eos=False),
        end,
        *tokenizer.encode("\n\n", bos=False, eos=False),
    ]
    # Llama 3's own ids for "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert header == [128006, 78191, 128007, 271]
    assert _compat.llama_header_ids(chat, "user")[1:-2] == tokenizer.encode("user", bos=False, eos=False)
    # the tool role is written as ipython
    assert _compat.llama_header_ids(chat, "tool")[1:-2] == tokenizer.encode("ipython", bos=False, eos=False)


# ---- transformers' notice without torch ------------------------------------------------------------------------


def test_quiet_no_torch_notice_drops_that_notice_only_and_is_added_once() -> None:
    import logging

    logger = logging.getLogger("transformers")
    _compat.quiet_no_torch_notice()
    _compat.quiet_no_torch_notice()
    assert sum(isinstance(f, _compat._NoTorchNotice) for f in logger.filters) == 1  # importing the package added it

    def record(message: str) -> logging.LogRecord:
        return logger.makeRecord("transformers", logging.WARNING, __file__, 1, message, None, None)

    notice = (
        f"{_compat.NO_TORCH_NOTICE}. Models won't be available and only tokenizers, configuration and file/data "
        "utilities can be used."
    )
    assert not logger.filter(record(notice))
    assert logger.filter(record("Token indices sequence length is longer than the specified maximum"))
