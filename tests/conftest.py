"""Fixtures (toy tokenizers for every tier; real base tokenizers, built once and cached, for tests/real and
tests/e2e) and the tiers: every test is marked by its folder, `unit`, `real` or `e2e`, and `slow` when it is not a
unit test, so `-m "not slow"` selects tests/unit. Shared helpers live in tests/helpers.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice

from .helpers import build_toy_tokenizer, chatml_folder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "real", "e2e")
# Fixtures that build or load a real tokenizer: too slow for the unit tier.
REAL_FIXTURES = frozenset({"llama3_base", "o200k_base", "sp_base", "installed_variants"})
NOT_IN_UNIT = "unit tests may not build real tokenizers; move it to tests/real"


# ---- the tiers -------------------------------------------------------------------------------------------------


def tier_of(path: Path) -> str | None:
    """ "unit", "real" or "e2e" for a test file under that folder of tests/, else None."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in tests/unit, tests/real or tests/e2e")
        item.add_marker(getattr(pytest.mark, tier))
        if tier != "unit":
            item.add_marker(pytest.mark.slow)


_current: list[pytest.Item] = []  # the test being set up, for the session-scoped fixtures below


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A unit test that asks for a real tokenizer fails before anything is built (even when an earlier test of
    another tier already built it)."""
    _current[:] = [item]
    used = REAL_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if used and tier_of(item.path) == "unit":
        pytest.fail(f"{item.nodeid} uses {', '.join(sorted(used))}: {NOT_IN_UNIT}", pytrace=False)


@pytest.fixture(scope="session")
def _unit_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def _js_engine() -> str | None:
    """transformers.js's profile for tests/real and tests/e2e: when the pinned @huggingface/jinja is not in the
    package's js folder and node and npm are on PATH, it is installed there with npm on first use (what a user runs:
    `install_command()`), so the suite's one command runs that profile too; otherwise it skips, its reason naming the
    install command. None when the profile can run, else why not."""
    from hf_chat_templates.template.engines.js import TransformersJsEngine, install_js_engine

    reason = TransformersJsEngine().unavailable()
    if reason is None or shutil.which("node") is None or shutil.which("npm") is None:
        return reason
    try:
        install_js_engine(timeout=240)
    except RuntimeError as err:
        return f"{reason}; installing it failed: {err}"
    return TransformersJsEngine().unavailable()


@pytest.fixture(autouse=True)
def _no_node_in_unit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier runs no subprocess: the transformers.js profile (a node process) is unavailable there, so
    engine-parity skips it with its reason, and verify's workers (llama.cpp, the official renderers) cannot start,
    so their work is done in the test's process; tests/real runs them. What its commands keep in the cache folder
    (records of checked files, proofs) goes to one of the session's own, not the user's. tests/real and tests/e2e
    get the profile when node and npm can bring it (`_js_engine`)."""
    if tier_of(request.node.path) == "unit":
        from hf_chat_templates.template.engines import json_worker

        monkeypatch.setenv("HF_CHAT_TEMPLATES_JS_DIR", str(TESTS / "no-js-in-the-unit-tier"))
        monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(request.getfixturevalue("_unit_cache")))
        monkeypatch.setattr(json_worker, "_popen", lambda command: None)
    else:
        request.getfixturevalue("_js_engine")


def _refuse_in_unit(fixture: str) -> None:
    """The real-tokenizer fixtures refuse to run for a test under tests/unit (e.g. one that asks for them with
    request.getfixturevalue)."""
    if _current and tier_of(_current[0].path) == "unit":
        pytest.fail(f"{_current[0].nodeid} uses {fixture}: {NOT_IN_UNIT}", pytrace=False)


# ---- toy tokenizers --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def toy_tokenizer_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_toy_tokenizer(tmp_path_factory.mktemp("toy") / "tok")


@pytest.fixture
def toy_tokenizer(toy_tokenizer_master: Path, tmp_path: Path) -> Path:
    """A fresh copy per test, so a test may damage it."""
    target = tmp_path / "src"
    shutil.copytree(toy_tokenizer_master, target)
    return target


@pytest.fixture
def chatml(tmp_path: Path) -> Path:
    """tmp_path/tok: the ChatML-like baseline (helpers.GOOD on the toy tokenizer), fresh per test."""
    return chatml_folder(tmp_path / "tok")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ChatML-like baseline, once per module, for tests that do not change it."""
    return chatml_folder(tmp_path_factory.mktemp("good") / "tok")


# ---- real tokenizers (tests/real and tests/e2e only) -----------------------------------------------------------


def base_tokenizer_path(name: str) -> Path:
    from hf_chat_templates import base_tokenizer

    return base_tokenizer(name)


@pytest.fixture(scope="session")
def llama3_base() -> Path:
    _refuse_in_unit("llama3_base")
    return base_tokenizer_path("llama3")


@pytest.fixture(scope="session")
def o200k_base() -> Path:
    _refuse_in_unit("o200k_base")
    return base_tokenizer_path("o200k-harmony")


@pytest.fixture(scope="session")
def sp_base() -> Path:
    _refuse_in_unit("sp_base")
    return base_tokenizer_path("mistral-v3-sp")


@pytest.fixture(scope="session")
def installed_variants(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Every bundled family and variant installed once on its default base tokenizer."""
    _refuse_in_unit("installed_variants")
    from hf_chat_templates import install, list_families

    root = tmp_path_factory.mktemp("variants")
    folders = {}
    for family in list_families():
        base = base_tokenizer_path(family.base_tokenizer)
        for variant in family.variants.values():
            folder = root / f"{family.name}-{variant.name}"
            install(TemplateChoice(family=family, variant=variant.name), base, folder)
            folders[(family.name, variant.name)] = folder
    return folders
