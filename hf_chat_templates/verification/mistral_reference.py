"""mistral-common as the official renderer of any Mistral instruct template (`[INST]`…`[/INST]`, `[TOOL_CALLS]`,
`[AVAILABLE_TOOLS]`, `[SYSTEM_PROMPT]`): a bundled family's, a `--template` file's or a folder's own.

Both sides are token ids on one of mistral-common's own vocabularies, whatever tokenizer the template is installed
on: the reference is `MistralTokenizer.encode_chat_completion(ChatCompletionRequest)` (for a conversation that ends
with an assistant turn, the request with that answer, as mistral-common encodes training data); the template's
side is its rendering (with Mistral's `<s>` and `</s>` as bos/eos) tokenized as mistral-common tokenizes text:
never a control token from a string, so the rendering is cut at the vocabulary's special tokens and each piece of
text between them is encoded on its own. SentencePiece pieces are encoded with no dummy-prefix `▁`
(`encode("☺" + text)[2:]`, mistral-common's own way to encode text that follows other tokens): a space the
template writes is the `▁` the token gets, as the documented formats say (`<s>[INST] Hi[/INST] Hello</s>` for v3,
`<s>[INST]Hi[/INST]Hello</s>` for tekken); mistral-common's generated templates tokenize back to its own ids so.

Which version a template follows is decided by rendering, never by names: each version is compared on the
format's skeleton (one turn, one answer, a system message, tools declared, a tool call and its result), and the
version whose ids equal the template's on all of them is the match. Versions and their vocabularies (the files
mistral-common ships in `mistral_common/data/`): v1, v2, v3, v7 on their SentencePiece models; v3 on tekken
(Mistral Nemo, Ministral); v7, v11 and v13 on tekken, which mistral-common ships no file for, use the shipped
tekken vocabulary with the v7+ tekken special tokens ([ARGS], [CALL_ID], [THINK], [/THINK] at ranks 32-35).
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..conversations.probes import Probe, core_probes
from .mistral_request import BOS, default_system_prompt, openai_messages, system_content

# What marks a template as Mistral's instruct format.
MARKERS = ("[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[SYSTEM_PROMPT]")
VERSIONS = ("v1", "v2", "v3", "v3-tekken", "v7", "v7-tekken", "v11-tekken", "v13-tekken")
# The core probes mistral-common can express, compared as they are and at each point a model is asked to answer.
PROBE_IDS = (
    "generation-prompt",
    "plain",
    "system",
    "multi-turn",
    "tools-declared",
    "tool-call",
    "tool-call-json-arguments",
    "parallel-tool-calls",
)
# The format's skeleton, which decides the version: one turn, one answer, a system message, tools, a call and result.
# A version matches when its tokens on the first five are the template's but for whitespace (a space too many or
# too few is a difference to report, not another format); among those, the closest on all six wins, counted in
# characters: whitespace tells SentencePiece formats from tekken ones, the call and its result v2 from v3 and
# v7, v11, v13 apart (how a result's content is escaped is a difference to report too).
SKELETON = ("generation-prompt", "plain", "plain@1", "system@2", "tools-declared@1", "tool-call@3")
REQUIRED = SKELETON[:5]
TOOL_MARKUP = ("[AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]")
EOS = "</s>"
_SPM_FILES = {
    "v1": "tokenizer.model.v1",
    "v2": "mistral_instruct_tokenizer_240216.model.v2",
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
    "v7": "mistral_instruct_tokenizer_241114.model.v7",
}
_TEKKEN_FILE = "tekken_240718.json"
# The v7+ tekken files' special tokens after the 20 of the older files, by rank.
_LATER_SPECIALS = {32: "[ARGS]", 33: "[CALL_ID]", 34: "[THINK]", 35: "[/THINK]"}


def is_mistral_template(*texts: str | None) -> bool:
    """Whether a template (or its renderings) writes Mistral's instruct markup: `[INST]` with `[/INST]`, or a
    tool/system tag only Mistral's format has."""
    joined = "".join(t for t in texts if t)
    return ("[INST]" in joined and "[/INST]" in joined) or any(m in joined for m in MARKERS[2:])


@dataclass(frozen=True)
class Case:
    """One conversation both sides render: a probe, or a probe's first k messages with a generation prompt."""

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    add_generation_prompt: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cases() -> list[Case]:
    """The probes of PROBE_IDS (tool-call ids in Mistral's 9-character format) and their generation points."""
    found = []
    for probe in core_probes("mistral"):
        if probe.id not in PROBE_IDS:
            continue
        tools = probe.tool_list()
        found.append(Case(probe.id, probe.message_list(), tools, probe.add_generation_prompt))
        found += [Case(f"{probe.id}@{k}", probe.message_list()[:k], tools, True) for k in _points(probe)]
    return found


def _points(probe: Probe) -> tuple[int, ...]:
    return () if probe.add_generation_prompt else probe.generation_points


# ---- mistral-common's side ------------------------------------------------------------------------------------


def _data_path() -> Any:
    import mistral_common

    return Path(mistral_common.__file__).parent / "data"


@functools.cache
def _inner(version: str) -> Any:
    """The version's text tokenizer: its SentencePiece model, or the shipped tekken vocabulary (with the v7+
    special tokens and the version set, for v7, v11 and v13)."""
    from mistral_common.tokens.tokenizers.base import TokenizerVersion
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    if version in _SPM_FILES:
        return SentencePieceTokenizer(_data_path() / _SPM_FILES[version])
    path = _data_path() / _TEKKEN_FILE
    if version == "v3-tekken":
        return Tekkenizer.from_file(path)
    if version != "v7-tekken":
        tekken = copy.copy(_inner("v7-tekken"))
        tekken._version = TokenizerVersion(version.split("-")[0])
        return tekken
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    config = data["config"]
    specials = list(Tekkenizer.DEPRECATED_SPECIAL_TOKENS)
    for rank in range(len(specials), max(_LATER_SPECIALS) + 1):
        name = _LATER_SPECIALS.get(rank, Tekkenizer.SPECIAL_TOKEN_TEMPLATE.format(id=rank))
        specials.append({"rank": rank, "token_str": name, "is_control": True})
    return Tekkenizer(
        data["vocab"],
        specials,
        pattern=config["pattern"],
        vocab_size=config["default_vocab_size"],
        num_special_tokens=config["default_num_special_tokens"],
        version=TokenizerVersion.v7,
        _path=path,
    )


@functools.cache
def mistral_tokenizer(version: str, training: bool = False) -> Any:
    """mistral-common's MistralTokenizer for one of VERSIONS (raises MissingDependencyError without it), validating
    requests as for fine-tuning (a conversation that ends with the answer) when `training`."""
    from ..errors import missing_dependency

    try:
        from mistral_common.protocol.instruct.normalize import get_normalizer
        from mistral_common.protocol.instruct.validator import ValidationMode, get_validator
        from mistral_common.tokens.tokenizers import instruct
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    except ImportError:
        raise missing_dependency("mistral-common", "reference", "reference-parity for Mistral templates") from None
    inner = _inner(version)
    classes = {
        "v1": instruct.InstructTokenizerV1,
        "v2": instruct.InstructTokenizerV2,
        "v3": instruct.InstructTokenizerV3,
        "v7": instruct.InstructTokenizerV7,
        "v11": instruct.InstructTokenizerV11,
        "v13": instruct.InstructTokenizerV13,
    }
    mode = ValidationMode.finetuning if training else ValidationMode.test
    return MistralTokenizer(
        classes[version.split("-")[0]](inner),
        validator=get_validator(inner.version, mode=mode),
        request_normalizer=get_normalizer(inner.version, None),
    )


class Unexpressible(Exception):
    """mistral-common refuses this conversation (its validator, or a version without the feature)."""


def reference_ids(version: str, case: Case, default_system: str | None = None) -> list[int]:
    """mistral-common's ids for `case` (raises Unexpressible), with `default_system` as its system message when
    it has none."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    messages = case.messages
    if default_system is not None and not any(m["role"] == "system" for m in messages):
        thinks = getattr(mistral_tokenizer(version).instruct_tokenizer, "BEGIN_THINK", None) is not None
        messages = [{"role": "system", "content": system_content(default_system, thinks)}, *messages]
    try:
        request = ChatCompletionRequest.from_openai(openai_messages(messages), case.tools)
        training = not case.add_generation_prompt and case.messages[-1]["role"] == "assistant"
        return list(mistral_tokenizer(version, training).encode_chat_completion(request).tokens)
    except Exception as err:  # a version without tools, a validator's refusal: not a probe this version expresses
        raise Unexpressible(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None


# ---- the template's side, on the same vocabulary --------------------------------------------------------------


@functools.cache
def _specials(version: str) -> tuple[dict[str, int], re.Pattern[str]]:
    inner = mistral_tokenizer(version).instruct_tokenizer.tokenizer
    if hasattr(inner, "_special_tokens_reverse_vocab"):
        found = {s: i for s, i in inner._special_tokens_reverse_vocab.items() if not s.startswith("<SPECIAL_")}
    else:
        sp = inner._model
        found = {sp.id_to_piece(i): i for i in range(sp.get_piece_size()) if sp.IsControl(i) or sp.IsUnknown(i)}
    pattern = re.compile("|".join(re.escape(s) for s in sorted(found, key=len, reverse=True)))
    return found, pattern


def encode_text(version: str, text: str) -> list[int]:
    """`text` on the version's vocabulary as mistral-common tokenizes it: its special tokens one id each, and the
    text between them encoded piece by piece (SentencePiece with no dummy prefix)."""
    inner = mistral_tokenizer(version).instruct_tokenizer.tokenizer
    specials, pattern = _specials(version)
    spm = not hasattr(inner, "_special_tokens_reverse_vocab")
    out: list[int] = []
    pos = 0
    for match in [*pattern.finditer(text), None]:
        piece = text[pos : match.start() if match else len(text)]
        if piece and spm:
            marker = inner.encode("☺", bos=False, eos=False)
            ids = inner.encode("☺" + piece, bos=False, eos=False)
            if ids[: len(marker)] != marker:  # the marker merged into the text: encode it with its prefix
                ids = marker + inner.encode(piece, bos=False, eos=False)
            out += ids[len(marker) :]
        elif piece:
            out += inner.encode(piece, bos=False, eos=False)
        if match is not None:
            out.append(specials[match.group()])
            pos = match.end()
    return out


def special_ids(version: str, *names: str) -> tuple[int, ...] | None:
    """The ids of the version's special tokens `names` (`[INST]`, `[AVAILABLE_TOOLS]`, …), or None when it lacks
    one."""
    found = _specials(version)[0]
    return tuple(found[n] for n in names) if all(n in found for n in names) else None


def pieces(version: str, ids: list[int]) -> list[str]:
    inner = mistral_tokenizer(version).instruct_tokenizer.tokenizer
    return [inner.id_to_piece(i) for i in ids]


def token_texts(version: str, ids: list[int]) -> list[tuple[int, str, bool]]:
    """(id, its text with `▁` as a space, whether it is a special token) for each of `ids`."""
    specials = set(_specials(version)[0].values())
    return [(i, _text(version, [p]), i in specials) for i, p in zip(ids, pieces(version, ids))]


# ---- both sides -----------------------------------------------------------------------------------------------


def compare_case(version: str, case: Case, text: str, default_system: str | None = None) -> dict[str, Any]:
    """{"unsupported": why}, {"equal": n tokens}, or the first difference: its token position, the message it
    falls in, and a few tokens of each side from there."""
    try:
        expected = reference_ids(version, case, default_system)
    except Unexpressible as why:
        return {"unsupported": str(why)}
    got = encode_text(version, text)
    if got == expected:
        return {"equal": len(got)}
    apart = _apart(version, got, expected) if case.id in SKELETON else None
    same_shape = _shape(version, got) == _shape(version, expected)
    i = next((k for k, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    theirs = _text(version, pieces(version, expected[i : i + 6])).strip()
    wanted = [
        k
        for k, m in enumerate(case.messages)
        if theirs and isinstance(m.get("content"), str) and m["content"].startswith(theirs)
    ]
    return {
        "wanted": wanted[0] if wanted else None,
        "wanted_role": case.messages[wanted[0]]["role"] if wanted else None,
        "apart": apart,
        "same_shape": same_shape,
        "at": i,
        "message": _message_at(version, case, i, default_system),
        "template": pieces(version, got[i : i + 6]),
        "reference": pieces(version, expected[i : i + 6]),
        "before": pieces(version, expected[max(0, i - 3) : i]),
        "template_ids": got[i : i + 6],
        "reference_ids": expected[i : i + 6],
    }


_WHITESPACE = re.compile(r"\s|▁|<0x0[9AD]>|<0x20>")


def _shape(version: str, ids: list[int]) -> str:
    """The tokens written out with every whitespace taken away: what a missing or extra space does not change."""
    return _WHITESPACE.sub("", "".join(pieces(version, ids)))


def _apart(version: str, got: list[int], expected: list[int]) -> int:
    """How many characters the two sides differ by, written out as text (what decides the closest version)."""
    ours, theirs = _text(version, pieces(version, got)), _text(version, pieces(version, expected))
    start = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    ours, theirs = ours[start:], theirs[start:]
    end = next((i for i, (a, b) in enumerate(zip(reversed(ours), reversed(theirs))) if a != b), 0)
    ours, theirs = ours[: len(ours) - end], theirs[: len(theirs) - end]
    if len(ours) * len(theirs) > 4_000_000:  # far apart: no need to know how far
        return len(ours) + len(theirs)
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    return len(ours) + len(theirs) - 2 * sum(b.size for b in matcher.get_matching_blocks())


def _message_at(version: str, case: Case, position: int, default_system: str | None) -> int | None:
    """The index of the message whose tokens (in mistral-common's encoding) hold `position`: the first k (not a
    system message, which versions before v7 write into a user turn) whose messages[:k+1] reach past it."""
    for k in range(len(case.messages)):
        if case.messages[k]["role"] == "system":
            continue
        prefix = Case(case.id, case.messages[: k + 1], case.tools, False)
        try:
            if len(reference_ids(version, prefix, default_system)) > position:
                return k
        except Unexpressible:
            continue
    return None


def compare(case_list: list[Case], texts: dict[str, str | None], versions: tuple[str, ...] = VERSIONS) -> dict:
    """Every version's outcome on every rendered case: {version: {case id: compare_case's value}}, the template's
    default system prompt given to mistral-common where a case has no system message."""
    default_system = default_system_prompt(texts)
    out: dict[str, dict[str, Any]] = {}
    for version in versions:
        out[version] = {}
        for case in case_list:
            text = texts.get(case.id)
            if text is not None:
                out[version][case.id] = compare_case(version, case, text, default_system)
    return out


def warm_up() -> None:
    """Every version's tokenizer loaded (the worker does it before its request comes)."""
    for version in VERSIONS:
        _specials(version)
        mistral_tokenizer(version, True)


# ---- which version, and what differs ------------------------------------------------------------------------


def writes_tools(texts: dict[str, str | None]) -> bool:
    return any(t and any(m in t for m in TOOL_MARKUP) for t in texts.values())


def compared_cases(case_list: list[Case], texts: dict[str, str | None]) -> list[Case]:
    """The cases to compare: those the template renders; those with tools only when it writes tool markup (a
    template without tool support is not compared on them: the data-loss checks report what it drops)."""
    tools = writes_tools(texts)
    return [c for c in case_list if texts.get(c.id) is not None and (tools or c.tools is None)]


@dataclass(frozen=True)
class Match:
    """The version chosen: `matched` when its ids equal the template's on every skeleton case it expresses;
    `same` the other versions whose skeleton outcomes are the same."""

    version: str
    matched: bool
    same: tuple[str, ...]
    skeleton: tuple[str, ...]


def _score(outcome: dict[str, Any], skeleton: list[str]) -> tuple[bool, int, int, int]:
    found = [outcome[c] for c in skeleton if c in outcome]
    counted = [o for o in found if "unsupported" not in o]
    alike = [outcome.get(c, {}) for c in skeleton if c in REQUIRED]
    plain = all("unsupported" not in outcome.get(c, {"unsupported": ""}) for c in ("generation-prompt", "plain@1"))
    matched = plain and all("equal" in o or o.get("same_shape") for o in alike if "unsupported" not in o)
    equal = sum(1 for o in counted if "equal" in o)
    return matched, -(len(found) - len(counted)), -sum(o.get("apart") or 0 for o in counted), equal


def choose(outcomes: dict[str, dict[str, Any]], compared: list[Case]) -> Match:
    """The version whose skeleton outcomes are closest: alike but for whitespace first, then fewest it cannot
    express, fewest characters apart (the tokens written out as text, `▁` as a space), most equal; the first of
    VERSIONS among equals."""
    ids = {c.id for c in compared}
    skeleton = [c for c in SKELETON if c in ids]
    scores = {v: _score(outcomes[v], skeleton) for v in outcomes}
    best = max(outcomes, key=lambda v: (scores[v], -VERSIONS.index(v)))
    same = tuple(v for v in outcomes if v != best and scores[v] == scores[best] and scores[best][0])
    return Match(best, scores[best][0], same, tuple(skeleton))


def describe_case(case_id: str) -> str:
    """`plain` → 'probe plain'; `system@2` → 'probe system's first 2 messages with a generation prompt'."""
    probe, _, k = case_id.partition("@")
    return f"probe {probe}" + (f"'s first {k} messages with a generation prompt" if k else "")


def _text(version: str, toks: list[str]) -> str:
    return "".join(toks).replace("▁", " ") if not version.endswith("tekken") else "".join(toks)


def fix_for(version: str, difference: dict[str, Any]) -> str:
    """The change that makes the template write what mistral-common encodes at the first difference."""
    ours, theirs = _text(version, difference["template"]), _text(version, difference["reference"])
    if theirs.startswith(" ") and not ours.startswith(" ") and theirs.lstrip(" ")[:1] == ours[:1]:
        return "write a space before this text: mistral-common encodes it with its leading space (▁)"
    if ours.startswith(" ") and not theirs.startswith(" ") and ours.lstrip(" ")[:1] == theirs[:1]:
        return "remove the space the template writes here: mistral-common encodes the text without it"
    if difference.get("wanted") is not None:
        return (
            f"write message {difference['wanted']} ({difference.get('wanted_role')})'s content here, where "
            f"mistral-common {version} writes it "
            "(before v7 the system message opens the last user turn; from v7 on it is written between "
            "[SYSTEM_PROMPT] and [/SYSTEM_PROMPT] where it stands)"
        )
    if '\\"' in ours and '\\"' not in theirs:
        return (
            "write the JSON value once: the template encodes a JSON string again (e.g. `arguments|tojson` on "
            "arguments that are already a JSON string); mistral-common parses it and writes the object"
        )
    return f"write {theirs!r} here, as mistral-common {version} does, where the template writes {ours!r}"


def shown(pieces_: list[str]) -> str:
    """Tokens one after another, whitespace visible, `|` between them."""
    from .results import visible

    return "|".join(visible(p) for p in pieces_)


# ---- the template's renderings --------------------------------------------------------------------------------


def rendered_texts(renderer: Any, case_list: list[Case]) -> dict[str, str | None]:
    """Each case rendered by the template (None where it raises), with Mistral's bos/eos, at the frozen clock; a
    tool-call turn without content again with "" where the template needs a string (mistral-common encodes both
    alike; `renders` reports the refusal)."""
    from ..template.rendering import frozen_clock
    from .context import CLOCKS

    texts: dict[str, str | None] = {}
    with frozen_clock(CLOCKS[0]):
        for case in case_list:
            emptied = [
                {**m, "content": ""} if m.get("tool_calls") and m.get("content") is None else m for m in case.messages
            ]
            for messages in (case.messages, emptied):
                flags = {"add_generation_prompt": case.add_generation_prompt, "bos_token": BOS, "eos_token": EOS}
                out = renderer.render(copy.deepcopy(messages), copy.deepcopy(case.tools), cache=False, **flags)
                if out.ok or emptied == case.messages:
                    break
            texts[case.id] = out.text if out.ok else None
    return texts


def claims_official(template: str, provenance: dict[str, str] | None = None) -> bool:
    """Whether the template says it is mistral-common's format (its text or its family's provenance names
    mistral-common): then a difference is an error, not a variant's choice."""
    said = template + " ".join((provenance or {}).values())
    return bool(re.search(r"mistral[-_ ]common", said, re.IGNORECASE))


def available() -> str | None:
    """None when mistral-common (and sentencepiece, for its SentencePiece models) can be imported, else why not."""
    import importlib.util

    missing = [name for name in ("mistral_common", "sentencepiece") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed" if missing else None
