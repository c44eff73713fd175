"""Templates that test `message.content is none`, and why that test misleads under transformers.

`apply_chat_template` drops every key whose value is None before rendering: an OpenAI-format tool-call turn,
`{"role": "assistant", "content": None, "tool_calls": [...]}`, reaches the template with no content key, as a
message written without one does. `message.content` is then undefined, and for an undefined value Jinja's
`is none` is false and `is not none` is true: a template that picks its tool-call branch with `content is none`
takes the other branch, dropping the calls or raising on the missing content.

`none_tests` finds such tests in the syntax tree; `content_none_effect` renders a probe again with the None kept
(what the author expected) and, when that changes the outcome, words why for the `renders` and `nothing-dropped`
findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import jinja2.nodes as nodes

from ..conversations.probes import Probe
from ..template.rendering import Rendered
from ..template.syntax import parse_environment
from .context import VerifyContext


@dataclass(frozen=True)
class NoneTest:
    """One test of a message's content against none: `subject` is the expression tested (`message['content']`),
    `negated` for `is not none` and `!= none`."""

    subject: str
    operator: str  # "is none", "is not none", "== none", "!= none"
    line: int

    @property
    def negated(self) -> bool:
        return self.operator in ("is not none", "!= none")

    @property
    def expression(self) -> str:
        return f"{self.subject} {self.operator}"

    @property
    def fix(self) -> str:
        """A test that means what the author meant whether the value is None or missing."""
        if self.negated:
            return f"`{self.subject} is defined and {self.subject} is not none`"
        return f"`not {self.subject}`"


def _spell(node: nodes.Node) -> str:
    """An expression as the template writes it, for names, attributes and constant subscripts."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        return f"{_spell(node.node)}.{node.attr}"
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        return f"{_spell(node.node)}[{node.arg.value!r}]"
    return "…"


def _is_content(node: nodes.Node) -> bool:
    """`x.content` or `x['content']`."""
    if isinstance(node, nodes.Getattr):
        return node.attr == "content"
    return isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "content"


@lru_cache(maxsize=32)
def none_tests(template: str) -> tuple[NoneTest, ...]:
    """Every test of a message's content against none in `template`: `is none` and `is not none`, `== none` and
    `!= none`, on `x.content`, `x['content']`, or a name set from one (`{% set content = message['content'] %}`)."""
    try:
        tree = parse_environment().parse(template)
    except Exception:  # a template that does not parse has no tests to explain; `renders` reports it
        return ()
    aliases = {
        node.target.name
        for node in tree.find_all(nodes.Assign)
        if isinstance(node.target, nodes.Name) and _is_content(node.node)
    }

    def tested(node: nodes.Node) -> bool:
        return _is_content(node) or (isinstance(node, nodes.Name) and node.name in aliases)

    negated = {id(node.node) for node in tree.find_all(nodes.Not)}
    found = []
    for test in tree.find_all(nodes.Test):
        if test.name == "none" and tested(test.node):
            found.append(NoneTest(_spell(test.node), "is not none" if id(test) in negated else "is none", test.lineno))
    for compare in tree.find_all(nodes.Compare):
        for operand in compare.ops:
            against_none = isinstance(operand.expr, nodes.Const) and operand.expr.value is None
            if operand.op in ("eq", "ne") and against_none and tested(compare.expr):
                operator = "== none" if operand.op == "eq" else "!= none"
                found.append(NoneTest(_spell(compare.expr), operator, compare.lineno))
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class ContentNoneEffect:
    """How a probe renders when its None contents are kept, and the wording of why transformers differs."""

    kept: Rendered
    explanation: str
    tests: tuple[NoneTest, ...]


def _explain(tests: tuple[NoneTest, ...], index: int) -> str:
    shown = tests[:2]
    cited = " and ".join(f"`{t.expression}` (line {t.line})" for t in shown)
    truths = " and ".join(
        f"`{t.operator}` is {'true' if t.negated else 'false'}" for t in {t.operator: t for t in shown}.values()
    )
    fixes = " and ".join(f"{t.fix} for `{t.expression}`" for t in shown)
    return (
        f"the template tests {cited}, but transformers drops None values before rendering: message {index}'s "
        f"content (None, as OpenAI sends it beside tool calls) is undefined in the template, where {truths}; "
        f"write {fixes}"
    )


def content_none_effect(ctx: VerifyContext, probe: Probe) -> ContentNoneEffect | None:
    """None unless the template tests content against none and `probe` has a message whose content is None (or
    missing), and rendering it with the None kept gives another outcome than transformers' rendering."""
    tests = none_tests(ctx.renderer.template_for(probe.tool_list()))
    empty = [i for i, m in enumerate(probe.messages) if m.get("content") is None]
    if not tests or not empty:
        return None
    # Every other None dropped as transformers drops it, so only the content can make the difference
    messages = [
        {**{k: v for k, v in m.items() if v is not None}, **({"content": None} if i in empty else {})}
        for i, m in enumerate(probe.message_list())
    ]
    kept = ctx.renderer.render_as_given(
        messages,
        probe.tool_list(),
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )
    actual = ctx.rendered[probe.id]
    if (kept.ok, kept.text) == (actual.ok, actual.text):
        return None
    return ContentNoneEffect(kept, _explain(tests, empty[0]), tests)
