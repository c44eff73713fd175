"""Write tests/golden/FAMILY.VARIANT.json: every probe's rendering and token ids on the family's default base.

python scripts/write_goldens.py            # all families and variants
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

from hf_chat_templates import TemplateChoice

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parent.parent / "tests" / "golden"


def dump(data: dict) -> str:
    """Pretty JSON with each id list on one line, so a diff shows which probe changed."""
    text = json.dumps(data, ensure_ascii=False, indent=1)
    return re.sub(r"\[\s*(\d+(?:,\s*\d+)*)\s*\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]", text) + "\n"


def main() -> None:
    from hf_chat_templates import base_tokenizer, install, list_families
    from hf_chat_templates.verification.golden import golden_path, golden_renderings

    ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for family in list_families():
            for variant in family.variants.values():
                folder = Path(tmp) / f"{family.name}-{variant.name}"
                install(
                    TemplateChoice(family=family, variant=variant.name), base_tokenizer(family.base_tokenizer), folder
                )
                data = golden_renderings(folder, variant)
                data["base_tokenizer"] = family.base_tokenizer
                path = golden_path(ROOT, variant)
                path.write_text(dump(data), encoding="utf-8")
                print(f"{path.relative_to(ROOT.parent.parent)}: {len(data['probes'])} probes", file=sys.stderr)


if __name__ == "__main__":
    main()
