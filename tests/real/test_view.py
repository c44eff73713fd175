"""The token view and the HTML report on the real families: a diff with another variant aligns both sides, and
every failure (the official renderer's too) is anchored at its token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.verification.runner import verify_with_context
from hf_chat_templates.view.conversation import view_conversation
from hf_chat_templates.view.report import anchor_for, verification_html

from ..helpers import parse_view


def test_diff_with_another_variant_aligns_both_sides(installed_variants: dict, tmp_path: Path) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(
        json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]})
    )
    source = installed_variants[("gemma3-tools", "corrected")]
    text, page = view_conversation(str(source), messages, "gemma3-tools", diff_with="upstream", html=True, color=False)
    assert "they part ways at token" in text
    parsed = parse_view(page or "")
    left, right = parsed.views
    first = next(t for t in left if "here" in t["classes"])
    assert "first-difference" in parsed.ids and parsed.ids["first-difference"]["data-i"] == first["data-i"]
    i = int(first["data-i"])
    assert [t["data-id"] for t in left[:i]] == [t["data-id"] for t in right[:i]]
    assert left[i]["data-id"] != right[i]["data-id"]


def test_verify_html_anchors_each_failure_at_its_token(installed_variants: dict) -> None:
    source = installed_variants[("gemma3-tools", "upstream")]
    report, ctx = verify_with_context(source, TemplateChoice(family="gemma3-tools", variant="upstream"))
    page = verification_html([(report, ctx)])
    parsed = parse_view(page)
    failing = [c for c in report.checks if c.status == "fail"]
    # engine-parity: the seed lists tools with map('tojson'), which llama.cpp lacks
    assert {c.id for c in failing} == {"nothing-dropped", "completion-matches-content", "engine-parity"}
    for check in failing:
        anchor = anchor_for(report, check.id)
        assert f'href="#{anchor}"' in page
        assert anchor in parsed.ids
    # completion-matches-content: both sides aligned; the anchored token is where the stray newline is
    marked = parsed.ids[anchor_for(report, "completion-matches-content")]
    assert marked["data-side"] == "left"
    ids = ctx.probe_token_ids(ctx.probe(failing[1].probe or "plain"))
    newline = ctx.tokenizer.encode("\n", add_special_tokens=False)
    assert ids[int(marked["data-i"])] in newline + ctx.tokenizer.encode("\n<end_of_turn>", add_special_tokens=False)


@pytest.mark.parametrize("check_id", ["reference-parity"])
def test_verify_html_aligns_the_official_renderer(check_id: str, installed_variants: dict) -> None:
    source = installed_variants[("llama3.2-pythonic", "upstream")]
    report, ctx = verify_with_context(
        source, TemplateChoice(family="llama3.2-pythonic", variant="upstream"), only=[check_id]
    )
    check = report.check(check_id)
    assert check.status == "fail"
    parsed = parse_view(verification_html([(report, ctx)]))
    left, right = parsed.views[:2]
    anchored = parsed.ids[anchor_for(report, check_id)]
    assert int(anchored["data-i"]) == check.detail["token_position"]
    assert [t["data-id"] for t in left if "here" in t["classes"]] == [anchored["data-id"]]
    assert right and all(t.get("data-side") == "right" for t in right)
