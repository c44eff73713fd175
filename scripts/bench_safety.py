"""`verify --only template-safety` on every hostile template, and the legitimate templates beside them.

Prints, for each template under tests/hostile (and tests/hostile/safety), the check's status, the rules it drew at
error or warning, and the wall time of `verify_with_context(folder, template=FILE, only=["template-safety"])` (the
tokenizer folder is read each time, as the CLI does, and the tokenizer loaded only when the coverage renders run;
Python's and transformers' imports are not counted). Then:
how many of the documented hostile templates (those whose first line names the attack and its write-up) and of the
others are flagged at error or warning, and how many of the published templates (tests/data/templates,
tests/data/unseen, tests/data/heldout, tests/data/heldout4) and bundled families (model_configs) draw an error or
warning (none should). With --cli, also
the whole command's wall time.

    python scripts/bench_safety.py [--cli]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hf_chat_templates import TemplateChoice  # noqa: E402
from hf_chat_templates.verification.runner import run_checks, verify_with_context  # noqa: E402
from tests.helpers import chatml_folder, context  # noqa: E402

HOSTILE = sorted((ROOT / "tests" / "hostile").glob("*.jinja")) + sorted((ROOT / "tests/hostile/safety").glob("*.jinja"))
LEGITIMATE = (
    sorted((ROOT / "tests/data/templates").glob("*/*.jinja"))
    + sorted((ROOT / "tests/data/unseen").glob("*/*.jinja"))
    + sorted((ROOT / "tests/data/heldout").glob("*/*.jinja"))
    + sorted((ROOT / "tests/data/heldout4").glob("*/*.jinja"))
    + sorted(ROOT.glob("model_configs/*/*.jinja"))
)


def _flagged(findings: list[dict[str, object]]) -> list[str]:
    return sorted({str(f["rule"]) for f in findings if f["severity"] in ("error", "warning")})


def _cli_seconds(folder: Path, path: Path) -> float:
    start = time.monotonic()
    command = [sys.executable, "-m", "hf_chat_templates", "verify", str(folder), "--template", str(path)]
    subprocess.run([*command, "--only", "template-safety"], capture_output=True, check=False, cwd=ROOT)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli", action="store_true", help="also time the whole command, imports included")
    args = parser.parse_args()
    folder = chatml_folder(Path(tempfile.mkdtemp()) / "tok")
    verify_with_context(
        folder, TemplateChoice(template=HOSTILE[0]), only=["template-safety"]
    )  # imports and caches warmed
    counts = {True: [0, 0], False: [0, 0]}  # documented? -> [flagged, total]
    slowest = 0.0
    cli_times: list[float] = []
    print(f"{'template':<44} {'status':<6} {'seconds':>7}  rules at error or warning")
    for path in HOSTILE:
        documented = path.read_text(encoding="utf-8").startswith("{# ")
        start = time.monotonic()
        report, _ = verify_with_context(folder, TemplateChoice(template=path), only=["template-safety"])
        seconds = time.monotonic() - start
        slowest = max(slowest, seconds)
        (result,) = report.checks
        rules = _flagged(result.detail.get("findings", []))
        counts[documented][0] += bool(rules)
        counts[documented][1] += 1
        cli_times += [_cli_seconds(folder, path)] if args.cli else []
        cli = f"  cli {cli_times[-1]:.2f}s" if args.cli else ""
        name = str(path.relative_to(ROOT / "tests" / "hostile"))
        print(f"{name:<44} {result.status:<6} {seconds:7.3f}  {', '.join(rules) or '-'}{cli}")
    print(f"\ndocumented hostile templates flagged at error or warning: {counts[True][0]} of {counts[True][1]}")
    print(f"other hostile templates flagged at error or warning: {counts[False][0]} of {counts[False][1]}")
    print(f"slowest --only template-safety: {slowest:.3f} s")
    if cli_times:
        ordered = sorted(cli_times)
        print(
            f"whole command on the hostile templates: median {ordered[len(ordered) // 2]:.2f} s, slowest "
            f"{ordered[-1]:.2f} s (a static verdict loads no tokenizer)"
        )
        clean = [_cli_seconds(folder, path) for path in LEGITIMATE[:3]]
        print(f"whole command on {len(clean)} published templates (coverage renders, tokenizer loaded): "
              f"{', '.join(f'{s:.2f}' for s in clean)} s")  # fmt: skip
    noisy = []
    for path in LEGITIMATE:
        (result,) = run_checks(context(folder, path.read_text(encoding="utf-8")), ["template-safety"])
        if _flagged(result.detail.get("findings", [])) or result.status == "fail":  # a check that raised fails too
            noisy.append(f"{path.relative_to(ROOT)}: {_flagged(result.detail.get('findings', [])) or result.message}")
    print(f"legitimate templates with an error or warning: {len(noisy)} of {len(LEGITIMATE)}")
    for line in noisy:
        print(f"  {line}")


if __name__ == "__main__":
    main()
