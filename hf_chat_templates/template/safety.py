"""Static safety rules for chat templates: what a template reaches for, hides or says on a trigger, read from its
syntax tree and its text without rendering it.

A chat template is code that ships with a model. transformers renders it in an ImmutableSandboxedEnvironment and
`limits` bounds time, memory and output, so a hostile template fails at run time; these rules name it before it
runs, with the construct, its line and column and the fix. Each rule has a stable id:

    HCT-S001  sandbox escape: a dunder or private attribute, `mro`, frame and code attributes, `|attr('__x__')`,
              a namespace set or built with an underscore name
    HCT-S002  attribute access through a format string: `'{0.__class__}'.format(x)`, `.format_map`
    HCT-S003  Jinja's default globals (`cycler`, `joiner`, `lipsum`, `self`): the usual handle to Python internals
    HCT-S004  another template or file read: `{% include %}`, `{% import %}`, `{% extends %}`
    HCT-S005  a name transformers never passes that reads like Python or the process environment (`os`, `environ`)
    HCT-S006  hidden Unicode: zero-width, bidirectional controls, tag characters (U+E0000 block), or characters
              made from numbers at render time (`'%c' | format(n)`, `selection_rules`), text decoded at render time
              (an alphabet indexed by a computed number, words picked from a sentence, a payload stored as a
              number, bytes, a character table: `data_rules`)
    HCT-S007  a look-alike of a control token (Unicode's confusables): an imitating letter among ASCII ones, or two
              tokens that look alike
    HCT-S008  trigger-gated text: literal text written only when message content holds a string, or on the clock,
              or once a flag set that way (or the conversation's length) says so, or chosen by an index read from
              content or the clock (`[note, ''][cond]`, `selection_rules`), or (a warning) by anything else of the
              conversation (`banners[messages | length % 3]`); a role chosen by a test of a message's content, or
              a message's words moved out of its turn (the system prompt, a rebuilt `messages`) on one (`role_rules`)
    HCT-S009  unbounded work: a huge constant range or repeat, a macro that recurses without a condition or calls
              itself twice on one path (2**depth calls, `growth_rules`), a size
              computed from the conversation beyond its own length (a warning, `data_rules`)
    HCT-S010  an oversized literal
    HCT-S011  prose the template adds to the model's view (found by rendering; see verification.checks.safety)
    HCT-S012  prose joined to message content in one expression: words the model reads as the speaker's
    HCT-S013  an attribute read by a name computed at render time (`folded_rules`)
    HCT-S014  a URL, domain or e-mail address in text the template writes (`addresses`)
    HCT-S015  message content rewritten: a replacement that brings words the speaker did not write (`rewrite_rules`);
              a tool call written with a value the template builds, a wallet or an account (`data_rules`); pieces of
              content dropped on a word (`drop_rules`)
    HCT-S016  a prefilled answer: prose inside the assistant's turn at the generation prompt (`prefill_rules`)
    HCT-S017  look-alikes of the control tokens in content turned into the tokens themselves (found by rendering;
              see verification.checks.safety_render, which also renders HCT-S008 at later dates and HCT-S014 in
              the text the prose scan finds)

HCT-S008 follows a trigger kept in a flag and text gated on the conversation's length (`flag_rules`); HCT-S009
reads exponential growth, a variable built from itself in a loop (`growth_rules`).

Every rule reads what the template computes from literals as well as what it spells (`folding`, `folded_rules`):
`['__cla', 'ss__'] | join` is `__class__`.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from collections.abc import Iterator
from typing import Any

import jinja2
import jinja2.nodes as nodes

from .addresses import literal_addresses
from .data_rules import data_findings
from .drop_rules import dropped
from .flag_rules import flagged
from .folded_rules import UNSAFE_ATTRIBUTES, folded_findings
from .folding import Folding, undeclared_names
from .growth_rules import growth, repeats
from .hash_rules import hashed_triggers, palindrome_triggers, residue_triggers, signature_triggers, size_triggers
from .hidden_text import hidden_unicode, homoglyph_tokens, mixed_words
from .instructions import written_instructions
from .prefill_rules import prefills
from .rewrite_rules import rewrites
from .role_rules import moved_words, role_flips
from .safety_findings import RULES, SafetyFinding, Source, const_string, literal_value, prose, short
from .selection_rules import characters, selections
from .syntax import check_template_syntax, parse_environment, transformers_text
from .trigger_rules import spliced, triggers
from .walk_rules import walks

__all__ = ["RULES", "SafetyFinding", "prose", "scan_template"]

MAX_RANGE = 10_000
MAX_REPEAT_CHARS = 100_000
MAX_LITERAL_CHARS = 8_192
MAX_NESTED_STEPS = 1_000_000
WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate"})
JINJA_GLOBALS = frozenset({"cycler", "joiner", "lipsum", "self"})
ENVIRONMENT_NAMES = frozenset(
    {"os", "sys", "environ", "env", "getenv", "subprocess", "builtins", "__builtins__", "globals", "locals"}
    | {"eval", "exec", "open", "compile", "getattr", "setattr", "importlib", "__import__", "config", "request"}
)
_ENV_VAR = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+")


def scan_template(template: str, *, name: str = "default") -> tuple[SafetyFinding, ...]:
    """Every static safety finding of `template` (nothing is rendered), in the order of the template. A template
    that does not parse raises TemplateError (see syntax.check_template_syntax)."""
    text = transformers_text(template)
    src = Source(text)
    try:
        ast = parse_environment().parse(text)
    except jinja2.TemplateSyntaxError as err:
        check_template_syntax(text, f"the {name} template")
        raise AssertionError("unreachable") from err
    found: list[SafetyFinding] = []
    for rule_scan in (_escapes, _globals_and_files, _environment_names, _work, _sizes, literal_addresses):
        found += rule_scan(ast, src)
    # The same rules on what the template computes from literals (`['__cla', 'ss__'] | join`), never rendered
    folding = Folding(ast)
    found += triggers(ast, src, folding)
    found += spliced(ast, src, folding)
    found += _nested_work(ast, src, folding)
    found += _format_strings(ast, src, folding)
    found += folded_findings(ast, src, folding)
    found += flagged(ast, src, folding)
    found += growth(ast, src, folding)
    found += repeats(ast, src, folding)
    found += prefills(ast, src, folding)
    found += rewrites(ast, src, folding)
    found += selections(ast, src, folding)
    found += characters(ast, src, folding)
    found += data_findings(ast, src, folding)
    found += role_flips(ast, src, folding)
    found += moved_words(ast, src, folding)
    found += dropped(ast, src, folding)
    found += hashed_triggers(ast, src, folding)
    found += residue_triggers(ast, src, folding)
    found += size_triggers(ast, src, folding)
    found += signature_triggers(ast, src, folding)
    found += palindrome_triggers(ast, src, folding)
    found += walks(ast, src, folding)
    found += written_instructions(ast, src, folding)
    for rule, offset, message, construct, detail in (
        *hidden_unicode(text),
        *homoglyph_tokens(text),
        *mixed_words(text),
    ):
        line, column = src.place(offset)
        found.append(SafetyFinding(rule, line, column, message, construct=construct, detail=detail))
    # An instruction already named as gated on a trigger or joined to content is not named twice
    named = [f.construct for f in found if f.rule in ("HCT-S008", "HCT-S012")]
    found = [f for f in found if f.rule != "HCT-S011" or not any(f.construct[:60] in c for c in named)]
    unique = {(f.rule, f.line, f.column, f.construct): f for f in found}
    ordered = sorted(unique.values(), key=lambda f: (f.line, f.column, f.rule))
    return tuple(SafetyFinding(**{**_fields(f), "template": name}) for f in ordered)


def _fields(f: SafetyFinding) -> dict[str, Any]:
    return {k: getattr(f, k) for k in ("rule", "line", "column", "message", "severity", "fix", "construct", "detail")}


# ---- HCT-S001, S002: sandbox escapes -------------------------------------------------------------------------
def _unsafe(attribute: str) -> bool:
    return attribute.startswith("_") or attribute in UNSAFE_ATTRIBUTES - {"format_map"}


def _escape_kind(attribute: str) -> str:
    if attribute.startswith("__") and attribute.endswith("__"):
        return f"the dunder attribute `{attribute}`"
    if attribute.startswith("_"):
        return f"the private attribute `{attribute}`"
    return f"the attribute `{attribute}`, which reaches Python internals"


def _escapes(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    def finding(node: nodes.Node, attribute: str, how: str) -> SafetyFinding:
        return SafetyFinding(
            "HCT-S001",
            node.lineno,
            src.column(node.lineno, attribute),
            f"{how} {_escape_kind(attribute)}: a sandbox escape (transformers' sandbox refuses it with SecurityError)",
            construct=attribute,
        )

    for node in ast.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.NSRef, nodes.Call)):
        if isinstance(node, nodes.Getattr) and _unsafe(node.attr):
            yield finding(node, node.attr, "reads")
        elif isinstance(node, nodes.Getitem) and (key := const_string(node.arg)) is not None and _unsafe(key):
            yield finding(node, key, "reads (by subscript)")
        elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
            key = const_string(node.args[0])
            if key is not None and _unsafe(key):
                yield finding(node, key, "reads (with `|attr`)")
        elif isinstance(node, nodes.NSRef) and _unsafe(node.attr):
            yield finding(node, node.attr, f"sets `{node.name}.{node.attr}`, writing")
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "namespace":
            for keyword in node.kwargs:
                if keyword.key.startswith("_"):
                    yield finding(node, keyword.key, "builds a namespace with")


def _format_fields(fmt: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(fmt) if name]
    except ValueError:
        return []


def _format_strings(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    for node in ast.find_all(nodes.Call):
        if not (isinstance(node.node, nodes.Getattr) and node.node.attr in ("format", "format_map")):
            continue
        method = node.node.attr
        receiver = node.node.node
        folded = folding.value(receiver)  # a literal, a `{% set fmt = 'Today is {}' %}`, or one built of literals
        fmt = folded if isinstance(folded, str) else None
        if fmt is None:
            if isinstance(node.node.node, nodes.Const):  # `(1).format`: not a string
                continue
            yield SafetyFinding(
                "HCT-S002",
                node.lineno,
                src.column(node.lineno, f".{method}"),
                f"calls `.{method}` on a string that is not a literal: text from a message used as a format "
                "string can read attributes (`{0.__class__}`)",
                severity="warning",
                construct=f".{method}",
            )
            continue
        reaching = [name for name in _format_fields(fmt) if "." in name or "[" in name]
        if reaching:
            yield SafetyFinding(
                "HCT-S002",
                node.lineno,
                src.column(node.lineno, fmt[:20]),
                f"the format string {short(fmt)} reads {', '.join(f'`{{{r}}}`' for r in reaching)} through "
                f"`.{method}`: attribute access a template expression could not write",
                construct=fmt,
            )


# ---- HCT-S003, S004, S005: globals, files, names -------------------------------------------------------------
def _globals_and_files(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    for node in ast.find_all((nodes.Name, nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        if isinstance(node, nodes.Name):
            if node.name in JINJA_GLOBALS and node.ctx == "load":
                yield SafetyFinding(
                    "HCT-S003",
                    node.lineno,
                    src.column(node.lineno, node.name),
                    f"reads Jinja's global `{node.name}`: no chat template needs it, and it is the usual handle to "
                    "Python internals (`cycler.__init__.__globals__`)",
                    construct=node.name,
                )
            continue
        what = const_string(getattr(node, "template", None) or nodes.Const(None)) or "an expression"
        tag: dict[type, str] = {nodes.Import: "import", nodes.FromImport: "from", nodes.Extends: "extends"}
        keyword = tag.get(type(node), "include")
        yield SafetyFinding(
            "HCT-S004",
            node.lineno,
            src.column(node.lineno, keyword),
            f"`{{% {keyword} %}}` reads another template or file ({short(what)}): a chat template must stand alone",
            construct=f"{keyword} {what}",
        )


def _environment_names(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    undeclared = undeclared_names(ast)  # not jinja2.meta's: its compiler computes constants (a gigabyte, maybe)
    suspicious = sorted(n for n in undeclared if n in ENVIRONMENT_NAMES or _ENV_VAR.fullmatch(n))
    for name in suspicious:
        node = next(n for n in ast.find_all(nodes.Name) if n.name == name)
        yield SafetyFinding(
            "HCT-S005",
            node.lineno,
            src.column(node.lineno, name),
            f"reads `{name}`, a name transformers never passes that reads like Python or the process environment: "
            "it renders empty in transformers, and an engine that passes more globals could fill it",
            construct=name,
        )


# ---- HCT-S009, S010: work and size ---------------------------------------------------------------------------
def const_int(node: nodes.Node) -> float | None:
    """An integer expression of literals (`10**9`, `100000 * 100000`), as a float (inf when astronomical)."""
    if isinstance(node, nodes.Const) and isinstance(node.value, int) and not isinstance(node.value, bool):
        try:
            return float(node.value)
        except OverflowError:  # a literal of hundreds of digits
            return math.inf
    if isinstance(node, (nodes.Pow, nodes.Mul, nodes.Add)):
        left, right = const_int(node.left), const_int(node.right)
        if left is None or right is None:
            return None
        if isinstance(node, nodes.Add):
            return left + right
        if isinstance(node, nodes.Mul):
            return left * right
        if right > 1e6 or (left > 1 and right * math.log10(left) > 300):
            return math.inf
        try:
            return float(left**right)
        except (OverflowError, ZeroDivisionError):  # `0 ** -1`: Jinja would raise; nothing to count
            return math.inf if left else None
    return None


def _sequence(node: nodes.Node) -> tuple[str, float] | None:
    """(what is repeated, its size) for a literal string or list, or a repeat of one (`'x' * 10**5 * 10**5`)."""
    text = const_string(node)
    if text is not None:
        return text, float(len(text))
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return "[…]", float(len(node.items))
    return _repeat(node) if isinstance(node, nodes.Mul) else None


def _repeat(node: nodes.Mul) -> tuple[str, float] | None:
    for text_side, count_side in ((node.left, node.right), (node.right, node.left)):
        found, count = _sequence(text_side), const_int(count_side)
        if found is not None and count is not None:
            return found[0], found[1] * count
    return None


# A `%` or `str.format` width: `'%0999999999d' | format(1)` pads to a gigabyte
_WIDTHS = re.compile(r"%[-#0 +]*(\d+)|\{[^{}]*:[^{}]*?(\d+)[^{}]*\}")


def _format_width(node: nodes.Node) -> int:
    """The widest padding a constant format string asks for (`|format`, `%`, `.format`), or 0."""
    fmt = None
    if isinstance(node, nodes.Filter) and node.name == "format" and node.node is not None:
        fmt = const_string(node.node)
    elif isinstance(node, nodes.Mod):
        fmt = const_string(node.left)
    elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr == "format":
        fmt = const_string(node.node.node)
    widths = [int(a or b) for a, b in _WIDTHS.findall(fmt or "")]
    return max(widths, default=0)


def _work(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    for node in ast.find_all((nodes.Call, nodes.Mul, nodes.Macro)):
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "range":
            size = _range_count(node.args)
            if size > MAX_RANGE:
                count = "an astronomical number of" if math.isinf(size) else f"{size:,.0f}"
                yield SafetyFinding(
                    "HCT-S009",
                    node.lineno,
                    src.column(node.lineno, "range"),
                    f"`range` over {count} items (a chat template loops over the conversation, at most "
                    f"{MAX_RANGE:,} constant steps)",
                    construct=f"range {size:.0f}",
                )
        elif isinstance(node, nodes.Mul) and (rep := _repeat(node)) and rep[1] > MAX_REPEAT_CHARS:
            amount = "an astronomical number of" if math.isinf(rep[1]) else f"{rep[1]:,.0f}"
            yield SafetyFinding(
                "HCT-S009",
                node.lineno,
                src.column(node.lineno, "*"),
                f"repeats {short(rep[0], 20)} into {amount} {'items' if rep[0] == '[…]' else 'characters'}",
                construct=f"repeat {rep[0][:20]} {rep[1]:.0f}",
            )
        elif isinstance(node, nodes.Macro) and _recurses_unconditionally(node):
            yield SafetyFinding(
                "HCT-S009",
                node.lineno,
                src.column(node.lineno, node.name),
                f"the macro `{node.name}` calls itself with no condition around the call: it recurses until the "
                "interpreter stops it",
                construct=f"macro {node.name}",
            )


def _range_size(loop: nodes.For, folding: Folding) -> float:
    """How many times a loop over a constant range runs (`Folding.loop_values`; a bound too large to fold is read
    by `const_int`), 0 for any other loop."""
    values = folding.loop_values(loop)
    if isinstance(values, range):
        try:
            return float(len(values))
        except OverflowError:
            return math.inf
    it = loop.iter
    if isinstance(it, nodes.Call) and isinstance(it.node, nodes.Name) and it.node.name == "range":
        return _range_count(it.args)
    return 0.0


def _range_count(args: list[nodes.Expr]) -> float:
    """How many items `range(*args)` gives (`range(0xE0020, 0xE007F)`: 95); the largest bound when one is unknown."""
    sizes = [const_int(a) for a in args]
    known = [s for s in sizes if s is not None]
    if len(known) == len(sizes) >= 2 and not any(math.isinf(s) for s in known):
        start, stop, step = (*known, 1.0)[:3]
        return max(0.0, math.ceil((stop - start) / step)) if step else 0.0
    return max(known, default=0.0)


def _nested_work(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """Loops over constant ranges inside one another (each under MAX_RANGE, their product not), and a filter
    that pads to a constant width (`'x' | center(10**9)`)."""

    def walk(node: nodes.Node, steps: float) -> Iterator[SafetyFinding]:
        for child in node.iter_child_nodes():
            inner = steps
            if isinstance(child, nodes.For) and (size := _range_size(child, folding)):
                inner = steps * size
                if inner > MAX_NESTED_STEPS and steps > 1 and size <= MAX_RANGE:
                    yield SafetyFinding(
                        "HCT-S009",
                        child.lineno,
                        src.column(child.lineno, "range"),
                        f"loops over constant ranges nested {inner:,.0f} steps deep (over {MAX_NESTED_STEPS:,}): "
                        "each loop is small, their product is not",
                        construct=f"nested range {inner:.0f}",
                    )
                    continue
            elif (width := _format_width(child)) > MAX_REPEAT_CHARS:
                yield SafetyFinding(
                    "HCT-S009",
                    child.lineno,
                    src.column(child.lineno, "format" if not isinstance(child, nodes.Mod) else "%"),
                    f"a format string pads a value to {width:,} characters (over {MAX_REPEAT_CHARS:,})",
                    construct=f"format width {width}",
                )
            elif isinstance(child, nodes.Filter) and child.name in WIDTH_FILTERS and child.args:
                pad = const_int(child.args[0])
                if pad is not None and pad > MAX_REPEAT_CHARS:
                    yield SafetyFinding(
                        "HCT-S009",
                        child.lineno,
                        src.column(child.lineno, child.name),
                        f"`|{child.name}` pads to {pad:,.0f} characters (over {MAX_REPEAT_CHARS:,})",
                        construct=f"{child.name} {pad:.0f}",
                    )
            yield from walk(child, inner)

    yield from walk(ast, 1.0)


def _recurses_unconditionally(macro: nodes.Macro) -> bool:
    calls = [c for c in macro.find_all(nodes.Call) if isinstance(c.node, nodes.Name) and c.node.name == macro.name]
    guarded = any(True for _ in macro.find_all((nodes.If, nodes.CondExpr, nodes.For)))
    return bool(calls) and not guarded


def _sizes(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    for node in ast.find_all((nodes.TemplateData, nodes.Const)):
        value = literal_value(node)
        if isinstance(value, str) and len(value) > MAX_LITERAL_CHARS:
            yield SafetyFinding(
                "HCT-S010",
                node.lineno,
                src.column(node.lineno, value[:30]),
                f"a literal of {len(value):,} characters (over {MAX_LITERAL_CHARS:,}), starting {short(value, 40)}: "
                "too long to review as part of a template",
                construct=hashlib.sha256(value.encode("utf-8")).hexdigest()[:16],
            )
