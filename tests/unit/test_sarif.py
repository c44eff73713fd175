"""`verify --sarif` and `--baseline`: the SARIF log holds the fields SARIF 2.1.0 requires and points each safety
finding at its line and column; a baseline takes accepted findings out of the verdict, and a baseline entry
without a reason is refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.errors import UsageError
from hf_chat_templates.verification.runner import verify
from hf_chat_templates.verification.sarif import apply_baseline, read_baseline, sarif_document

from ..helpers import REPO_ROOT, run

TRIGGER = REPO_ROOT / "tests" / "hostile" / "safety" / "trigger_invoice.jinja"

# The SARIF 2.1.0 schema's required properties and constrained values for what this log uses (sarifLog, run,
# tool, toolComponent, reportingDescriptor, result, message, location, physicalLocation, artifactLocation,
# region), transcribed from the OASIS schema sarif-schema-2.1.0.json.
_MESSAGE = {"type": "object", "anyOf": [{"required": ["text"]}, {"required": ["id"]}]}
_REGION = {
    "type": "object",
    "properties": {"startLine": {"type": "integer", "minimum": 1}, "startColumn": {"type": "integer", "minimum": 1}},
}
_ARTIFACT_LOCATION = {"type": "object", "properties": {"uri": {"type": "string", "format": "uri-reference"}}}
_LOCATION = {
    "type": "object",
    "properties": {
        "physicalLocation": {
            "type": "object",
            "anyOf": [{"required": ["address"]}, {"required": ["artifactLocation"]}],
            "properties": {"artifactLocation": _ARTIFACT_LOCATION, "region": _REGION},
        }
    },
}
_RESULT = {
    "type": "object",
    "required": ["message"],
    "properties": {
        "ruleId": {"type": "string"},
        "ruleIndex": {"type": "integer", "minimum": -1},
        "level": {"enum": ["none", "note", "warning", "error"]},
        "message": _MESSAGE,
        "locations": {"type": "array", "items": _LOCATION},
        "partialFingerprints": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
_DESCRIPTOR = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string"},
        "shortDescription": {"type": "object", "required": ["text"]},
        "help": {"type": "object", "required": ["text"]},
        "defaultConfiguration": {
            "type": "object",
            "properties": {"level": {"enum": ["none", "note", "warning", "error"]}},
        },
    },
}
SARIF_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "version": {"enum": ["2.1.0"]},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"rules": {"type": "array", "items": _DESCRIPTOR}},
                            }
                        },
                    },
                    "artifacts": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"location": _ARTIFACT_LOCATION}},
                    },
                    "results": {"type": "array", "items": _RESULT},
                },
            },
        },
    },
}


def _validate(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, SARIF_SCHEMA)
    for sarif_run in doc["runs"]:
        rules = sarif_run["tool"]["driver"]["rules"]
        for result in sarif_run["results"]:
            assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_the_schema_subset_rejects_a_log_missing_required_fields() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]}, SARIF_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{}]}]}, SARIF_SCHEMA
        )


@pytest.fixture(scope="module")
def trigger_report(good: Path) -> Any:
    return verify(good, TemplateChoice(template=TRIGGER), only=["renders", "template-safety"])


def test_sarif_points_each_safety_finding_at_its_line_and_column(trigger_report: Any) -> None:
    doc = sarif_document(trigger_report, "tests/hostile/safety/trigger_invoice.jinja")
    _validate(doc)
    (result,) = [r for r in doc["runs"][0]["results"] if r["ruleId"].startswith("HCT-")]
    assert result["ruleId"] == "HCT-S008" and result["level"] == "error"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (3, 1)
    assert "'invoice'" in result["message"]["text"] and "Fix: remove the conditional text" in result["message"]["text"]
    assert result["partialFingerprints"]["hctFingerprint/v1"]


def test_a_template_held_in_tokenizer_config_gets_no_line_and_column_of_that_file(trigger_report: Any) -> None:
    doc = sarif_document(trigger_report, "folder/tokenizer_config.json")
    _validate(doc)
    (result,) = [r for r in doc["runs"][0]["results"] if r["ruleId"].startswith("HCT-")]
    assert result["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "folder/tokenizer_config.json"}}


def test_sarif_of_a_clean_template_has_no_results(good: Path) -> None:
    doc = sarif_document(verify(good, only=["template-safety"]), "chat_template.jinja")
    _validate(doc)
    assert doc["runs"][0]["results"] == []


def _baseline(tmp_path: Path, *entries: dict[str, Any]) -> Path:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"accepted": list(entries)}), encoding="utf-8")
    return path


def test_a_baseline_takes_accepted_findings_out_of_the_verdict(trigger_report: Any, tmp_path: Path) -> None:
    (finding,) = trigger_report.check("template-safety").detail["findings"]
    entry = {"rule": "HCT-S008", "fingerprint": finding["fingerprint"], "reason": "reviewed: a test fixture"}
    accepted = apply_baseline(trigger_report, read_baseline(_baseline(tmp_path, entry)))
    result = accepted.check("template-safety")
    assert result.status == "pass" and result.detail["accepted"][0]["reason"] == "reviewed: a test fixture"
    by_line = {"rule": "HCT-S008", "line": 3, "column": 1, "reason": "reviewed"}
    assert (
        apply_baseline(trigger_report, read_baseline(_baseline(tmp_path, by_line))).check("template-safety").status
        == "pass"
    )
    other = {"rule": "HCT-S008", "line": 9, "reason": "reviewed"}
    kept = apply_baseline(trigger_report, read_baseline(_baseline(tmp_path, other))).check("template-safety")
    assert kept.status == "fail" and kept.detail["baseline_unmatched"][0]["line"] == 9


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"accepted": [{"rule": "HCT-S008", "line": 3}]}, "accepted entry 1: (HCT-S008) has no reason"),
        ({"accepted": [{"rule": "HCT-S008", "line": 3, "reason": "  "}]}, "has no reason"),
        ({"accepted": [{"rule": "HCT-S999", "line": 3, "reason": "x"}]}, "rule 'HCT-S999' is not a template-safety"),
        ({"accepted": [{"rule": "HCT-S008", "reason": "x"}]}, "names neither a fingerprint nor a line"),
        ({"accepted": [{"rule": "HCT-S008", "line": 0, "reason": "x"}]}, "line 0 is not a line or column number"),
        ({"accepted": [{"rule": "HCT-S008", "line": 1, "reason": "x", "why": 1}]}, "unknown key(s) why"),
        ([], 'expected an object with an "accepted" list'),
    ],
)
def test_a_bad_baseline_is_a_usage_error_naming_the_entry(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(UsageError) as err:
        read_baseline(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_verify_writes_sarif_and_applies_a_baseline(
    capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path
) -> None:
    out = tmp_path / "reports" / "safety.sarif"
    args = ["verify", str(good), "--template", str(TRIGGER), "--only", "template-safety", "--sarif", str(out)]
    code, _, err = run(capsys, *args)
    assert code == 1 and "SARIF written" in err
    doc = json.loads(out.read_text(encoding="utf-8"))
    _validate(doc)
    assert doc["runs"][0]["artifacts"][0]["location"]["uri"].endswith("trigger_invoice.jinja")
    baseline = _baseline(tmp_path, {"rule": "HCT-S008", "line": 3, "reason": "a test fixture"})
    code, out_text, _ = run(capsys, *args, "--baseline", str(baseline))
    assert code == 0, out_text
    assert json.loads(out.read_text(encoding="utf-8"))["runs"][0]["results"] == []


def test_verify_refuses_a_baseline_entry_without_a_reason(
    capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path
) -> None:
    baseline = _baseline(tmp_path, {"rule": "HCT-S008", "line": 3})
    code, _, err = run(capsys, "verify", str(good), "--only", "template-safety", "--baseline", str(baseline))
    assert code == 2 and "has no reason" in err and "to fix:" in err and "Traceback" not in err
    code, _, err = run(capsys, "verify", str(good), "--baseline", str(tmp_path / "missing.json"))
    assert code == 2 and "baseline file not found" in err
