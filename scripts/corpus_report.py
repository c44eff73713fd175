"""Measure `verify` on the corpus of published chat templates (tests/data/templates).

For each template, two folders are built on a base tokenizer: the model's folder as it ships (its tokens registered,
bos/eos/pad and generation_config.json as its model.toml says) and the bare base tokenizer with only the template
file. One line per template says how many checks fail on the shipped folder, how many of those model.toml lists as
known failures and which are false alarms, whether verify stops where the model stops, and whether the bare
tokenizer's `control-tokens-atomic` caught the unregistered tokens. The totals close the report.

    python scripts/corpus_report.py                # on the real Llama 3 vocabulary
    python scripts/corpus_report.py --base toy     # on the toy tokenizer, in seconds
    python scripts/corpus_report.py --show         # and the messages of every failure model.toml does not list

With --corpus DIR (a folder of the same layout, such as tests/data/unseen, whose model.toml label each template's
real defects by hand in [defects], keyed by the check id or ids joined by | that may each catch it), the report
scores verify against the labels instead: every error or warning (a check that fails or warns) on a check id no
label names is a false alarm, every labeled defect none of whose ids fails or warns is a miss, and verify raising is
a crash (its clear error for a template that does not parse is not: that catches a `renders` label). A corpus
without [defects] is scored against its known_failures. A template's [defects_found_by_verify] holds real defects
its hand labels missed (or filed under another check id) that were confirmed by reading the template after verify
ran; the report prints both scores: against the labels written before verify ran, and with those confirmed defects
added.

    python scripts/corpus_report.py --corpus tests/data/unseen
    python scripts/corpus_report.py --corpus tests/data/unseen --show    # each false alarm's message, each miss's label
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hf_chat_templates import TemplateChoice
from hf_chat_templates.errors import TemplateError

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
    result = verify(folder, TemplateChoice(kwargs=kwargs), only=["control-tokens-atomic"]).check(
        "control-tokens-atomic"
    )
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
    parser.add_argument(
        "--corpus", type=Path, help="a labeled corpus folder (tests/data/unseen): score verify against its labels"
    )
    args = parser.parse_args()
    if args.corpus is not None:
        if not args.corpus.is_dir():
            parser.error(f"--corpus {args.corpus}: no such folder; name one holding NAME/model.toml folders")
        labeled_report(args.corpus, args.base, args.show)
    else:
        known_report(args.base, args.show)


def known_report(base_name: str, show: bool) -> None:
    """tests/data/templates: failures model.toml does not list, stops verify misses, the bare tokenizers' verdict."""
    from hf_chat_templates.verification.runner import verify_with_context
    from tests.helpers import corpus_manifest, corpus_names, corpus_templates, model_folder

    started = time.monotonic()
    totals = {"templates": 0, "failures": 0, "known": 0, "false": 0, "missed_stops": 0, "bare_missed": 0}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = base_folder(base_name, tmp)
        print(f"base tokenizer: {base_name}")
        for name in corpus_names():
            manifest = corpus_manifest(name)
            kwargs = manifest.get("kwargs") or {}
            known = manifest.get("known_failures", {})
            texts = [p.read_text(encoding="utf-8") for p in corpus_templates(name).values()]
            specials = [t for t in manifest["special_tokens"] if any(t in text for text in texts)]
            shipped = model_folder(name, base, tmp / f"{name}-shipped")
            bare = model_folder(name, base, tmp / f"{name}-bare", registered=False)
            report, ctx = verify_with_context(shipped, TemplateChoice(kwargs=kwargs))
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
            if show:
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


def labels(manifest: dict[str, Any], *, confirmed: bool = False) -> dict[str, tuple[str, ...]]:
    """The template's labeled defects, each with the check ids that may each catch it: its [defects] table, or its
    known_failures where it has none; with `confirmed`, its [defects_found_by_verify] too (keys prefixed with
    `confirmed:` so that one never hides a hand label of the same key)."""
    table = manifest["defects"] if "defects" in manifest else manifest.get("known_failures", {})
    found = {key: tuple(key.split("|")) for key in table}
    if confirmed:
        found |= {f"confirmed:{key}": tuple(key.split("|")) for key in manifest.get("defects_found_by_verify", {})}
    return found


def score(checks: Any, defects: dict[str, tuple[str, ...]]) -> tuple[list[Any], list[Any], list[str]]:
    """(findings, false alarms, misses): the checks that fail or warn, those no label names, the labels none of
    whose check ids fails or warns."""
    findings = [c for c in checks if c.status in ("fail", "warn")]
    labeled = {check_id for ids in defects.values() for check_id in ids}
    found = {c.id for c in findings}
    return (
        findings,
        [c for c in findings if c.id not in labeled],
        [k for k, ids in defects.items() if found.isdisjoint(ids)],
    )


def describe(findings: list[Any]) -> str:
    return ", ".join(f"{c.id} [{c.severity}]" for c in findings) or "none"


def labeled_report(corpus: Path, base_name: str, show: bool) -> None:
    """Score verify on every template of `corpus`, built as its model ships on the base tokenizer, against the
    template's labels (before verify ran, and with the defects confirmed after it ran); a line per template, then
    the totals and the checks the false alarms and misses are on."""
    from hf_chat_templates.verification.runner import verify_with_context
    from tests.helpers import corpus_manifest, corpus_names, model_folder

    started = time.monotonic()
    totals, confirmed = Counter[str](), Counter[str]()
    alarm_checks, missed_checks, slow = Counter[str](), Counter[str](), []
    with tempfile.TemporaryDirectory() as tmp_name:
        base = base_folder(base_name, Path(tmp_name))
        print(f"corpus: {corpus}; base tokenizer: {base_name}")
        for name in corpus_names(corpus):
            manifest = corpus_manifest(name, corpus)
            defects, with_found = labels(manifest), labels(manifest, confirmed=True)
            confirmed.update(added=len(with_found) - len(defects), templates=len(with_found) > len(defects))
            shipped = model_folder(name, base, Path(tmp_name) / name, corpus=corpus)
            began = time.monotonic()
            try:
                report, ctx = verify_with_context(shipped, TemplateChoice(kwargs=manifest.get("kwargs") or {}))
            except TemplateError as exc:  # verify's clear error for a template that does not parse: `renders`
                caught = [k for k in defects if "renders" in k.split("|")]
                missed = len(defects) - len(caught)
                totals.update(templates=1, findings=1, labeled=len(defects), misses=missed)
                confirmed.update(labeled=len(with_found), misses=len(with_found) - len(caught))
                missed_checks.update(k for k in defects if k not in caught)
                print(f"{name:<30} refused: {exc}; misses {missed}/{len(defects)}")
                continue
            except Exception as exc:  # a crash is what this report counts, whatever verify raised
                totals.update(templates=1, crashes=1, labeled=len(defects), misses=len(defects))
                confirmed.update(labeled=len(with_found), misses=len(with_found))
                missed_checks.update(list(defects))
                print(f"{name:<30} CRASH {type(exc).__name__}: {exc}; {len(defects)} labeled defect(s) missed")
                continue
            seconds = time.monotonic() - began
            if seconds > 120:
                slow.append(f"{name} ({seconds:.0f} s)")
            findings, false_alarms, misses = score(report.checks, defects)
            _, still_false, still_missed = score(report.checks, with_found)
            totals.update(templates=1, findings=len(findings), false=len(false_alarms), labeled=len(defects))
            totals.update(misses=len(misses))
            confirmed.update(false=len(still_false), labeled=len(with_found), misses=len(still_missed))
            alarm_checks.update(c.id for c in false_alarms)
            missed_checks.update(misses)
            stops = [t for t in manifest["stop_tokens"] if t not in ctx.stop_tokens]
            print(
                f"{name:<30} {len(findings)} finding(s): {describe(findings)}; "
                f"false alarms {len(false_alarms)}: {describe(false_alarms)}; "
                f"misses {len(misses)}/{len(defects)}: {', '.join(misses) or 'none'}; "
                f"stops {'ok' if not stops else 'miss ' + ' '.join(stops)}; {seconds:.0f} s; "
                f"with the defects confirmed after verify: false alarms {len(still_false)}"
            )
            if show:
                for check in false_alarms:
                    mark = "" if check in still_false else " (a real defect, confirmed after verify ran)"
                    print(f"    false alarm {check.id} [{check.severity}]{mark}: {check.message}")
                for key in misses:
                    print(f"    missed {key}: {defects[key]}")
    print(
        f"\n{totals['templates']} templates: false alarms {totals['false']} of {totals['findings']} error/warning "
        f"findings; misses {totals['misses']} of {totals['labeled']} labeled defects; crashes {totals['crashes']}\n"
        f"{confirmed_line(totals, confirmed)}\n"
        f"false alarms by check: {dict(alarm_checks.most_common()) or 'none'}\n"
        f"misses by label: {dict(missed_checks.most_common()) or 'none'}\n"
        f"templates over 2 minutes: {', '.join(slow) or 'none'}\n"
        f"({time.monotonic() - started:.0f} s)"
    )


def confirmed_line(totals: Counter[str], confirmed: Counter[str]) -> str:
    """The score with [defects_found_by_verify] added to the labels: real defects the hand labels missed (or filed
    under another check id), confirmed by reading the templates after verify ran."""
    return (
        f"with the {confirmed['added']} defect(s) in {confirmed['templates']} template(s) confirmed after verify ran "
        f"([defects_found_by_verify]) added to the labels: false alarms {confirmed['false']} of "
        f"{totals['findings']} error/warning findings; misses {confirmed['misses']} of {confirmed['labeled']} "
        f"labeled defects"
    )


if __name__ == "__main__":
    main()
