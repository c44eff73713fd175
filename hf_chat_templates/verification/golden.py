"""Golden renderings: every probe's text and token ids for a family variant on its default base tokenizer.

`scripts/write_goldens.py` writes them under tests/golden/; the tests render again and compare, so any change to a
template, a base tokenizer or transformers' rendering shows up as a diff of text and ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..conversations.suite import build_probes
from ..families.registry import Variant
from ..template.rendering import Renderer, frozen_clock

GOLDEN_CLOCK_ISO = "2024-01-02T03:04:05"


def golden_renderings(folder: Path, variant: Variant) -> dict[str, Any]:
    """Render every probe with the variant on the installed tokenizer at `folder`, under a frozen clock."""
    import datetime as dt

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    renderer = Renderer(tok, variant.template, variant.kwarg_defaults)
    probes: dict[str, Any] = {}
    with frozen_clock(dt.datetime.fromisoformat(GOLDEN_CLOCK_ISO)):
        for probe in build_probes():
            r = renderer.render(
                probe.message_list(),
                probe.tool_list(),
                cache=False,
                add_generation_prompt=probe.add_generation_prompt,
                continue_final_message=probe.continue_final_message,
            )
            probes[probe.id] = {"text": r.text, "ids": renderer.encode(r.text or "")} if r.ok else {"error": r.error}
    return {
        "family": variant.family,
        "variant": variant.name,
        "template_sha256": variant.sha256,
        "clock": GOLDEN_CLOCK_ISO,
        "probes": probes,
    }


def golden_path(root: Path, variant: Variant) -> Path:
    return root / f"{variant.family}.{variant.name}.json"
