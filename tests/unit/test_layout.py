"""The package's shape: no import cycle (every import, function-level included), dependencies that point one way
(foundations never import a stage; a stage imports only earlier stages; nothing imports the CLI), no module named
after a function the package exports, and modules and functions of a readable size."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hf_chat_templates

PACKAGE = Path(hf_chat_templates.__file__).parent
NAME = "hf_chat_templates"
# Foundations, then the stages in pipeline order; each may import what comes before it, never what comes after.
FOUNDATIONS = ("errors", "_compat", "_version", "outputs", "template", "tokenizer", "conversations")
STAGES = ("families", "installation", "gguf", "verification", "training", "view", "publish", "cli")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module of the package that `name` imports, anywhere in its body."""
    path, is_package = MODULES[name]
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(NAME)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(NAME):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in MODULES else target)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle() -> None:
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_lives_in_a_known_room() -> None:
    rooms = {_room(m) for m in MODULES} - {""}
    assert rooms <= set(FOUNDATIONS) | set(STAGES) | {"__main__"}


def test_dependencies_point_one_way() -> None:
    order = {room: i for i, room in enumerate(STAGES)}
    wrong = []
    for module, imported in GRAPH.items():
        room = _room(module)
        if room == "__main__":  # `python -m hf_chat_templates` runs the CLI
            continue
        for target in imported:
            other = _room(target)
            if other in ("", room):
                if other == "" and room in FOUNDATIONS:
                    wrong.append(f"{module} imports the package's top level")
                continue
            if room in FOUNDATIONS and other in STAGES:
                wrong.append(f"foundation {module} imports stage {target}")
            elif room in order and other in order and order[other] > order[room]:
                wrong.append(f"{module} imports the later stage {target}")
            elif other == "cli":
                wrong.append(f"{module} imports the CLI")
    assert wrong == []


def test_no_module_is_named_after_an_exported_function() -> None:
    exported = set(hf_chat_templates.__all__)
    clashes = [m for m in MODULES if m.split(".")[-1] in exported]
    assert clashes == []


def test_modules_and_functions_stay_readable() -> None:
    long_modules = []
    long_functions = []
    for name, (path, _) in MODULES.items():
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}: {length} lines")
    assert long_modules == [] and long_functions == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name: str) -> None:
    __import__(name)
