"""What a template emits, read from its source and its renderings: the control tokens it writes and the token that
ends an assistant turn. These are inferences; `families.tokens` prefers declared tokens and a bundled family's, and
records in `TemplateTokens.origin` which one a command's tokens came from."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import jinja2.meta
import jinja2.nodes

from .syntax import parse_environment, template_literals

# Shapes that control tokens take in the wild; text tags like <tools> are deliberately not among them.
CONTROL_TOKEN_SHAPES = re.compile(
    r"<\|[^<>|\s]{1,48}\|>|<(?:start|end)_of_turn>|</?s>|<(?:bos|eos|pad)>|\[/?[A-Z][A-Z_]{1,30}\]"
)


def control_tokens_in(
    template: str,
    renderings: Iterable[str],
    added_tokens: Mapping[str, Any],
    *,
    declared: Iterable[str] = (),
    content: Iterable[str] = (),
) -> tuple[str, ...]:
    """`declared`, then every control-token-shaped string the template writes in its literals or its renderings
    (not one that only comes from message `content`), then every registered special added token in its literals.
    `added_tokens` maps a token's text to transformers' AddedToken."""
    tokens = list(declared)
    contents = [c for c in content if c]
    literal = template_literals(template)
    renderings = list(renderings)
    # A sentinel the template compares values against and no rendering shows (functionary's `<|NONE|>`) is no token.
    sentinels = {c for c in compared_literals(template) if not any(c in r for r in renderings)}
    for text in (literal, *renderings):
        for match in CONTROL_TOKEN_SHAPES.findall(text):
            if match not in tokens and match not in sentinels and not any(match in c for c in contents):
                tokens.append(match)
    for text, token in added_tokens.items():
        if token.special and text in literal and not text.isspace() and text not in tokens:
            tokens.append(text)
    return tuple(tokens)


def compared_literals(template: str) -> set[str]:
    """The string constants the template compares with (`x != "<|NONE|>"`, `"<tool_call>" in content`): values
    it tests for, which it writes only if a rendering shows them."""
    ast = parse_environment().parse(template)
    found: set[str] = set()
    for node in ast.find_all(jinja2.nodes.Compare):
        for operand in (node.expr, *(op.expr for op in node.ops)):
            if isinstance(operand, jinja2.nodes.Const) and isinstance(operand.value, str):
                found.add(operand.value)
    return found


# What may be one token whatever its shape: a bracketed run without whitespace, `<…>` or `[…]` (`<｜User｜>`,
# `<SPECIAL_11>`, `<|turn>`, `[gMASK]`). Candidates only: `structural_fragments` keeps those a rendering confirms.
FRAGMENT = re.compile(r"<[^<>\s]{1,62}>|\[[^\[\]\s]{1,62}\]")


def literal_fragments(template: str) -> tuple[str, ...]:
    """Every bracketed run without whitespace in the template's literals, in order, once each."""
    return tuple(dict.fromkeys(FRAGMENT.findall(template_literals(template))))


def growing_fragments(candidates: Iterable[str], shorter: str, longer: str) -> list[str]:
    """The candidates written more often in `longer` (a conversation with one more exchange) than in `shorter`:
    what the template writes per turn or per call (role markers, turn ends), not once (a tools block's tags)."""
    return [c for c in candidates if longer.count(c) > shorter.count(c)]


def tokens_in_order(text: str, tokens: Iterable[str]) -> list[str]:
    """The tokens of `tokens` that occur in `text`, by first position (the longer first at one position)."""
    found = sorted((at, -len(t), t) for t in set(tokens) if t and (at := text.find(t)) >= 0)
    return [t for _, _, t in found]


# What transformers passes to every template, and Jinja's own names: not keywords a caller chooses.
STANDARD_VARIABLES = {
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "raise_exception",
    "strftime_now",
    "namespace",
    "dict",
    "range",
    "loop",
    "none",
    "true",
    "false",
}


def template_kwargs(template: str) -> list[str]:
    """The keywords the template reads beyond transformers' standard variables (`date_string`, `enable_thinking`),
    sorted."""
    names = jinja2.meta.find_undeclared_variables(parse_environment().parse(template))
    return sorted(names - STANDARD_VARIABLES)


def reads_variable(template: str, name: str) -> bool:
    """Whether the template reads the variable `name` (`bos_token`, `eos_token`, …)."""
    return name in jinja2.meta.find_undeclared_variables(parse_environment().parse(template))


def writes_bos(template: str) -> bool:
    """Whether the template reads `bos_token` (and so writes BOS itself)."""
    return reads_variable(template, "bos_token")


# The tests that ask what type a value is: a template that asks it of content expects more than a string.
_TYPE_TESTS = frozenset({"string", "iterable", "sequence", "mapping"})


def _is_content(node: Any, names: set[str]) -> bool:
    """Whether `node` is a message's content: `x.content`, `x['content']`, a name set from one, through filters."""
    while isinstance(node, jinja2.nodes.Filter) and node.node is not None:
        node = node.node
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return isinstance(node, jinja2.nodes.Name) and node.name in names


def _content_names(ast: Any) -> set[str]:
    """The names `{% set %}` gives a message's content (or a name already holding it), transitively."""
    names: set[str] = set()
    while True:
        found = {
            assign.target.name
            for assign in ast.find_all(jinja2.nodes.Assign)
            if isinstance(assign.target, jinja2.nodes.Name) and _is_content(assign.node, names)
        }
        if found <= names:
            return names
        names |= found


def reads_content_parts(template: str) -> bool:
    """Whether the template shows it takes content as a list of parts: it loops over a message's content (what vLLM
    reads to send it parts), asks the type of a content (`message.content is string`, of a name set from one), or
    reads a part's `text` (`part.text`, `part['text']`, `map(attribute='text')`). A template that does none of these
    takes string content only, and llama.cpp and vLLM join a list of text parts into one string before rendering
    it. False for a template that does not parse."""
    from .engines.vllm import detect_content_format

    try:
        ast = parse_environment().parse(template)
    except Exception:  # a template that does not parse reads nothing; `renders` reports it
        return False
    if detect_content_format(template) == "openai":
        return True
    names = _content_names(ast)
    if any(t.name in _TYPE_TESTS and _is_content(t.node, names) for t in ast.find_all(jinja2.nodes.Test)):
        return True
    if any(node.attr == "text" for node in ast.find_all(jinja2.nodes.Getattr)):
        return True
    return any(node.value == "text" for node in ast.find_all(jinja2.nodes.Const))


# Roles every chat format has: a token built from one of them is the format's own, registered or forgotten.
CORE_ROLES = ("user", "assistant")


def unregistered_role_markers(
    template: str, renderings: Iterable[str], roles: Iterable[str], added_tokens: Mapping[str, Any]
) -> dict[str, str]:
    """The control-token-shaped strings the template builds from a message's role (`'<|' + message['role'] + '|>'`)
    for a role its format does not have, by role: written in a rendering and no literal of the template, for a role
    neither user nor assistant nor one the template tests for, unregistered, where the tokenizer registers the same
    construction for another role (ChatGLM3's `<|tool|>` beside its `<|user|>`). They are not the model's tokens: a
    conversation with that role is input the format does not take. `added_tokens` maps a token's text to its
    AddedToken."""
    literal = template_literals(template)
    tested = compared_literals(template)
    roles = sorted({r for r in roles if r}, key=len, reverse=True)
    found: dict[str, str] = {}
    for text in renderings:
        for match in CONTROL_TOKEN_SHAPES.findall(text):
            if match in found or match in literal or match in added_tokens:
                continue
            for role in roles:
                at = match.find(role)
                before, after = match[:at], match[at + len(role) :]
                if at <= 0 or not after or before not in literal or after not in literal:
                    continue
                others = [before + r + after for r in roles if r != role]
                if role not in CORE_ROLES and role not in tested and any(o in added_tokens for o in others):
                    found[match] = role
                break
    return found
