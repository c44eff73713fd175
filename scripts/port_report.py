"""How `port` moves the published templates and the bundled families toward rendering the same in every engine.

    python scripts/port_report.py [--engines llama.cpp,tgi,...] [TEMPLATE ...]

For each template (default: tests/data/templates/*/chat_template.jinja and model_configs/*/*.jinja) and each engine
profile that runs here: whether the engine renders every probe as transformers does before and after `port`, and
how many probes it renders the same; then the share of (template, engine) pairs identical before and after, and the
rewrites applied. transformers' own renderings are unchanged by construction; the script checks that too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    from hf_chat_templates.verification.port import port_template
    from hf_chat_templates.verification.template_diff import diff_templates, read_side

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("templates", nargs="*", type=Path)
    parser.add_argument("--engines", default=None)
    args = parser.parse_args()
    paths = args.templates or [
        *sorted((ROOT / "tests/data/templates").glob("*/chat_template.jinja")),
        *sorted((ROOT / "model_configs").glob("*/*.jinja")),
    ]
    pairs_before = pairs_after = pairs = 0
    applied: Counter[str] = Counter()
    started = time.perf_counter()
    for path in paths:
        result = port_template(path, engines=args.engines)
        name = f"{path.parent.name}/{path.name}"
        if result.changed:
            ported = read_side(path)
            ported = type(ported)(ported.path, ported.origin, result.template, ported.variables)
            assert diff_templates(path, ported).renders_same, f"{name}: port changed transformers' rendering"
        cells = []
        for engine, (before, after, total) in result.engines.items():
            pairs += 1
            pairs_before += before == total
            pairs_after += after == total
            cells.append(f"{engine} {before}→{after}/{total}")
        steps = [s.rewrite.name for s in result.steps if s.status == "applied"]
        applied.update(steps)
        print(f"{name:<40} {'; '.join(cells)}; applied: {', '.join(steps) or 'none'}")
    print(
        f"\n{len(paths)} templates, {pairs} (template, engine) pairs: identical on every probe {pairs_before} before, "
        f"{pairs_after} after port; rewrites applied: {dict(applied)}; transformers unchanged on every template "
        f"({time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
