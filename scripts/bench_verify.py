"""Benchmark `verify --conversations` against the floor: a bare `encode_batch` of the rendered strings.

Prints, from one run: the time of a bare encode_batch of the pre-rendered strings, of a loop of
`apply_chat_template(tokenize=True)`, and of the per-record checks over the same conversations as JSONL, each as a
ratio to the bare encode_batch.

    python scripts/bench_verify.py --family llama3.2-pythonic --conversations 20000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "tokenizer",
    "template",
    "model",
    "answer",
    "question",
    "погода",
    "в",
    "Москве",
    "сегодня",
    "天气",
    "很好",
    "🦙",
    "data",
    "loss",
    "training",
]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def conversation(rng: random.Random) -> dict:
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": sentence(rng, rng.randint(5, 30))})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": sentence(rng, rng.randint(5, 80))})
        messages.append({"role": "assistant", "content": sentence(rng, rng.randint(5, 200))})
    return {"messages": messages}


def common_arguments(description: str, measured: str) -> argparse.ArgumentParser:
    """The options both benchmarks take (bench_prepare.py imports this)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="llama3.2-pythonic")
    parser.add_argument("--conversations", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help=f"best of N for the bare encode and for {measured}")
    return parser


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The fastest of `repeat` runs: the machine is shared, and the fastest run is the least disturbed."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    args = common_arguments(__doc__, "verify").parse_args()

    from transformers import AutoTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    from hf_chat_templates import base_tokenizer, get_family, install
    from hf_chat_templates.verification.dataset import verify_conversations

    family = get_family(args.family)
    rng = random.Random(args.seed)
    records = [conversation(rng) for _ in range(args.conversations)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tok"
        install(family, base_tokenizer(family.base_tokenizer), folder)
        tok = AutoTokenizer.from_pretrained(str(folder))
        kwargs = {**tok.special_tokens_map, **family.variant().kwarg_defaults, "date_string": "26 Jul 2024"}
        data = Path(tmp) / "data.jsonl"
        data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")

        rendered, _ = render_jinja_template([r["messages"] for r in records], chat_template=tok.chat_template, **kwargs)
        bare = best(lambda: tok._tokenizer.encode_batch(rendered, add_special_tokens=False), args.repeat)

        start = time.perf_counter()
        for r in records:
            tok.apply_chat_template(r["messages"], tokenize=True, date_string="26 Jul 2024")
        loop = time.perf_counter() - start

        reports = []
        ours = best(
            lambda: reports.append(
                verify_conversations(folder, data, kwargs={"date_string": "26 Jul 2024"}, workers=args.workers)
            ),
            args.repeat,
        )
        report = reports[-1]

    print(f"{args.conversations} conversations, family {family.name}, {sum(map(len, rendered)):,} characters")
    print(f"(best of {args.repeat} for the bare encode and for verify; the loop runs once)")
    print(f"bare encode_batch of rendered strings : {bare:8.2f} s   1.00x")
    print(f"apply_chat_template(tokenize=True) loop: {loop:8.2f} s  {loop / bare:5.2f}x")
    print(
        f"verify --conversations (all checks)   : {ours:8.2f} s  {ours / bare:5.2f}x  "
        f"({report.records} records, ok={report.ok})"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
