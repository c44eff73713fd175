"""HCT-S008 for a passphrase trigger: a number computed from what a message says, character by character, with a
multiplication of itself (a hash), compared with a constant. Read from the syntax tree; nothing is rendered.

    {% set ns = namespace(h=0) %}
    {% for c in messages[-1].content %}{% set ns.h = (ns.h * 31 + alphabet.find(c)) % 1000003 %}{% endfor %}
    {% if ns.h == 418086 %}…{% endif %}

No rendering finds such a trigger: only the passphrase whose hash is the constant arms it, and the template never
holds the passphrase. No published chat template hashes what a message says; counting its characters or turns
(`ns.n = ns.n + 1`) is not a hash and stays silent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .analysis import STANDARD_VARIABLES
from .folding import Folding, undeclared_names, variable_key
from .growth_rules import numeric_keys
from .safety_findings import SafetyFinding, Source
from .syntax import parse_environment
from .trigger_rules import DATA_NAMES, _reads, data_of, keywords_of, taint_of


def _multiplies_itself(value: nodes.Node, key: str, folding: Folding) -> int | None:
    """The constant `key` is multiplied by in `value` (`h * 31`, `31 * h`, `h << 5` as `h * 32`), if any."""
    for mul in (value, *value.find_all(nodes.Mul)):
        if not isinstance(mul, nodes.Mul):
            continue
        for mine, other in ((mul.left, mul.right), (mul.right, mul.left)):
            factor = folding.value(other)
            if variable_key(mine) == key and isinstance(factor, int) and not isinstance(factor, bool) and factor >= 2:
                return factor
    return None


def _hashes(ast: nodes.Template, folding: Folding) -> dict[str, tuple[int, nodes.Node]]:
    """Numeric variables set, in a loop over message data (or from it), to themselves times a constant plus more:
    variable -> (the factor, the assignment)."""
    numbers, tainted = numeric_keys(ast), taint_of(folding)
    # what a caller passes (`chat_template_kwargs`), looped over by name: not `range(9)` nor a token the tokenizer sets
    keywords = undeclared_names(ast) - DATA_NAMES - STANDARD_VARIABLES - set(parse_environment().globals)
    found: dict[str, tuple[int, nodes.Node]] = {}
    loop: Any
    for loop in ast.find_all(nodes.For):
        passed = isinstance(loop.iter, nodes.Name) and loop.iter.name in keywords
        reads_data = _reads(loop.iter, tainted) is not None or passed
        for assign in loop.find_all(nodes.Assign):
            key = variable_key(assign.target)
            if key not in numbers or key is None:
                continue
            factor = _multiplies_itself(assign.node, key, folding)
            if factor is not None and (reads_data or _reads(assign.node, tainted) is not None):
                found.setdefault(key, (factor, assign))
    return found


def hashed_triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008 at each comparison of a hash of message data with a constant."""
    hashes = _hashes(ast, folding)
    if not hashes:
        return
    for compare in ast.find_all(nodes.Compare):
        sides = [compare.expr, *(op.expr for op in compare.ops)]
        keys = [k for s in sides if (k := variable_key(s)) is not None and k in hashes]
        folded = [folding.value(s) for s in sides]  # a constant, or a list of them (`h in [202662, 688615]`)
        values = [x for v in folded for x in (v if isinstance(v, list) else [v])]
        constants = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if not keys or not constants:
            continue
        key = keys[0]
        factor, assign = hashes[key]
        yield SafetyFinding(
            "HCT-S008",
            compare.lineno,
            src.column(compare.lineno, key.split(".")[-1]),
            f"`{key}` is a number computed from what a message says (or a keyword the caller passes), character by "
            f"character, multiplied by {factor} "
            f"at each step (line {assign.lineno}: a hash), and compared with {constants[0]}: a passphrase trigger "
            "that only a message hashing to that constant arms, which no rendering and no reading of the template "
            "shows",
            construct=f"hash {key} {constants[0]}",
        )


def _field_read(node: nodes.Node, data: frozenset[str]) -> bool:
    """Whether `node` reads a field of a message or tool (`m.name[-3:]`, `call['id']`), not a count of them."""
    for sub in (node, *node.find_all((nodes.Getattr, nodes.Getitem))):
        base = sub.node if isinstance(sub, (nodes.Getattr, nodes.Getitem)) else None
        if isinstance(base, nodes.Name) and base.name in data and base.name != "loop":
            return True
    return False


def residue_triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008 at a number taken from what a message says or a field it carries, modulo a constant (`(content |
    length) % 89`, `(m.name[-3:] | int) % 7`), compared with a constant, itself or kept in a variable: a key only
    messages of one length or name in a cycle arm, which no ordinary conversation shows. Counting turns
    (`loop.index0 % 2`, `messages | length % 4`) reads no field."""
    tainted, data = taint_of(folding), data_of(folding)
    keywords = keywords_of(folding)
    passed: set[int] = set()  # residues of a keyword, compared with anything: no format reduces one
    residues: dict[int, tuple[nodes.Mod, int, bool]] = {}  # id of the node compared -> (residue, modulus, of a count)
    for mod in ast.find_all(nodes.Mod):
        modulus = folding.value(mod.right)
        if not (isinstance(modulus, int) and not isinstance(modulus, bool) and modulus >= 3):
            continue
        names = {n.name for n in (mod.left, *mod.left.find_all(nodes.Name)) if isinstance(n, nodes.Name)}
        if _reads(mod.left, tainted) == "content" or _field_read(mod.left, data):
            residues[id(mod)] = (mod, modulus, False)
        elif names & data:
            residues[id(mod)] = (mod, modulus, True)  # a count of turns (`(u * u) % 25`), not a loop's position
        elif names & keywords:  # a number the caller passes (`thinking_budget % 1000`): a passphrase of digits
            residues[id(mod)] = (mod, modulus, False)
            passed.add(id(mod))
    if not residues:
        return
    kept: dict[str, tuple[nodes.Mod, int, bool]] = {}  # variable -> the residue it is set to
    for assign in ast.find_all(nodes.Assign):
        key = variable_key(assign.target)
        for node in (assign.node, *assign.node.find_all(nodes.Mod)):
            if key is not None and id(node) in residues:
                kept[key] = residues[id(node)]
    for compare in ast.find_all(nodes.Compare):
        sides = [compare.expr, *(op.expr for op in compare.ops)]
        found = [residues.get(id(s)) or kept.get(variable_key(s) or "") for s in sides]
        constants = [v for s in sides if isinstance(v := folding.value(s), int) and not isinstance(v, bool)]
        residue = next((f for f in found if f is not None), None)
        if residue is None or not (constants or (id(residue[0]) in passed and compare.ops[0].op in _EQ)):
            continue
        mod, modulus, count = residue
        against = repr(constants[0]) if constants else "a value the template computes"
        column = next(
            (c for c in (src.column(mod.lineno, f"% {modulus}"), src.column(mod.lineno, f"%{modulus}")) if c > 1), 1
        )
        yield SafetyFinding(
            "HCT-S008",
            mod.lineno,
            column,
            (
                f"a count of the conversation's turns is kept modulo {modulus} (line {mod.lineno}) and compared with "
                f"{against} (line {compare.lineno}): a trigger only conversations of some lengths in a cycle arm, "
                "past any test conversation's"
                if count
                else f"a number taken from a message (what it says, or a field it carries) or a keyword the caller "
                f"passes is kept modulo {modulus} (line {mod.lineno}) and compared with {against} (line "
                f"{compare.lineno}): a trigger only messages of one length, sum or name (or values of the keyword) in "
                "a cycle arm, which no rendering of an ordinary conversation shows; no published chat template "
                "reduces one to a residue"
            ),
            severity="warning" if count else "",
            construct=f"residue {modulus} {against}",
        )


def _sizes(ast: nodes.Template, folding: Folding) -> dict[str, nodes.Node]:
    """Numeric variables that add up the length of what messages say, in a loop (`{% set b.n = b.n +
    m.content | length %}`): variable -> the assignment."""
    numbers, tainted = numeric_keys(ast), taint_of(folding)
    found: dict[str, nodes.Node] = {}
    for assign in ast.find_all(nodes.Assign):
        key = variable_key(assign.target)
        if key is None or key not in numbers or not isinstance(assign.node, nodes.Add):
            continue
        sides = (assign.node.left, assign.node.right)
        adds_itself = any(variable_key(side) == key for side in sides)
        # the length of the text itself (`m.content | length`), not a count of its parts (`| selectattr(…) | length`)
        lengths = [
            f for side in sides for f in (side, *side.find_all(nodes.Filter)) if isinstance(f, nodes.Filter)
            and f.name in ("length", "count") and f.node is not None and _reads(f.node, tainted) == "content"
            and not isinstance(f.node, nodes.Filter) and not list(f.node.find_all(nodes.Filter))
        ]  # fmt: skip
        if adds_itself and lengths:
            found.setdefault(key, assign)
    return found


def size_triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008 (a warning) at a comparison of the conversation's total size, added up from what its messages say,
    with a constant: a template that writes or drops something once a conversation holds that much text (the system
    prompt emptied past a "context budget"), which no rendering of an ordinary conversation reaches."""
    sizes = _sizes(ast, folding)
    for compare in ast.find_all(nodes.Compare) if sizes else ():
        sides = [compare.expr, *(op.expr for op in compare.ops)]
        keys = [
            k for s in sides for n in (s, *s.find_all((nodes.Name, nodes.Getattr))) if (k := variable_key(n)) in sizes
        ]
        constants = [v for s in sides if isinstance(v := folding.value(s), int) and not isinstance(v, bool)]
        if not keys or not constants:
            continue
        yield SafetyFinding(
            "HCT-S008",
            compare.lineno,
            src.column(compare.lineno, keys[0].split(".")[-1]),
            f"`{keys[0]}` adds up the length of what the messages say (line {sizes[keys[0]].lineno}) and is compared "
            f"with {constants[0]}: what the template writes changes once a conversation holds that much text (a "
            'system prompt emptied past a "context budget"), which no test conversation reaches; no published chat '
            "template measures the conversation's text",
            severity="warning",
            construct=f"size {keys[0]} {constants[0]}",
        )


_EQ = ("eq", "ne")


def signature_triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008 at what a message says, reduced to a number or digits (`words | map('length') | join`, a sum of
    codes), compared for equality with a constant of four digits or more, or with a list of three numbers or more:
    a signature only a message with that shape arms; no literal the coverage could write into content makes it. A
    size compared with a threshold (`content | length > 1000`) is no signature."""
    tainted = taint_of(folding)
    for compare in ast.find_all(nodes.Compare):
        if not {op.op for op in compare.ops} & {"eq", "ne", "in", "notin"}:
            continue
        sides = [compare.expr, *(op.expr for op in compare.ops)]
        values = [folding.value(s) for s in sides]
        digits = [
            v
            for v in values
            if (isinstance(v, str) and re.fullmatch(r"\d{4,}", v))
            or (isinstance(v, int) and not isinstance(v, bool) and v >= 1000)
            # a vector of three numbers or more, equal or not (the lengths of its first words: `== [3, 1, 4, 1, 5]`)
            or (
                isinstance(v, list)
                and len(v) >= 3
                and all(type(x) is int for x in v)
                and compare.ops[0].op in ("eq", "ne")
            )
        ]
        if not digits or not any(_reads(s, tainted) == "content" for s in sides):
            continue
        yield SafetyFinding(
            "HCT-S008",
            compare.lineno,
            src.column(compare.lineno, str(digits[0])),
            f"what a message says, reduced to a number, is compared with {digits[0]!r} (line {compare.lineno}): a "
            "signature trigger (the lengths of its words, a sum of its characters) that only a message of that shape "
            "arms, which no rendering of an ordinary conversation shows",
            construct=f"signature {digits[0]}",
        )


def _reversed(node: nodes.Node, folding: Folding) -> nodes.Node | None:
    """What `node` reverses (`w[::-1]`, `w | reverse`, `w | reverse | join`), or None."""
    if isinstance(node, nodes.Filter) and node.name in ("join", "list", "string") and node.node is not None:
        node = node.node
    if isinstance(node, nodes.Filter) and node.name == "reverse" and node.node is not None:
        return node.node
    cut = node.arg if isinstance(node, nodes.Getitem) else None
    if isinstance(node, nodes.Getitem) and isinstance(cut, nodes.Slice) and cut.start is None and cut.stop is None:
        return node.node if cut.step is not None and folding.value(cut.step) == -1 else None
    return None


def palindrome_triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008 at a test of whether what a message says, or a field it carries (a sender's `name`, a word of its
    content), reads the same backwards (`w == w[::-1]`): a trigger only a message holding such a word arms, which no
    literal the coverage writes into content makes and no ordinary conversation holds. No published template tests
    it."""
    tainted, data = taint_of(folding), data_of(folding)
    for compare in ast.find_all(nodes.Compare):
        if len(compare.ops) != 1 or compare.ops[0].op not in _EQ:
            continue
        left, right = compare.expr, compare.ops[0].expr
        for side, other in ((left, right), (right, left)):
            inner = _reversed(other, folding)
            if inner is None or inner.dump() != side.dump():
                continue
            read = _reads(side, tainted) == "content" or any(
                isinstance(n, nodes.Name) and n.name in data for n in (side, *side.find_all(nodes.Name))
            )
            if read:
                yield SafetyFinding(
                    "HCT-S008",
                    compare.lineno,
                    src.column(compare.lineno, "[::-1]" if isinstance(other, nodes.Getitem) else "reverse"),
                    f"what a message says or a field it carries is tested for reading the same backwards (line "
                    f"{compare.lineno}): a palindrome trigger only a message holding such a word or name arms, which "
                    "no rendering of an ordinary conversation shows",
                    construct=f"palindrome {compare.lineno}",
                )
                break
