"""Measure `verify` on the corpus of published chat templates (tests/data/templates).

For each template, two folders are built on a base tokenizer: the model's folder as it ships (its tokens registered,
bos/eos/pad and generation_config.json as its model.toml says) and the bare base tokenizer with only the template
file. One line per template says how many checks fail on the shipped folder, how many of those model.toml lists as
known failures and which are false alarms, whether verify stops where the model stops, and whether the bare
tokenizer's `control-tokens-atomic` caught the unregistered tokens. The totals close the report.

    python scripts/corpus_report.py                # on the real Llama 3 vocabulary
    python scripts/corpus_report.py --base toy     # on the toy tokenizer, in seconds
    python scripts/corpus_report.py --show         # and the messages of every failure model.toml does not list
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def base_folder(name: str, tmp: Path) -> Path:
    if name == "toy":
        from tests.helpers import build_toy_tokenizer

        return build_toy_tokenizer(tmp / "toy-base")
    from hf_chat_templates import base_tokenizer

    return base_tokenizer(name)


def is_special(tokenizer: object, token: str) -> bool:
    ids = tokenizer.encode(token, add_special_tokens=False)  # type: ignore[attr-defined]
    entry = tokenizer.added_tokens_decoder.get(ids[0]) if len(ids) == 1 else None  # type: ignore[attr-defined]
    return entry is not None and entry.content == token and entry.special


def bare_verdict(name: str, folder: Path, specials: list[str], kwargs: dict | None) -> str:
    """Whether control-tokens-atomic on the bare tokenizer names one of the model's unregistered special tokens."""
    from transformers import AutoTokenizer

    from hf_chat_templates import verify

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    unregistered = [t for t in specials if not is_special(tokenizer, t)]
    if not unregistered:
        return "n/a (the base registers them)"
    result = verify(folder, only=["control-tokens-atomic"], kwargs=kwargs).check("control-tokens-atomic")
    text = " ".join([result.message, *(e["message"] for e in result.detail.get("examples", []))])
    named = [t for t in unregistered if t in text]
    if result.status == "fail" and named:
        return f"caught ({len(named)}/{len(unregistered)} named)"
    return f"MISSED ({result.status}: none of {' '.join(unregistered)} named)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", choices=["llama3", "toy"], default="llama3", help="base tokenizer (default: llama3)")
    parser.add_argument(
        "--show", action="store_true", help="print each unlisted failure's examples (the messages to judge)"
    )
    args = parser.parse_args()

    from hf_chat_templates.verification.runner import verify_with_context
    from tests.helpers import corpus_manifest, corpus_names, corpus_templates, model_folder

    started = time.monotonic()
    totals = {"templates": 0, "failures": 0, "known": 0, "false": 0, "missed_stops": 0, "bare_missed": 0}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = base_folder(args.base, tmp)
        print(f"base tokenizer: {args.base}")
        for name in corpus_names():
            manifest = corpus_manifest(name)
            kwargs = manifest.get("kwargs") or None
            known = manifest.get("known_failures", {})
            texts = [p.read_text(encoding="utf-8") for p in corpus_templates(name).values()]
            specials = [t for t in manifest["special_tokens"] if any(t in text for text in texts)]
            shipped = model_folder(name, base, tmp / f"{name}-shipped")
            bare = model_folder(name, base, tmp / f"{name}-bare", registered=False)
            report, ctx = verify_with_context(shipped, kwargs=kwargs)
            failing = [c.id for c in report.checks if c.status == "fail"]
            false_alarms = [c for c in failing if c not in known]
            missed_stops = [t for t in manifest["stop_tokens"] if t not in ctx.stop_tokens]
            bare = bare_verdict(name, bare, specials, kwargs)
            totals["templates"] += 1
            totals["failures"] += len(failing)
            totals["known"] += len(failing) - len(false_alarms)
            totals["false"] += len(false_alarms)
            totals["missed_stops"] += bool(missed_stops)
            totals["bare_missed"] += bare.startswith("MISSED")
            print(
                f"{name:<26} shipped: {len(failing)} failing, {len(failing) - len(false_alarms)} known, "
                f"{len(false_alarms)} false alarm(s){' (' + ', '.join(false_alarms) + ')' if false_alarms else ''}; "
                f"stops {'ok' if not missed_stops else 'miss ' + ' '.join(missed_stops)} "
                f"(verify: {' '.join(ctx.stop_tokens) or 'none'}); bare control-tokens-atomic: {bare}"
            )
            if args.show:
                for check in report.checks:
                    if check.id in false_alarms:
                        for example in check.detail.get("examples", [{"message": check.message}]):
                            print(f"    {check.id} [{example.get('severity', 'error')}]: {example['message']}")
    print(
        f"\nfailures on shipped folders: {totals['failures']} ({totals['known']} known)\n"
        f"false alarms: {totals['false']} over {totals['templates']} templates\n"
        f"templates whose stop tokens verify misses: {totals['missed_stops']}\n"
        f"bare tokenizers whose unregistered tokens went unnoticed: {totals['bare_missed']}\n"
        f"({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
