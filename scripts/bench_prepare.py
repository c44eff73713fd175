"""Benchmark `prepare` against the floor: a bare `encode_batch` of the rendered strings.

Prints, from one run over the same generated conversations:
- a bare `encode_batch` of the rendered strings (1.00x),
- a loop of `apply_chat_template(..., return_assistant_tokens_mask=True)` with the installed training template,
- `prepare` to an Arrow dataset, spans from the folder's training template ({% generation %} markers),
- `prepare` with spans from rendering differences (a folder without a training template),
each as a ratio to the bare encode_batch. With --memory N it also streams N conversations through `prepare` in a
child process and prints that process's peak resident memory.

    python scripts/bench_prepare.py --family llama3.2-pythonic --conversations 20000 --memory 200000
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hf_chat_templates import TemplateChoice

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_verify import PRINT_PEAK_KIB, best, common_arguments, conversation

KWARGS = {"date_string": "26 Jul 2024"}


def write_jsonl(path: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(count):
            handle.write(json.dumps(conversation(rng), ensure_ascii=False) + "\n")


def peak_memory(folder: Path, count: int, workdir: Path, seed: int) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of a child process that prepares `count` conversations."""
    data = workdir / "memory.jsonl"
    write_jsonl(data, count, seed + 1)
    code = (
        "import sys, time; from hf_chat_templates import TemplateChoice, prepare; t = time.perf_counter(); "
        f"r = prepare({str(folder)!r}, {str(data)!r}, {str(workdir / 'memory-out')!r}, "
        f"TemplateChoice(kwargs={KWARGS!r})); "
        "print(time.perf_counter() - t, r.written); " + PRINT_PEAK_KIB
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert int(out[1]) == count, out
    return float(out[0]), int(out[2]) / 1024


def main() -> None:
    parser = common_arguments(__doc__, "prepare")
    parser.add_argument("--memory", type=int, default=0, help="also stream N conversations and report peak RSS")
    args = parser.parse_args()

    from transformers import AutoTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    from hf_chat_templates import base_tokenizer, get_family, install, prepare

    family = get_family(args.family)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        plain_folder, marked_folder = tmp / "plain", tmp / "marked"
        install(family, base_tokenizer(family.base_tokenizer), plain_folder)
        install(family, plain_folder, marked_folder, training=True)
        data = tmp / "data.jsonl"
        write_jsonl(data, args.conversations, args.seed)
        records = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
        tok = AutoTokenizer.from_pretrained(str(marked_folder))
        kwargs = {**tok.special_tokens_map, **family.variant().kwarg_defaults, **KWARGS}
        rendered, _ = render_jinja_template(
            [r["messages"] for r in records], chat_template=tok.chat_template["default"], **kwargs
        )

        bare = best(lambda: tok._tokenizer.encode_batch(rendered, add_special_tokens=False), args.repeat)

        start = time.perf_counter()
        for r in records:
            tok.apply_chat_template(
                r["messages"],
                chat_template="training",
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                **KWARGS,
            )
        loop = time.perf_counter() - start

        reports = []
        out = tmp / "out"

        def run(folder: Path) -> None:
            reports.append(prepare(folder, data, out, TemplateChoice(kwargs=KWARGS), workers=args.workers, force=True))

        marked = best(lambda: run(marked_folder), args.repeat)
        differences = best(lambda: run(plain_folder), args.repeat)
        report = reports[0]
        memory = peak_memory(marked_folder, args.memory, tmp, args.seed) if args.memory else None

    print(
        f"{args.conversations} conversations, family {family.name}, {sum(map(len, rendered)):,} characters, "
        f"{report.tokens:,} tokens ({report.trained_tokens / report.tokens:.1%} trained)"
    )
    print(f"(best of {args.repeat} for the bare encode and for prepare; the loop runs once)")
    print(f"bare encode_batch of rendered strings                 : {bare:8.2f} s   1.00x")
    print(f"apply_chat_template(return_assistant_tokens_mask) loop: {loop:8.2f} s  {loop / bare:5.2f}x")
    print(
        f"prepare, spans from the training template             : {marked:8.2f} s  {marked / bare:5.2f}x  "
        f"({loop / marked:.2f}x faster than the loop)"
    )
    print(f"prepare, spans from rendering differences             : {differences:8.2f} s  {differences / bare:5.2f}x")
    if memory:
        print(f"prepare streaming {args.memory} conversations: {memory[0]:.1f} s, peak RSS {memory[1]:.0f} MiB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
