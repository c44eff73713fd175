"""The second, third and fourth corpora of published templates (tests/data/unseen, tests/data/heldout,
tests/data/heldout4) stay well formed and unseen, and corpus_report's scoring against their hand labels counts false
alarms and misses as it says."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from hf_chat_templates.verification.checks import CHECK_ORDER
from hf_chat_templates.verification.results import CheckResult

from ..helpers import CORPUS, REPO_ROOT, corpus_manifest, corpus_names, corpus_templates

UNSEEN = REPO_ROOT / "tests" / "data" / "unseen"
HELDOUT = REPO_ROOT / "tests" / "data" / "heldout"
HELDOUT4 = REPO_ROOT / "tests" / "data" / "heldout4"
LABELED = [(corpus, name) for corpus in (UNSEEN, HELDOUT, HELDOUT4) for name in corpus_names(corpus)]
KEYS = ("source", "fetched_from", "license", "bos_token", "eos_token", "pad_token", "add_bos", "generation_eos")
KEYS += ("special_tokens", "added_tokens", "stop_tokens", "kwargs", "defects", "not_defects")


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus_report", REPO_ROOT / "scripts" / "corpus_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("corpus", "name"), LABELED, ids=[f"{c.name}/{n}" for c, n in LABELED])
def test_each_template_is_labeled_with_real_check_ids(corpus: Path, name: str) -> None:
    manifest = corpus_manifest(name, corpus)
    assert [k for k in KEYS if k not in manifest] == []
    for table in ("defects", "not_defects", "defects_found_by_verify"):
        for key in manifest.get(table, {}):
            assert [c for c in key.split("|") if c not in CHECK_ORDER] == [], f"{name}: [{table}] {key}"
    data = corpus_templates(name, corpus)["default"].read_bytes()
    assert b"\r" not in data and data.decode("utf-8")


@pytest.mark.parametrize(
    ("corpus", "earlier", "size"), [(UNSEEN, (), 36), (HELDOUT, (UNSEEN,), 27), (HELDOUT4, (UNSEEN, HELDOUT), 28)]
)
def test_the_corpus_is_unseen_and_listed(corpus: Path, earlier: tuple[Path, ...], size: int) -> None:
    names = corpus_names(corpus)
    assert len(names) >= size
    seen = {p.read_bytes() for p in CORPUS.glob("*/*.jinja")}
    seen |= {p.read_bytes() for p in (REPO_ROOT / "model_configs").glob("*/*.jinja")}
    seen |= {p.read_bytes() for folder in earlier for p in folder.glob("*/*.jinja")}
    assert [n for n in names if corpus_templates(n, corpus)["default"].read_bytes() in seen] == []
    licenses = (corpus / "LICENSES.md").read_text(encoding="utf-8")
    assert [n for n in names if f"| {n} |" not in licenses] == []


def test_labels_take_each_id_of_a_key_and_fall_back_to_known_failures() -> None:
    report = _report()
    assert report.labels({"defects": {"a|b": "x", "c": "y"}, "known_failures": {"d": "z"}}) == {
        "a|b": ("a", "b"),
        "c": ("c",),
    }
    assert report.labels({"known_failures": {"d": "z"}}) == {"d": ("d",)}
    assert report.labels({"defects": {}, "known_failures": {"d": "z"}}) == {}


def test_labels_add_the_defects_confirmed_after_verify_only_when_asked() -> None:
    report = _report()
    manifest = {"defects": {"a": "x"}, "defects_found_by_verify": {"a": "y", "b|c": "z"}}
    assert report.labels(manifest) == {"a": ("a",)}
    assert report.labels(manifest, confirmed=True) == {
        "a": ("a",),
        "confirmed:a": ("a",),
        "confirmed:b|c": ("b", "c"),
    }
    checks = [CheckResult("a", "fail", "m"), CheckResult("b", "warn", "m"), CheckResult("d", "fail", "m")]
    assert [c.id for c in report.score(checks, report.labels(manifest))[1]] == ["b", "d"]
    assert [c.id for c in report.score(checks, report.labels(manifest, confirmed=True))[1]] == ["d"]


def test_the_confirmed_score_line_names_how_many_were_confirmed_after_verify() -> None:
    from collections import Counter

    line = _report().confirmed_line(Counter(findings=10), Counter(added=3, templates=2, false=4, misses=1, labeled=9))
    assert "3 defect(s) in 2 template(s) confirmed after verify ran" in line
    assert "false alarms 4 of 10" in line and "misses 1 of 9" in line


def test_score_counts_unlabeled_findings_as_false_alarms_and_unreported_labels_as_misses() -> None:
    report = _report()
    checks = [
        CheckResult("renders", "fail", "m"),
        CheckResult("prefix-stable", "warn", "m"),
        CheckResult("engine-parity", "fail", "m"),
        CheckResult("deterministic", "info", "m"),
        CheckResult("no-double-bos", "pass", "m"),
    ]
    defects = {
        "renders": ("renders",),
        "completion-matches-content|prefix-stable": ("completion-matches-content", "prefix-stable"),
    }
    defects["no-double-bos"] = ("no-double-bos",)
    findings, false_alarms, misses = report.score(checks, defects)
    assert [c.id for c in findings] == ["renders", "prefix-stable", "engine-parity"]
    assert [c.id for c in false_alarms] == ["engine-parity"]
    assert misses == ["no-double-bos"]


def test_unseen_helpers_read_the_named_folder(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "model.toml").write_text('source = "x"\n', encoding="utf-8")
    (tmp_path / "not-a-template").mkdir()
    assert corpus_names(tmp_path) == ["one"]
    assert corpus_manifest("one", tmp_path) == {"source": "x"}
