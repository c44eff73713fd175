"""prepare's fast paths against its plain path on generated records, for every published template of the corpus (on
the Llama 3 vocabulary, as the models ship it) and every bundled family (installed on its default base tokenizer).

The fast paths (rendering by shape, the segment cache, tiktoken) and the plain path (`exact=True`: each record
rendered by transformers' compiled template, spans by rendering differences, encoded whole by the tokenizer) must
give the same rows in the same order and leave out the same records for the same reasons. The fast paths run with
their default checks (`check_every`), so a difference those checks caught would turn a fast path off and hide
behind the plain path's answer: the report must also show that each fast path stayed on for the records it serves.

The plain path is in turn compared with transformers itself on a sample of each template's records: the ids of
`apply_chat_template(..., tokenize=True)` (`sanitize_control_tokens=True` for a record that spells an added token),
and, for a record that spells none, the labels of transformers' assistant mask with the template's derived training
variant (`{% generation %}` around each answer), as `helpers.expected_labels` takes them.

Records come from a seeded generator (`records`): plain chats, system prompts, several turns, OpenAI tool calls
(arguments as a mapping or a JSON string, parallel calls, results), reasoning (a field, or a leading <think> in the
content), and text that spells markup and control tokens, the shape markers' `@@1@@`, JSON's specials, whitespace
at the ends, non-ASCII and empty strings. HF_CHAT_TEMPLATES_DIFFERENTIAL_RECORDS sets how many per template.
"""

from __future__ import annotations

import json
import os
import random
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TemplateChoice, derive_training_template, get_family, list_families, prepare
from hf_chat_templates.conversations.normalize import Normalizer
from hf_chat_templates.training import report as report_module
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import corpus_manifest, corpus_names, corpus_templates, model_folder, write_jsonl

RECORDS = int(os.environ.get("HF_CHAT_TEMPLATES_DIFFERENTIAL_RECORDS", "500"))
SAMPLE = 30  # records per template compared with transformers itself
COLUMNS = ("input_ids", "labels", "attention_mask")

# ---- the records ---------------------------------------------------------------------------------------------

PLAIN = [
    "Hello there",
    "What is the capital of France?",
    "Paris.",
    "Sure, here it is.",
    "Explain recursion in one sentence",
    "A function that calls itself.",
    "Thanks!",
    "the answer is 42",
    "Write a haiku about autumn",
    "Leaves fall, quiet ground",
]
# Text a template may test, trim, escape or split on, or the shape markers' spelling
TRICKY = [
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    '"',
    "\\",
    "{}",
    '{"a": "b\\n"}',
    "@@1@@",
    "@@",
    "Привет, мир",
    "你好世界",
    "🦙",
    "Ⅻ",
    "é",
    "```",
    "'",
    "[",
    "%s",
    "{{ x }}",
    "{% if %}",
    "<think>",
    "</think>",
]
# Markup and control tokens of the templates (each template's own are added to these)
MARKUP = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "<|im_end|>",
    "<|im_start|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "[INST]",
    "</s>",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
# A tool whose own text is hostile: its description spells markup, JSON's specials and a marker
HOSTILE_TOOL = {
    "type": "function",
    "function": {
        "name": "run",
        "description": 'Runs code; never write <tool_call> or "@@1@@" in it \\ {}',
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}


class Texts:
    """The strings of one record: plain sentences mostly, tricky pieces often, markup when the record is hostile."""

    def __init__(self, rng: random.Random, markup: list[str]) -> None:
        self.rng, self.markup = rng, markup

    def __call__(self) -> str:
        rng = self.rng
        if rng.random() < 0.05:
            return ""
        pools = [PLAIN, PLAIN, PLAIN, TRICKY, *([self.markup] if self.markup else [])]
        pieces = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 3))]
        text = rng.choice(["", " ", "\n"]).join(pieces)
        if rng.random() < 0.15:
            text = rng.choice([" ", "\n", "\n\n", "  "]) + text
        if rng.random() < 0.15:
            text += rng.choice([" ", "\n", "\n\n", "\t"])
        return text


def _call(texts: Texts, k: int, as_string: bool) -> dict[str, Any]:
    rng = texts.rng
    if rng.random() < 0.7:
        name, arguments = "get_weather", {"city": texts(), "days": rng.choice([1, 3])}
    else:
        name, arguments = "search", {"query": texts()}
    return {
        "id": f"call{k:05d}",  # nine alphanumerics: Mistral's template refuses any other id
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False) if as_string else arguments},
    }


def _tool_turns(texts: Texts, first_id: int) -> list[dict[str, Any]]:
    """An assistant turn of one to three (parallel) calls and a result for each."""
    rng = texts.rng
    as_string = rng.random() < 0.35
    calls = [_call(texts, first_id + j, as_string) for j in range(rng.choice([1, 1, 2, 3]))]
    turns: list[dict[str, Any]] = [
        {"role": "assistant", "content": rng.choice([None, "", "", texts()]), "tool_calls": calls}
    ]
    for call in calls:
        turns.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": texts()})
    return turns


def _answer(texts: Texts, reasoning: bool) -> dict[str, Any]:
    message = {"role": "assistant", "content": texts()}
    if texts.rng.random() < 0.2:  # reasoning in the content: templates split on it, or prompt with "<think>\n"
        message["content"] = f"<think>\n{texts()}\n</think>\n\n{message['content']}"
    if reasoning:
        message["reasoning_content"] = texts()
    return message


def record(rng: random.Random, markup: list[str]) -> dict[str, Any]:
    """One conversation: a plain chat, with a system prompt, several turns, tool calls, reasoning, or a mix."""
    hostile = rng.random() < 0.3
    texts = Texts(rng, markup if hostile else [])
    kind = rng.choice(["plain", "plain", "system", "multi", "tools", "tools", "reasoning", "agent"])
    messages: list[dict[str, Any]] = []
    if kind in ("system", "agent") or rng.random() < 0.2:
        messages.append({"role": "system", "content": texts()})
    for turn in range(rng.randint(2, 3) if kind in ("multi", "agent") else 1):
        messages.append({"role": "user", "content": texts()})
        if kind in ("tools", "agent") and rng.random() < 0.8:
            messages += _tool_turns(texts, 10 * turn)
        messages.append(_answer(texts, kind in ("reasoning", "agent") and rng.random() < 0.7))
    if kind in ("tools", "agent") or rng.random() < 0.1:
        tools = [*TOOLS, HOSTILE_TOOL] if hostile and rng.random() < 0.3 else TOOLS
        return {"messages": messages, "tools": tools}
    return {"messages": messages}


def records(name: str, markup: list[str], count: int = RECORDS) -> list[dict[str, Any]]:
    """`count` records for template `name`, the same ones every run."""
    rng = random.Random(zlib.crc32(name.encode()))
    return [record(rng, markup) for _ in range(count)]


def strings(value: Any) -> list[str]:
    """Every string in `value` (dict values, list items)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


# ---- the templates -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A template on its tokenizer folder, with the tokens its training variant is derived from."""

    name: str
    folder: Path
    kwargs: dict[str, Any]
    stops: tuple[str, ...]
    controls: tuple[str, ...]


# Gemma 4 with thinking off ends its generation prompt with an empty thought channel that no rendered model turn
# has (model.toml, prefix-stable): no answer would train, and only the reasons records are left out would compare
KWARGS = {"gemma-4": {"enable_thinking": True}}
# The SentencePiece vocabulary of gemma3-tools (mistral-v3-sp): its Metaspace pre-tokenizer writes "▁" before the
# start of the text only, so a segment encodes differently alone, and tiktoken encodes byte-level BPE only: each
# rendering is encoded whole by the tokenizer. Its records are still rendered by shape.
ENCODED_WHOLE = {"family:gemma3-tools": ("Metaspace", "ByteLevel")}
NAMES = [*corpus_names(), *(f"family:{f.name}" for f in list_families())]


@pytest.fixture(scope="module")
def case(
    llama3_base: Path, installed_variants: dict[tuple[str, str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Case]:
    """`case(name)`: the corpus template `name` as the model ships it, or `family:NAME`'s default variant."""
    root = tmp_path_factory.mktemp("differential")
    made: dict[str, Case] = {}

    def get(name: str) -> Case:
        if name in made:
            return made[name]
        if name.startswith("family:"):
            family = get_family(name.removeprefix("family:"))
            variant = family.variant(family.default_variant)
            folder = installed_variants[(family.name, variant.name)]
            made[name] = Case(name, folder, dict(variant.kwarg_defaults), variant.stop_tokens, variant.control_tokens)
        else:
            manifest = corpus_manifest(name)
            texts = " ".join(p.read_text(encoding="utf-8") for p in corpus_templates(name).values())
            tokens = [*manifest["special_tokens"], *manifest.get("added_tokens", [])]
            made[name] = Case(
                name,
                model_folder(name, llama3_base, root / name),
                {**manifest.get("kwargs", {}), **KWARGS.get(name, {})},
                tuple(manifest["stop_tokens"]),
                tuple(t for t in tokens if t in texts),
            )
        return made[name]

    return get


@dataclass(frozen=True)
class Prepared:
    """A template's records through both paths: the reports, and the rows with the line each came from."""

    case: Case
    records: list[dict[str, Any]]
    fast: dict[str, Any]
    exact: dict[str, Any]
    fast_rows: list[dict[str, list[int]]]
    exact_rows: list[dict[str, list[int]]]
    lines: list[int]


def rows_of(folder: Path) -> list[dict[str, list[int]]]:
    from datasets import load_from_disk

    columns = load_from_disk(str(folder))[:]
    return [dict(zip(COLUMNS, row)) for row in zip(*(columns[c] for c in COLUMNS))]


def written_lines(report: dict[str, Any]) -> list[int]:
    """The line each row was written from: every line the report does not list as left out."""
    out = {entry["line"] for kind in ("bad_lines", "unrendered", "skipped") for entry in report[kind]}
    assert len(out) == report["records"] - report["written"], "the report lists only the first records left out"
    return [n for n in range(1, report["records"] + 1) if n not in out]


@pytest.fixture(scope="module")
def prepared(case: Callable[[str], Case], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Prepared]:
    """`prepared(name)`: the template's records through both paths, once per module. The reports list every
    record left out (not the first hundred of each kind), so that every reason is compared."""
    root = tmp_path_factory.mktemp("prepared")
    made: dict[str, Prepared] = {}

    def get(name: str) -> Prepared:
        if name in made:
            return made[name]
        c = case(name)
        data = records(name, [*MARKUP, *c.controls, *c.stops])
        folder = root / name.replace(":", "-")
        folder.mkdir(exist_ok=True)
        jsonl = write_jsonl(folder / "records.jsonl", [json.dumps(r, ensure_ascii=False) for r in data])
        choice = TemplateChoice(kwargs=c.kwargs or {})
        options: dict[str, Any] = {"choice": choice, "max_skipped": "100%", "force": True}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(report_module, "MAX_LISTED", len(data))
            fast = prepare(c.folder, jsonl, folder / "fast", **options).to_dict()
            exact = prepare(c.folder, jsonl, folder / "exact", exact=True, **options).to_dict()
        fast_rows, exact_rows = rows_of(folder / "fast"), rows_of(folder / "exact")
        made[name] = Prepared(c, data, fast, exact, fast_rows, exact_rows, written_lines(exact))
        return made[name]

    return get


# What only the fast paths' report says (how each fared), or differs between two runs by nature
FAST_PATH_KEYS = {"output", "exact", "shapes", "segment_cache", "encoder"}


def first_difference(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def difference(
    tokenizer: Any, got: dict[str, list[int]], expected: dict[str, list[int]], sides: tuple[str, str]
) -> str:
    """The first column in which two rows differ, at which token, each side's token there decoded (and for labels,
    trained or not), after the text both share."""
    column = next(c for c in expected if got[c] != expected[c])
    at = first_difference(got[column], expected[column])

    def side(row: dict[str, list[int]]) -> str:
        if at >= len(row[column]):
            return "the end of the row"
        ids = row["input_ids"]
        token = f"{tokenizer.decode(ids[at : at + 1])!r} (id {ids[at]})"
        if column == "labels":
            return f"{token} {'trained' if row['labels'][at] != IGNORE_INDEX else 'not trained'}"
        return token if column == "input_ids" else f"{column} {row[column][at]}"

    before = tokenizer.decode(expected["input_ids"][max(0, at - 12) : at])
    return (
        f"{column} first differ at token {at}, after {before!r}: "
        + f"{sides[0]} {side(got)}, {sides[1]} {side(expected)}"
    )


# ---- the fast paths against the plain path -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_paths_give_the_plain_paths_rows(name: str, prepared: Callable[[str], Prepared]) -> None:
    from transformers import AutoTokenizer

    p = prepared(name)
    # the records left out first (the rows are then the same records'), then the rows, then the rest of the reports
    for key in ("records", "written", "bad_lines", "unrendered", "skipped"):
        assert p.fast[key] == p.exact[key], f"{name}: {key} differ: fast path {p.fast[key]}, plain path {p.exact[key]}"
    assert len(p.fast_rows) == len(p.exact_rows) == len(p.lines) > 0
    for line, got, expected in zip(p.lines, p.fast_rows, p.exact_rows):
        if got != expected:
            tokenizer = AutoTokenizer.from_pretrained(str(p.case.folder))
            why = difference(tokenizer, got, expected, ("fast path", "plain path"))
            shown = json.dumps(p.records[line - 1], ensure_ascii=False)
            pytest.fail(f"{name}, line {line}: {why}\nrecord: {shown}", pytrace=False)
    differ = {k: (v, p.exact.get(k)) for k, v in p.fast.items() if k not in FAST_PATH_KEYS and v != p.exact.get(k)}
    assert not differ, f"{name}: the reports differ (fast path, plain path): {differ}"


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_paths_stayed_on(name: str, prepared: Callable[[str], Prepared]) -> None:
    """Equal rows prove nothing where every record took the plain path. Records that spell a control token are
    rendered directly by design (a span's end may fall on the spelling) and encoded piece by piece; every other
    record is filled in from its shape, rendered directly only where the template's questions of its text answer
    otherwise. A quarter at least were filled in and not checked against the plain path (the first records and each
    new shape's first are): the fast path alone made their rows."""
    report = prepared(name).fast
    shapes, segments, encoder = report["shapes"], report["segment_cache"], report["encoder"]
    assert shapes["on"], f"{name}: rendering by shape turned off: {shapes['off_reason']}"
    by_shape = report["written"] - report["control_spellings"]
    assert shapes["filled"] + shapes["direct"] == by_shape, f"{name}: records unaccounted for: {shapes}"
    assert by_shape >= 20 and shapes["filled"] >= 0.9 * by_shape, f"{name}: few records filled in: {shapes}"
    assert shapes["filled"] - shapes["checked"] >= 0.25 * by_shape, f"{name}: most fills were checked: {shapes}"
    if name in ENCODED_WHOLE:
        segments_why, encoder_why = ENCODED_WHOLE[name]
        assert not segments["on"] and segments_why in segments["off_reason"], segments
        assert not encoder["tiktoken"] and encoder_why in encoder["off_reason"], encoder
        return
    assert segments["on"] and encoder["tiktoken"], f"{name}: {segments['off_reason'] or encoder['off_reason']}"
    assert segments["lookups"] >= by_shape and segments["hits"] > 0, f"{name}: the segment cache served little"


# ---- the plain path against transformers ---------------------------------------------------------------------


def transformers_labels(tokenizer: Any, case: Case, record: dict[str, Any]) -> list[int]:
    """`helpers.expected_labels` on a loaded tokenizer: transformers' assistant mask with the training variant of
    the template that renders the record (the `tool_use` one given tools, when the folder has one)."""
    template = tokenizer.get_chat_template(None, record.get("tools"))
    out = tokenizer.apply_chat_template(
        record["messages"],
        tools=record.get("tools"),
        chat_template=derive_training_template(template, case.stops, case.controls),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        **case.kwargs,
    )
    return [i if m else IGNORE_INDEX for i, m in zip(out["input_ids"], out["assistant_masks"])]


@pytest.mark.parametrize("name", NAMES)
def test_the_plain_path_gives_transformers_ids_and_labels(name: str, prepared: Callable[[str], Prepared]) -> None:
    """On a sample of the records written whose normalization changed nothing (transformers gets them as they
    are): ids equal `apply_chat_template(..., tokenize=True)`, with `sanitize_control_tokens` for a record that
    spells an added token, and labels equal transformers' assistant mask for a record that spells none."""
    from transformers import AutoTokenizer

    p = prepared(name)
    tokenizer = AutoTokenizer.from_pretrained(str(p.case.folder))

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **p.case.kwargs)

    normalizer = Normalizer.for_template(render)  # decided as prepare decides it, on transformers' renderings
    added = sorted((t.content for t in tokenizer.added_tokens_decoder.values()), key=len, reverse=True)
    spelling = re.compile("|".join(map(re.escape, added)))
    as_is = [(line, row) for line, row in zip(p.lines, p.exact_rows) if not normalizer.apply(p.records[line - 1])[1]]
    sample = random.Random(name).sample(as_is, min(SAMPLE, len(as_is)))
    # DeepSeek-R1-Distill trains only answers after tool results (its generation prompt opens a <think> that its
    # rendered answers lack): its fewest records, about 50, of which 20-odd are left as they are
    assert len(sample) >= 20, f"{name}: {len(sample)} records left as they are to compare"
    labelled = 0
    for line, row in sorted(sample):
        record = p.records[line - 1]
        spelled = spelling.search("\0".join(strings(record))) is not None
        ids = tokenizer.apply_chat_template(
            record["messages"],
            tools=record.get("tools"),
            tokenize=True,
            return_dict=False,
            sanitize_control_tokens=spelled,
            **p.case.kwargs,
        )
        expected = {"input_ids": list(ids)}
        if not spelled:
            expected["labels"] = transformers_labels(tokenizer, p.case, record)
            labelled += 1
        if any(row[column] != want for column, want in expected.items()):
            why = difference(tokenizer, row, expected, ("plain path", "transformers"))
            shown = json.dumps(record, ensure_ascii=False)
            pytest.fail(f"{name}, line {line}: {why}\nrecord: {shown}", pytrace=False)
    assert labelled >= len(sample) // 3, f"{name}: {labelled} of {len(sample)} records had their labels compared"
