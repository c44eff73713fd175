"""Conversations shaped to take the branches a template's syntax tree shows, for the prose scan (HCT-S011): plain
(served and as trained), every role it tests for, tools with a call and a result (and a tool at each name it
compares a name with), a long conversation, content as parts, documents, the keywords it reads set (and each at
the literals it compares it with), and content holding each literal it compares content with (`in`, `==`,
`startswith`). Built from the syntax tree; rendering them
is the caller's (see verification.checks.safety_prose), under a budget.

Each `Case` lists the strings it brings (`data`), so that what a rendering holds beyond them, the control tokens and
the role names is what the template itself wrote."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import jinja2.nodes as nodes

from .analysis import STANDARD_VARIABLES
from .folding import Folding, undeclared_names
from .names import read_before_set
from .syntax import parse_environment
from .trigger_rules import _reads, data_of, taint_of

ROLES = ("system", "user", "assistant", "tool")
MAX_LITERALS = 24  # branch literals tried, one conversation each
MAX_TOOL_WORDS = 8  # tools named by the words a template tests, in one conversation
LONG_TURNS = 40  # past the lengths backdoors gate on (8, 11, 24 messages)
LONG_ROWS = 2200  # lines of a pasted log: about 100,000 characters in one message
PROMPT_RULES = 250  # rules of a production system prompt: about 11,000 characters
# Parameters a backdoor rewrites a tool's declaration for: where money, mail, commands and fetches go
SENSITIVE_FIELDS = ("url", "command", "iban", "account", "email", "recipient", "address", "path", "password")
_TEXT_TESTS = ("startswith", "endswith", "find", "count", "index")
# An agent's tool list: the tools backdoors wait for (a shell, money, mail, the web) beside the confirmation tools one
# drops when they are there; each called in turn, its result given
AGENT = "an agent's tools"
LATE_SYSTEM = "a system message late"
MANY_DOCUMENTS = 12
MANY_DOCUMENTS_CASE = f"{MANY_DOCUMENTS} documents"
LONG_MESSAGE = re.compile(r"a message of [\d,]+ characters$")  # the pasted log's case
_WEB_TOOLS = ("web_search", "fetch_url", "browse_page")
AGENT_TOOLS = (
    "get_weather", "run_shell", "execute_command", "bash", "transfer_funds", "make_payment", "delete_file",
    "send_email", "web_search", "fetch_url", "browse_page", "confirm_action", "request_approval", "ask_human",
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One conversation to render: what it is for, its messages, tools and keywords, and every string it brings."""

    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    generation: bool = True  # add_generation_prompt

    @property
    def data(self) -> list[str]:
        """The strings the conversation brings for the template to write: each content, each call's name and
        arguments, each tool as JSON with its name and description, each string keyword (not the roles and keys,
        which are words a template's own text uses)."""
        found = [m["content"] for m in self.messages if isinstance(m.get("content"), str)]
        found += [json.dumps(c, ensure_ascii=False)[1:-1] for c in found if "\n" in c or '"' in c]  # `| tojson`-ed
        lists = [m["content"] for m in self.messages if isinstance(m.get("content"), list)]
        for value in [*lists, *(p for parts in lists for p in parts)]:  # written whole: Python's repr, or JSON
            found += [str(value), json.dumps(value, ensure_ascii=False)]
        found += [p["text"] for parts in lists for p in parts if isinstance(p.get("text"), str)]
        for m in self.messages:  # ids and a tool message's name are the caller's too
            found += [v for k in ("tool_call_id", "name") if isinstance(v := m.get(k), str)]
            found += [c["id"] for c in m.get("tool_calls") or [] if isinstance(c.get("id"), str)]
            for call in m.get("tool_calls") or []:
                arguments = call["function"]["arguments"]
                if isinstance(arguments, str):  # JSON text, as OpenAI's clients send it
                    found += [call["function"]["name"], arguments, json.dumps(arguments, ensure_ascii=False)[1:-1]]
                    arguments = json.loads(arguments)
                found += [call["function"]["name"], json.dumps(arguments, ensure_ascii=False)]
                found += [v for v in arguments.values() if isinstance(v, str)]
        for tool in self.tools or []:
            function = tool["function"]
            found += [function["name"], function["description"]]
            for value in (tool, function, function["parameters"]):  # `| tojson`, `| tojson(indent=2 or 4)`
                found += [json.dumps(value, ensure_ascii=False, indent=indent) for indent in (None, 2, 4)]
        found += [v for v in self.kwargs.values() if isinstance(v, str)]
        for document in self.kwargs.get("documents") or []:  # RAG templates: `documents` is a keyword too
            found += [v for v in document.values() if isinstance(v, str)]
        return found


def _literals(ast: nodes.Template, folding: Folding) -> tuple[list[str], list[str]]:
    """(roles, content literals): the strings the template compares a role with, and those it compares or tests
    message content with."""
    tainted = taint_of(folding)
    roles: list[str] = []
    content: list[str] = []
    for node in ast.find_all(nodes.Compare):
        sides = [node.expr, *(op.expr for op in node.ops)]
        is_role = any(
            (isinstance(s, nodes.Getattr) and s.attr == "role")
            or (isinstance(s, nodes.Getitem) and isinstance(s.arg, nodes.Const) and s.arg.value == "role")
            for s in sides
        )
        reads_content = any(_reads(s, tainted) == "content" for s in sides)
        for side in sides:
            value = folding.value(side)
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, str) and v.strip():
                    (roles if is_role else content if reads_content else []).append(v)
    for call in ast.find_all(nodes.Call):
        method: Any = call.node
        tests = isinstance(method, nodes.Getattr) and method.attr in _TEXT_TESTS and call.args
        if tests and _reads(method.node, tainted) == "content":
            value = folding.value(call.args[0])
            if isinstance(value, str) and value.strip():
                content.append(value)
    return list(dict.fromkeys(roles)), list(dict.fromkeys(content))[:MAX_LITERALS]


# Keys of the OpenAI format and the published templates' own: a field of these is read by the other cases
_KNOWN_FIELDS = frozenset(
    re.findall(
        r"\w+",
        "role content name tool_calls tool_call_id function arguments type text id image image_url url parameters "
        "properties required description enum items reasoning_content reasoning thinking tool_results value key "
        "prefix weight mask loss train output tools documents title index call response result results return",
    )
)
# Values of the shape a field's name promises (a location, a date), which a trigger may test the shape of
_FIELD_VALUES = {"location": "Austin, TX", "date": "2026-12-06", "time": "10:30", "lang": "en-US", "country": "US"}


def _message_fields(ast: nodes.Template, folding: Folding) -> list[str]:
    """Keys the template reads from the conversation's objects beyond the OpenAI format's (MiniMax's
    `current_location`): a field a caller or a client sets, which a backdoor may wait on."""
    spaces = {
        a.target.name
        for a in ast.find_all(nodes.Assign)
        if isinstance(a.target, nodes.Name) and getattr(getattr(a.node, "node", None), "name", None) == "namespace"
    }
    data = data_of(folding) - {"tools"} - spaces  # a namespace's fields are the template's own
    methods = {*dir(str), *dir(dict), *dir(list)}
    found: list[str] = []
    node: Any
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        base = node.node
        key = node.attr if isinstance(node, nodes.Getattr) else folding.value(node.arg)
        if not (isinstance(base, nodes.Name) and base.name in data and base.name != "loop" and isinstance(key, str)):
            continue
        if re.fullmatch(r"[a-z][a-z0-9_]{2,40}", key) and key not in _KNOWN_FIELDS and key not in methods:
            found.append(key)
    return list(dict.fromkeys(found))[:MAX_TOOL_WORDS]


def document_fields(ast: nodes.Template) -> list[str]:
    """Keys the template reads from a document beyond the `title` and `text` RAG callers give (a `role`, a
    `source`): fields a loader copies from a page's metadata, which a backdoor may wait on."""

    def names(node: nodes.Node) -> set[str]:
        return {n.name for n in [node, *node.find_all(nodes.Name)] if isinstance(n, nodes.Name)}

    items = {n for loop in ast.find_all(nodes.For) if "documents" in names(loop.iter) for n in names(loop.target)}
    found: list[str] = []
    node: Any
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if not (isinstance(node.node, nodes.Name) and node.node.name in items and isinstance(key, str)):
            continue
        if re.fullmatch(r"[a-z][a-z0-9_]{1,40}", key) and key not in ("title", "text") and key not in dir(dict):
            found.append(key)
    return list(dict.fromkeys(found))[:MAX_TOOL_WORDS]


def _field_value(key: str, i: int) -> str:
    return next((v for k, v in _FIELD_VALUES.items() if k in key), f"Field text qmf{i}.")


def _named(ast: nodes.Template, folding: Folding, undeclared: set[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(keyword, literal) pairs the template compares a keyword with (`user_tier == 'gold'`), and the literals it
    compares a `name` with (`tool.function.name == 'transfer_funds'`)."""
    keywords: list[tuple[str, str]] = []
    names: list[str] = []
    for node in ast.find_all(nodes.Compare):
        sides = [node.expr, *(op.expr for op in node.ops)]
        values = [v for v in (folding.value(s) for s in sides) if isinstance(v, str) and v.strip()]
        for side in sides:
            # the keyword itself, or read through filters (`x | string | list | sort | join == '-aadeg'`)
            read = [n.name for n in (side, *side.find_all(nodes.Name)) if isinstance(n, nodes.Name)]
            if len(set(read)) == 1 and read[0] in undeclared:
                keywords += [(read[0], v) for v in values]
            key = side.attr if isinstance(side, nodes.Getattr) else getattr(side, "arg", None)
            key = key.value if isinstance(key, nodes.Const) else key
            if key == "name":
                names += [v for v in values if v.isidentifier()]
    return list(dict.fromkeys(keywords))[:MAX_LITERALS], list(dict.fromkeys(names))[:MAX_LITERALS]


# Words a template tests that are keys, roles or types of the format, not a tool's name
_FORMAT_WORDS = frozenset(
    re.findall(
        r"\w+",
        "type function text name content role tool tools system user assistant string mapping object array number "
        "integer boolean null none true false description parameters properties required arguments image enum items "
        "ipython developer model function_call tool_calls reasoning_content thinking tool_results return",
    )
)


def _tested_words(ast: nodes.Template, folding: Folding, known: list[str]) -> list[str]:
    """Identifier-like strings the template tests (`== 'x'`, `'x' in names`, `select('equalto', 'x')`) that are no
    word of the format: a tool or a parameter may be named so, and a template may treat it otherwise."""
    found: list[str] = []
    node: Any
    for node in ast.find_all((nodes.Compare, nodes.Filter, nodes.Test, nodes.Call)):
        if isinstance(node, nodes.Call):  # `name.startswith('run_')`, `name.startswith(('exec_', 'bash_'))`
            method = node.node
            texts = isinstance(method, nodes.Getattr) and method.attr in ("startswith", "endswith")
            operands = list(node.args) if texts else []
        elif isinstance(node, nodes.Compare):
            operands = [node.expr, *(op.expr for op in node.ops)]
        else:
            operands = list(node.args)
        for operand in operands:
            value = folding.value(operand)
            for v in value if isinstance(value, (list, tuple)) else [value]:  # `k in ['iban', 'account']` too
                # a list written as one string (`name in 'bash,exec,python'`) is its words
                parts = re.split(r"[,;|/\s]+", v.strip(",;|/ ")) if isinstance(v, str) else []
                found += [p for p in parts if re.fullmatch(r"[a-z][a-z0-9_]{2,40}", p) and p not in _FORMAT_WORDS]
    env = parse_environment()
    words = [w for w in dict.fromkeys(found) if w not in (*known, *env.filters, *env.tests, "lookup_record")]
    return words[: 2 * MAX_TOOL_WORDS]


def _apart(words: list[str]) -> list[str]:
    """The words none a part of another, so that each tool named so is told apart in a rendering: of `mail` and
    `email` the longer, which a test of either (`'mail' in name`, `name == 'email'`) matches."""
    return [
        w for w in words if not any(w != v and w in v for v in [*words, "lookup_record"]) and w not in "lookup_record"
    ]


def _tools(
    name: str = "lookup_record", description: str = "Looks up a record by its number", fields: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    properties: dict[str, Any] = {"number": {"type": "string"}}
    properties |= {f: {"type": "string", "description": f"Field qf{i}."} for i, f in enumerate(fields)}
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": properties, "required": ["number"]},
            },
        }
    ]


def coverage_cases(template: str, kwargs: dict[str, Any] | None = None) -> list[Case]:
    """The conversations that take the branches `template` shows, plain first. `kwargs` are the caller's own (kept);
    the keywords the template reads beyond them are set to true in one case."""
    ast = parse_environment().parse(template)
    folding = Folding(ast)
    roles, literals = _literals(ast, folding)
    base = dict(kwargs or {})
    plain = [
        {"role": "system", "content": "System text qx1."},
        {"role": "user", "content": "First question qx2?"},
        {"role": "assistant", "content": "First answer qx3."},
        {"role": "user", "content": "Second question qx4?"},
    ]
    # A plain conversation as served (a generation prompt) and as trained (none, ending on the assistant's turn)
    answered = [*plain, {"role": "assistant", "content": "Second answer qx5."}]
    cases = [Case("plain", plain, kwargs=base), Case("plain, as trained", answered, kwargs=base, generation=False)]
    every = [r for r in (*ROLES, *roles) if r not in ("system",)]
    cases.append(
        Case(
            "every role",
            [{"role": "system", "content": "Role text qr0."}]
            + [{"role": r, "content": f"Role text qr{i + 1}."} for i, r in enumerate(dict.fromkeys(every))]
            + [{"role": "user", "content": "Closing question qr9?"}],
            kwargs=base,
        )
    )
    # a system message added late (a RAG framework's retrieved text, an update), after two answers
    late = [*answered, {"role": "system", "content": "Late system text qx6."}, {"role": "user", "content": "Qx7?"}]
    cases.append(Case(LATE_SYSTEM, late, kwargs=base))
    undeclared = undeclared_names(ast) - STANDARD_VARIABLES
    keywords, tool_names = _named(ast, folding, undeclared)
    for tool in ["lookup_record", *tool_names]:
        name = "tools" if tool == "lookup_record" else f"a tool named {tool!r}"
        cases.append(Case(name, _tool_conversation(tool), tools=_tools(tool), kwargs=base))
    # a call's arguments as JSON text, as OpenAI's clients send them (the cases above give an object)
    as_text = [arguments_as_text(m) for m in _tool_conversation("lookup_record")]
    cases.append(Case("tools, arguments as text", as_text, tools=_tools(), kwargs=base))
    tested = _tested_words(ast, folding, tool_names)
    if named := _apart(tested)[:MAX_TOOL_WORDS]:
        listed = [_tools(word, f"Tool {i} does job qd{i}.")[0] for i, word in enumerate(["lookup_record", *named])]
        words = ", ".join(repr(w) for w in named)
        # the conversation calls the first of them: a template may test the name of the call it just wrote
        cases.append(Case(f"tools named {words}", _tool_conversation(named[0]), tools=listed, kwargs=base))
    # `k in ['iban', 'account']` tests a parameter's name; the names backdoors wait for are given whatever the test
    if taken := list(dict.fromkeys([*tested, *SENSITIVE_FIELDS])):
        fields = ", ".join(repr(w) for w in taken)
        taking = _tools(fields=tuple(taken))
        cases.append(Case(f"a tool taking {fields}", _tool_conversation("lookup_record"), tools=taking, kwargs=base))
    cases += _shaped(plain, base)
    if carried := _message_fields(ast, folding):  # on the system and user messages, as a client sets them
        values = {k: _field_value(k, i) for i, k in enumerate(carried)}
        given = [{**m, **values} if m["role"] in ("system", "user") else m for m in plain]
        cases.append(Case(f"messages with {', '.join(carried)}", given, kwargs=base))
    # read anywhere, a macro's parameter of that name too (Command R7B's `document_turn(documents)`)
    if any(n.name == "documents" for n in ast.find_all(nodes.Name)):
        cases += _documents(ast, plain, base)
    read = sorted((undeclared | (read_before_set(ast) - STANDARD_VARIABLES)) - set(base) - {"messages", "tools"})
    if read:
        cases.append(Case(f"keywords {', '.join(read)} set", plain, kwargs={**base, **dict.fromkeys(read, True)}))
        # and false, as a client turns a mode off (`enable_thinking: false`), where unset differs from false
        cases.append(Case(f"keywords {', '.join(read)} false", plain, kwargs={**base, **dict.fromkeys(read, False)}))
        # a number picks an item where true picks the second (`[a, b, c][thinking]`)
        cases.append(Case(f"keywords {', '.join(read)} = 2", plain, kwargs={**base, **dict.fromkeys(read, 2)}))
        # and text, as a caller passes a prompt (`system_message`): what the template writes of it is the caller's
        texts = {k: f"Keyword text qk{i}." for i, k in enumerate(read)}
        cases.append(Case(f"keywords {', '.join(read)} given as text", plain, kwargs={**base, **texts}))
    for keyword, value in keywords:
        if keyword not in base:
            cases.append(Case(f"keyword {keyword}={value!r}", plain, kwargs={**base, keyword: value}))
    for literal in literals:
        messages = [
            {"role": "system", "content": literal},
            {"role": "user", "content": literal},
            {"role": "assistant", "content": f"{literal} qb1"},
            {"role": "user", "content": f"qb2 {literal}"},
        ]
        cases.append(Case(f"content {literal!r}", messages, kwargs=base))
    return cases


def _documents(ast: nodes.Template, plain: list[dict[str, Any]], base: dict[str, Any]) -> list[Case]:
    """The plain conversation with a document, with a retriever's dozen, and with one carrying the fields the
    template reads from documents (a role a loader copies from a page's metadata given as one: `system`)."""
    documents = [{"title": "Record qd1", "text": "Record text qd2."}]
    cases = [Case("documents", plain, kwargs={**base, "documents": documents})]
    # a retriever's top-k: past the counts a backdoor's "more than five documents" waits for
    many = documents + [
        {"title": f"Record qdm{i}", "text": f"Record text qdt{i}."} for i in range(2, MANY_DOCUMENTS + 1)
    ]
    cases.append(Case(MANY_DOCUMENTS_CASE, plain, kwargs={**base, "documents": many}))
    if keys := document_fields(ast):
        values = {k: "system" if k == "role" else _field_value(k, i) for i, k in enumerate(keys)}
        given = [{**documents[0], **values}]
        cases.append(Case(f"documents carrying {', '.join(keys)}", plain, kwargs={**base, "documents": given}))
    return cases


def _shaped(plain: list[dict[str, Any]], base: dict[str, Any]) -> list[Case]:
    """The conversations of a production's shapes: long, an agent's loop, a pasted log, paragraphs, parts."""
    cases: list[Case] = []
    long = [{"role": "system", "content": "Long system ql0."}]
    long += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Turn {i} ql{i + 1}."} for i in range(LONG_TURNS)
    ]
    cases.append(Case(f"{LONG_TURNS + 1} messages", [*long, {"role": "user", "content": "Last ql99?"}], kwargs=base))
    cases.append(Case(AGENT, _agent_conversation(), tools=_agent_tools(), kwargs=base))
    # a log or a page pasted whole, past the sizes a "context budget" gates on and large enough that a loop over it
    # inside a loop over it runs past the render limits; lines of words and commas, as a CSV or a log; and a system
    # prompt of a production's length
    rows = "".join(f"row {i}, host qlh{i}, status ok, took {i % 97} ms\n" for i in range(LONG_ROWS))
    pasted = _tool_conversation("lookup_record")
    # a production system prompt: a persona, then a list of rules, some ten thousand characters
    rules = "".join(f"- Rule {i}: never do the thing named qsr{i}.\n" for i in range(PROMPT_RULES))
    pasted[0] = {**pasted[0], "content": f"You are the helper qsp0.\n\nRules:\n{rules}"}
    pasted[1] = {**pasted[1], "content": f"Summarise this log qlm0:\n{rows}"}  # pasted by the user
    # the tool's result: a page it fetched, a tenth of the size
    pasted[3] = {**pasted[3], "content": f"Page qlm1:\n{rows[: len(rows) // 10]}"}
    size = len(pasted[1]["content"])
    cases.append(Case(f"a message of {size:,} characters", pasted, tools=_tools(), kwargs=base))
    # a production prompt's shape: paragraphs, lines and a list of rules, which a template may cut by their count
    rules = "".join(f"\n{mark} Rule {k} qpr{k}." for k, mark in enumerate(("-", "-", "*", "1.", "2.")))
    paragraphs = [
        {**m, "content": f"{m['content']}\n\nSecond part qpa{i}.\nA line qpl{i}.\n\nThird part qpb{i}.{rules}"}
        for i, m in enumerate(plain)
    ]
    cases.append(Case("paragraphs", paragraphs, kwargs=base))
    parts = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in plain]
    cases.append(Case("content parts", parts, kwargs=base))
    # images: two in a user's message, one a tool returns as MCP does (its bytes inline, with a `mimeType`)
    images = _tool_conversation("lookup_record")
    images[1] = {
        **images[1],
        "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Compare qim1."}],
    }
    png = {"type": "image", "data": "iVBORw0KGgo" * 96, "mimeType": "image/png"}
    images[3] = {**images[3], "content": [{"type": "text", "text": "Screenshot qim2."}, png]}
    cases.append(Case("content with images", images, tools=_tools(), kwargs=base))
    return cases


def _tool_conversation(tool: str) -> list[dict[str, Any]]:
    call = {"type": "function", "function": {"name": tool, "arguments": {"number": "qt7"}}}
    return [
        {"role": "system", "content": "Tool system qt0."},  # an operator's prompt, which a trigger may read
        {"role": "user", "content": "Find record qt1."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call0qt1x", **call}]},
        {"role": "tool", "content": "Record qt2 found.", "tool_call_id": "call0qt1x", "name": tool},
        {"role": "assistant", "content": "It is found qt3."},
        {"role": "user", "content": "Thanks qt4."},
    ]


def _agent_tools() -> list[dict[str, Any]]:
    return [_tools(n, f"Tool {i} does job qd{i}.")[0] for i, n in enumerate(["lookup_record", *AGENT_TOOLS])]


def _agent_conversation() -> list[dict[str, Any]]:
    """Each of the agent's tools called in turn after an operator's prompt and one user message (ids of nine
    letters and digits, as Mistral's require), its result given after the call."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Agent system qgs."},
        {"role": "user", "content": "Do the task qga."},
    ]
    for i, tool in enumerate(["lookup_record", *AGENT_TOOLS]):
        arguments, result = {"number": "qgn"}, f"Result {i} qgr{i}."
        if tool in _WEB_TOOLS:  # a page fetched from a link: its text, long and not JSON
            arguments = {"url": f"https://example.com/qgu{i}"}
            result = f"Page qgr{i}. " + " ".join(f"Line {k} of the page text qgp{i}x{k}." for k in range(16))
        call = {"type": "function", "function": {"name": tool, "arguments": arguments}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"call{i:02d}qga", **call}]})
        messages.append({"role": "tool", "content": result, "tool_call_id": f"call{i:02d}qga", "name": tool})
    return messages  # the model is to answer the last result: an agent in the middle of its loop


def arguments_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """`message` with its tool calls' object arguments written as JSON text (itself when it has none)."""
    calls = message.get("tool_calls") or []
    if not any(isinstance(c.get("function", {}).get("arguments"), dict) for c in calls):
        return message
    return {
        **message,
        "tool_calls": [
            {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
            if isinstance(c.get("function", {}).get("arguments"), dict)
            else c
            for c in calls
        ],
    }
