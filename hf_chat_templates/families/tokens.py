"""The control and stop tokens of a template, and where they come from: what the caller declares, the bundled
family whose template it is, the folder's own generation stops, or what the template writes on conversations made
for the purpose (an inference, said so, with a note wherever it had to choose).

Inference does not depend on how tokens look. Control tokens are the bracketed fragments the template writes
(`<｜User｜>`, `<SPECIAL_11>`, `[gMASK]`) that its renderings confirm as turn structure: written once more for every
exchange, or before the first message; plus the tokenizer's registered special tokens it writes. The turn's
stop is the token written after every assistant answer; among several, one the folder lists as a generation stop
(`generation_config.json` `eos_token_id`) wins, and otherwise the first is taken and the choice is noted. A tool-call
turn's own stop is the first token after the call (one the folder lists first), never one the model writes inside
the call (Gemma 4 quotes each argument string with `<|"|>`). When the last answer is closed otherwise than the
earlier ones (`{{ eos_token }}` set to another token), the earlier answers' end is the stop.

A conversation the template raises on is rendered again as it would otherwise be sent (`render_surviving`: None
content as "", arguments as a JSON string, a tool given), so that a crash on one shape (DeepSeek concatenating
`message['content']`) hides none of the tokens; `verify`'s `renders` reports the crash itself."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..conversations.probes import Probe, tool_call, weather_tool
from ..conversations.suite import build_probes
from ..errors import UsageError, option
from ..template.analysis import (
    control_tokens_in,
    growing_fragments,
    literal_fragments,
    tokens_in_order,
    unregistered_role_markers,
)
from ..template.rendering import Rendered, Renderer
from ..template.syntax import template_literals as literal_text
from .registry import Variant, identify

INFERRED = "inferred from the template's renderings"
TOOL_NAME = "qztoolname"  # the tool of the conversations made for inference
DECLARED = "declared"


@dataclass(frozen=True)
class TemplateTokens:
    """A template's tokens. `turn_end` is False when no token ends an assistant turn (the stops, if any, are the
    next turn's tokens); `notes` say what inference chose or could not decide, for the user to confirm."""

    control_tokens: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    kwarg_defaults: dict[str, Any] = field(default_factory=dict)
    origin: str = ""
    notes: tuple[str, ...] = ()
    turn_end: bool = True
    markup_tokens: tuple[str, ...] = ()  # tool-call and reasoning tags: one id each, registered as plain tokens


def render_probe(renderer: Renderer, probe: Probe) -> Rendered:
    """A probe rendered with its own flags (generation prompt, prefill), as `verify` renders it."""
    return renderer.render(
        probe.message_list(),
        probe.tool_list(),
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )


# ---- renderings that survive a template's crash on a shape it does not take --------------------------------------
def with_empty_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every None content (or a tool-call turn's missing one) as "": DeepSeek's templates concatenate
    `message['content']`."""
    return [
        {**m, "content": ""} if m.get("content") is None and ("tool_calls" in m or "content" in m) else m
        for m in messages
    ]


def _with_string_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool call's dict arguments as a JSON string, as OpenAI sends them (templates that concatenate them)."""

    def call(c: Any) -> Any:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), dict):
            return c
        return {**c, "function": {**fn, "arguments": json.dumps(fn["arguments"])}}

    return [{**m, "tool_calls": [call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]


def render_surviving(
    renderer: Renderer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **flags: Any
) -> tuple[Rendered, str]:
    """The rendering, or when the template raises on it, the first of these that renders, and what was changed
    ("" when nothing was): None contents as "" (a template that concatenates `message['content']`), tool-call
    arguments as JSON strings (one that concatenates them), both, and for a conversation given no tools, one tool
    given (a template that tests `tools is defined`, true for the None transformers passes, and loops over it).
    Inference reads which tokens a template writes from it: a crash on one shape hides none of them."""
    first = renderer.render(messages, tools, **flags)
    if first.ok:
        return first, ""
    empty, strings = with_empty_content(messages), _with_string_arguments(messages)
    tries = [
        (empty, tools, 'None contents given as ""'),
        (strings, tools, "tool-call arguments given as JSON strings"),
        (_with_string_arguments(empty), tools, 'None contents as "" and arguments as JSON strings'),
    ]
    if tools is None:
        tries.append((messages, [weather_tool(TOOL_NAME)], "a tool given"))
    for changed, given, how in tries:
        if changed == messages and given is tools:
            continue
        again = renderer.render(changed, given, **flags)
        if again.ok:
            return again, how
    return first, ""


def surviving_texts(renderer: Renderer, probes: Iterable[Probe], rendered: Mapping[str, Rendered]) -> list[str]:
    """The probes' renderings (`rendered`, by probe id), each one that raises rendered again as `render_surviving`
    changes it: the texts token inference reads."""
    texts = []
    for p in probes:
        r = rendered.get(p.id)
        if r is None or not r.ok:
            flags = {
                "add_generation_prompt": p.add_generation_prompt,
                "continue_final_message": p.continue_final_message,
            }
            r, _ = render_surviving(renderer, p.message_list(), p.tool_list(), **flags)
        if r.ok and r.text:
            texts.append(r.text)
    return texts


# ---- conversations made for inference: sentinel content that holds no bracket, so no candidate comes from it ----
def _exchanges(count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(count):
        messages += [
            {"role": "user", "content": f"Question qz{i}1content?"},
            {"role": "assistant", "content": f"Answer qz{i}2content."},
        ]
    return messages


def _tool_rounds(count: int, *, arguments: int = 1) -> list[dict[str, Any]]:
    """`count` rounds of a question, a tool call with `arguments` string arguments, its result and an answer."""
    messages: list[dict[str, Any]] = []
    for i in range(count):
        call_id = f"c{i}abcdefg"  # nine alphanumerics: what Mistral's templates require
        values = {"city": f"qz{i}3argument", "country": f"qz{i}7argument", "street": f"qz{i}8argument"}
        messages += [
            {"role": "user", "content": f"Weather qz{i}1content?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call(TOOL_NAME, dict(list(values.items())[:arguments]), call_id=call_id)],
            },
            {"role": "tool", "content": f'{{"note": "qz{i}4toolresult"}}', "tool_call_id": call_id, "name": TOOL_NAME},
            {"role": "assistant", "content": f"Sunny qz{i}5content."},
        ]
    return messages


def _between(text: str, start: str, end: str | None) -> str | None:
    at = text.find(start)
    if at < 0:
        return None
    stop = text.find(end, at) if end else len(text)
    return text[at + len(start) : stop if stop >= 0 else len(text)]


def leading_fragments(candidates: Iterable[str], text: str, skip: Iterable[str] = ()) -> list[str]:
    """The candidates a rendering starts with, one after another (whitespace and the `skip` tokens, such as BOS,
    between them allowed): GLM's `[gMASK]<sop>`. A default system prompt's prose tags (`<role_description>`) come
    after text, so they are not among them."""
    wanted = set(candidates)
    ordered = sorted(wanted | {t for t in skip if t}, key=len, reverse=True)
    found: list[str] = []
    at = 0
    while True:
        at = len(text) - len(text[at:].lstrip())
        match = next((c for c in ordered if text.startswith(c, at)), None)
        if match is None:
            return found
        if match in wanted:
            found.append(match)
        at += len(match)


def _reasoned(count: int) -> list[dict[str, Any]]:
    messages = _exchanges(count)
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            m["reasoning_content"] = f"Thinking qz{i}6reasoning."
    return messages


def structural_fragments(renderer: Renderer) -> tuple[str, ...]:
    """The bracketed literal fragments the renderings confirm as turn structure: written once more for each added
    exchange, or leading the rendering."""
    candidates = literal_fragments(renderer.template)
    if not candidates:
        return ()
    found: list[str] = []
    (short, _), (long, _) = render_surviving(renderer, _exchanges(1)), render_surviving(renderer, _exchanges(2))
    if short.ok and long.ok:
        found += growing_fragments(candidates, short.text or "", long.text or "")
        found += leading_fragments(candidates, short.text or "", renderer.tokenizer.all_special_tokens)
    return tuple(c for c in candidates if c in found)


def markup_fragments(renderer: Renderer, structure: Iterable[str]) -> tuple[str, ...]:
    """The bracketed literal fragments written once more per tool-call round or per reasoned answer, or written
    for a tool call where a direct answer has none, that are not turn structure: tool-call and reasoning tags
    (`<tool_call>`, `<|tool_call>`, `<think>`; DeepSeek-R1's `<｜tool▁calls▁begin｜>`, written for the first call of
    a conversation only). Models ship them as added tokens, mostly plain ones that decoding keeps for the parsers
    that read them. Tags of the tool declarations (`<tools>`) are written either way, so they are not among them."""
    candidates = [c for c in literal_fragments(renderer.template) if c not in set(structure)]
    found: list[str] = []
    tools = [weather_tool(TOOL_NAME)]
    for short, long, given in (
        (_tool_rounds(1), _tool_rounds(2), tools),
        (_exchanges(1), _tool_rounds(1), tools),
        (_reasoned(1), _reasoned(2), None),
    ):
        (a, _), (b, _) = render_surviving(renderer, short, given), render_surviving(renderer, long, given)
        if a.ok and b.ok:
            found += growing_fragments(candidates, a.text or "", b.text or "")
    return tuple(c for c in candidates if c in found)


def inferred_control_tokens(
    renderer: Renderer, renderings: Iterable[str], probes: Iterable[Probe], declared: Iterable[str] = ()
) -> tuple[str, ...]:
    """`declared`; what the template writes in control-token shapes (never what only message content spells); the
    registered special tokens in its literals; and its structural fragments, whatever their shape."""
    added = {t.content: t for t in renderer.tokenizer.added_tokens_decoder.values()}
    probes, renderings, declared = tuple(probes), list(renderings), tuple(declared)
    content = [str(m.get("content", "")) for p in probes for m in p.messages]
    found = control_tokens_in(renderer.template, renderings, added, declared=declared, content=content)
    roles = {str(m.get("role")) for p in probes for m in p.messages}
    # `<|tool|>` built from the role by ChatGLM3's template, which has no tool role: no token of the model
    unsupported = unregistered_role_markers(renderer.template, renderings, roles, added).keys() - set(declared)
    return tuple(t for t in dict.fromkeys([*found, *structural_fragments(renderer)]) if t not in unsupported)


def generation_stops(tokenizer: Any, generation_config: Mapping[str, Any] | None) -> tuple[tuple[str, ...], str]:
    """The tokens generation stops on, as the folder says, and where that is said: `generation_config.json`'s
    `eos_token_id` when the folder has one, else the tokenizer's eos_token."""
    ids = generation_config.get("eos_token_id") if generation_config else None
    if ids is not None:
        ids = [ids] if isinstance(ids, int) else [i for i in ids if isinstance(i, int)] if isinstance(ids, list) else []
        size = len(tokenizer)
        tokens = [t for i in ids if 0 <= i < size and (t := tokenizer.convert_ids_to_tokens(i))]
        return tuple(dict.fromkeys(tokens)), "the folder's generation_config.json eos_token_id"
    eos = getattr(tokenizer, "eos_token", None)
    return ((eos,) if eos else ()), "the tokenizer's eos_token"


@dataclass(frozen=True)
class _Stops:
    tokens: tuple[str, ...]
    from_folder: bool
    notes: tuple[str, ...]
    turn_end: bool


def _closer(text: str, first: str, known: tuple[str, ...]) -> str | None:
    """The token that closes the first answer: the first one after it, unless that is the token the user's turn
    opens with (GLM ends a turn with the next turn's role token, which closes nothing)."""
    after = tokens_in_order(first, known)
    asked = text.find("qz01content")
    before = [t for t in known if t and text.rfind(t, 0, asked) >= 0]
    opener = max(before, key=lambda t: (text.rfind(t, 0, asked) + len(t), len(t)), default=None)
    return after[0] if after and after[0] != opener else None


def _own_end(renderer: Renderer, after_last: list[str]) -> bool:
    """Whether the first token after the last answer is that turn's own end as the template writes it (Harmony's
    `<|return|>`), not `{{ eos_token }}` set to whatever token the tokenizer's eos is (a tools suffix)."""
    if not after_last:
        return False
    again = renderer.render(_exchanges(2), eos_token="<qzeos>", cache=False)
    return again.ok and after_last[0] in (_between(again.text or "", "qz12content", None) or "")


def _turn_end(renderer: Renderer, known: tuple[str, ...], eos: tuple[str, ...]) -> tuple[str | None, bool, list[str]]:
    """The token written after every assistant answer (one the folder lists as a stop first), whether it came from
    the folder's list, and notes. When the last answer is not closed as the earlier ones are (a template that
    writes `{{ eos_token }}` there, set to another token, or nothing), the earlier answers' closing token is the
    stop: the last turn's defect is the template's, which verify reports, not the model's stop."""
    rendered, how = render_surviving(renderer, _exchanges(2))
    if not rendered.ok:
        return None, False, [f"a plain two-exchange conversation does not render ({rendered.error})"]
    notes = [f"a plain two-exchange conversation raises; read with {how}"] if how else []
    text = rendered.text or ""
    first, last = _between(text, "qz02content", "qz11content"), _between(text, "qz12content", None)
    if first is None or last is None:
        return None, False, [*notes, "the answers of a plain conversation are not in its rendering"]
    after_last = tokens_in_order(last, known)
    candidates = [t for t in tokens_in_order(first, known) if t in after_last]
    if not candidates and not _own_end(renderer, after_last) and (closer := _closer(text, first, known)) is not None:
        candidates = [closer]
        notes.append(
            f"earlier answers end with {closer}, the last one "
            + (f"with {' '.join(after_last)}" if after_last else "with no token")
            + f": took {closer} as the turn's stop (verify's structure check reports the last turn)"
        )
    candidates = candidates or after_last
    listed = [t for t in candidates if t in eos]
    if listed:
        return listed[0], True, notes
    if not candidates:
        return None, False, notes
    if len(candidates) > 1:
        notes.append(
            f"after each answer the template writes {' '.join(candidates)}: took {candidates[0]} as the turn's "
            f"stop; declare --stop-token if generation stops on another"
        )
    return candidates[0], False, notes


def _inside_call(renderer: Renderer, text: str, known: tuple[str, ...]) -> set[str]:
    """The tokens written inside the call of a tool round's rendering `text`: between the call's name and its
    argument, or once more for each argument string (Gemma 4 quotes strings with `<|"|>`, GLM wraps them in
    `<arg_value>`). The model writes them mid-call, so none of them ends a turn."""
    asked, argument = text.find("qz01content"), text.find("qz03argument")
    name = text.rfind(TOOL_NAME, max(asked, 0), max(argument, 0))
    inside = set(tokens_in_order(text[name:argument], known)) if asked >= 0 and name >= 0 else set()
    more, _ = render_surviving(renderer, _tool_rounds(1, arguments=3), [weather_tool(TOOL_NAME)])
    if more.ok and "qz07argument" in (longer := more.text or ""):
        inside |= {t for t in known if longer.count(t) > text.count(t)}
    return inside


def _call_end(renderer: Renderer, known: tuple[str, ...], eos: tuple[str, ...], stops: list[str]) -> str | None:
    """The token that ends a tool-call turn when it is not the answer's stop (Harmony's `<|call|>`): the first one
    after the call's argument that is not written inside the call."""
    rendered, _ = render_surviving(renderer, _tool_rounds(1), [weather_tool(TOOL_NAME)])
    text = (rendered.text or "") if rendered.ok else ""
    rest = _between(text, "qz03argument", "qz04toolresult")
    ends = tokens_in_order(rest or "", known)
    if ends:
        inside = _inside_call(renderer, text, known)
        ends = [t for t in ends if t not in inside]
    if not ends or any(t in stops for t in ends):
        return None
    return next((t for t in ends if t in eos), ends[0])


def inferred_stops(renderer: Renderer, control_tokens: Iterable[str], eos: tuple[str, ...], eos_source: str) -> _Stops:
    """The turn's stop and a tool-call turn's, from the renderings; with no token after the answers, the folder's
    generation stops the template writes (the next turn's role token, GLM's way), and `turn_end` False."""
    known = tuple(dict.fromkeys([*control_tokens, *eos]))
    turn, from_folder, notes = _turn_end(renderer, known, eos)
    stops = [turn] if turn else []
    call = _call_end(renderer, known, eos, stops)
    if call:
        from_folder = from_folder or call in eos
        if stops:
            notes.append(f"a tool-call turn ends with {call}, an answer with {stops[0]}: both are stops")
        stops.append(call)
    plain = render_surviving(renderer, _exchanges(2))[0].text or ""
    if turn:
        # A stop the folder lists that the template writes in a branch these conversations do not reach
        # (Llama's <|eom_id|>, after a built-in tool call).
        unreached = [t for t in eos if t not in stops and t in literal_text(renderer.template) and t not in plain]
        if unreached:
            notes.append(f"{' '.join(unreached)}: written by the template, and a stop in {eos_source}, so a stop too")
        return _Stops((*stops, *unreached), from_folder, tuple(notes), True)
    written = [t for t in eos if t in renderer.template or t in plain]
    stops += [t for t in written if t not in stops]
    notes.append(
        "no token ends an assistant turn: the model is never trained to stop after its last turn"
        + (f"; generation stops on {' '.join(stops)} ({eos_source})" if stops else "")
    )
    return _Stops(tuple(stops), bool(written), tuple(notes), False)


def template_tokens(
    tokenizer: Any,
    template: str,
    *,
    kwargs: dict[str, Any] | None = None,
    variant: Variant | None = None,
    stop_tokens: Iterable[str] | None = None,
    control_tokens: Iterable[str] | None = None,
    generation_config: Mapping[str, Any] | None = None,
    renderings: Iterable[str] | None = None,
    probes: Iterable[Probe] | None = None,
) -> TemplateTokens:
    """Declared tokens first; then the variant's (given, or identified by the template's sha256); then inferred,
    reading the folder's generation stops (`generation_config`, else the tokenizer's eos). Declared stop tokens
    replace the others; declared control tokens come before the ones found. `renderings` of `probes` may be passed
    when the caller has them (verify), else the probes are rendered here."""
    stops = tuple(stop_tokens) if stop_tokens is not None else None
    declared_controls = tuple(control_tokens or ())
    found = variant or (identified[1] if (identified := identify(template)) else None)
    if found is not None:
        tokens = TemplateTokens(
            found.control_tokens,
            found.stop_tokens,
            dict(found.kwarg_defaults),
            f"the bundled family {found.family}/{found.name}",
        )
    else:
        renderer = Renderer(tokenizer, template, kwargs)
        probe_list = tuple(probes if probes is not None else build_probes())
        if renderings is None:
            renderings = surviving_texts(renderer, probe_list, {p.id: render_probe(renderer, p) for p in probe_list})
        declared = tuple(dict.fromkeys([*declared_controls, *(stops or ())]))
        controls = inferred_control_tokens(renderer, renderings, probe_list, declared)
        markup = markup_fragments(renderer, controls)
        if stops is not None:
            tokens = TemplateTokens(controls, stops, {}, DECLARED, markup_tokens=markup)
        else:
            eos, eos_source = generation_stops(tokenizer, generation_config)
            inferred = inferred_stops(renderer, controls, eos, eos_source)
            origin = f"{eos_source}, where the template writes it" if inferred.from_folder else INFERRED
            tokens = TemplateTokens(
                controls, inferred.tokens, {}, origin, inferred.notes, inferred.turn_end, markup_tokens=markup
            )
    final_controls = tuple(dict.fromkeys([*declared_controls, *(stops or ()), *tokens.control_tokens]))
    return TemplateTokens(
        final_controls,
        stops if stops is not None else tokens.stop_tokens,
        tokens.kwarg_defaults,
        DECLARED if stops is not None else tokens.origin,
        tokens.notes if stops is None else (),
        tokens.turn_end if stops is None else True,
        tuple(t for t in tokens.markup_tokens if t not in final_controls),
    )


def check_declared_tokens(
    stop_tokens: Iterable[str] | None,
    control_tokens: Iterable[str] | None,
    templates: Iterable[str | None],
    renderings: Callable[[], Iterable[str]],
    *,
    allow_unwritten: bool = False,
) -> None:
    """Refuse a declared stop or control token that is empty, or that none of `templates` writes (in its text, or
    in `renderings()`, asked only when the text does not hold it): such a token would become the eos and a
    generation stop the model is never trained to write. `allow_unwritten` is the user's word that it is meant
    (a token the model writes that no template does)."""
    declared = [*(stop_tokens or ()), *(control_tokens or ())]
    if any(not t.strip() for t in declared):
        raise UsageError(
            f"{option('stop_tokens')} / {option('control_tokens')}: an empty or blank token",
            hint="give the token's text, e.g. --stop-token '<|im_end|>'",
            parameter="stop_tokens",
        )
    if allow_unwritten or not declared:
        return
    texts = [t for t in templates if t]
    literals = "\n".join(literal_text(t) for t in texts) + "\n".join(texts)
    missing = [t for t in dict.fromkeys(declared) if t not in literals]
    if missing:
        rendered = list(renderings())
        missing = [t for t in missing if not any(t in r for r in rendered)]
    if missing:
        raise UsageError(
            f"the template never writes the declared token{'s' * (len(missing) > 1)} "
            + ", ".join(repr(t) for t in missing)
            + ": as a stop it would end generation on a token the model is never trained to write",
            hint=f"check the spelling against the template, or pass {option('allow_unwritten_tokens')} if the "
            "model writes it though the template does not",
            parameter="stop_tokens",
        )


def probe_renderings(tokenizer: Any, templates: Iterable[str]) -> list[str]:
    """What each of `templates` renders for the probe conversations (those that render)."""
    probes = build_probes()
    out = []
    for template in templates:
        renderer = Renderer(tokenizer, template)
        out += [r.text for p in probes if (r := render_probe(renderer, p)).ok and r.text]
    return out
