"""Benchmark `verify --conversations` against the floor: a bare `encode_batch` of the rendered strings.

Prints, from one run: the time of a bare encode_batch of the pre-rendered strings, of a loop of
`apply_chat_template(tokenize=True)`, and of the per-record checks over the same conversations as JSONL, each as a
ratio to the bare encode_batch.

    python scripts/bench_verify.py --family llama3.2-pythonic --conversations 20000

With --one-template it times instead `hf-chat-templates verify FOLDER` of one template on the family's installed
folder, as a user runs it (a fresh process each time, best of --repeat), and prints where the time of one such
process goes: imports, reading the folder, loading the tokenizer, each check, the rest. --template FILE verifies
that template file on the folder instead of the folder's own.

    python scripts/bench_verify.py --one-template --family llama3.2-pythonic
    python scripts/bench_verify.py --one-template --template model_configs/llama3.2-pythonic/corrected.jinja
"""

from __future__ import annotations

import argparse
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


# Python run in a child to print its own peak resident memory in KiB: Linux's VmHWM (ru_maxrss survives exec, so a
# child would report the peak of the process that started it when that was higher), ru_maxrss elsewhere
PRINT_PEAK_KIB = (
    "import resource; "
    "hwm = [int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:')] "
    "if sys.platform == 'linux' else []; "
    "print(hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The fastest of `repeat` runs: the machine is shared, and the fastest run is the least disturbed."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def one_template(family_name: str, template: Path | None, repeat: int) -> None:
    """The wall time of `hf-chat-templates verify` of one template, best of `repeat` fresh processes, and the
    breakdown of one more."""
    from hf_chat_templates import base_tokenizer, get_family, install

    family = get_family(family_name)
    extra = ["--template", str(template)] if template is not None else []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tok"
        install(family, base_tokenizer(family.base_tokenizer), folder)
        command = [sys.executable, "-m", "hf_chat_templates", "verify", str(folder), *extra]
        walls = []
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            walls.append(time.perf_counter() - start)
        child = [sys.executable, __file__, "--breakdown-of", str(folder), *extra]
        stages = subprocess.run(child, capture_output=True, text=True, check=True).stdout
    what = f"template {template}" if template is not None else f"{family.name}'s installed template"
    print(f"hf-chat-templates verify of {what} on {family.base_tokenizer}")
    print(f"wall time, best of {repeat}: {min(walls):.2f} s  (runs: {', '.join(f'{w:.2f}' for w in walls)})")
    print("where one run's time goes (wall):")
    print(stages, end="")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print(
            "note: PYTHONDONTWRITEBYTECODE is set, so each run compiled this package's sources again (about 0.1 s "
            "of its import); an installed package has its bytecode: unset it for the time users see"
        )


def breakdown(folder: str, template: str | None) -> None:
    """One `verify` run in this process, set up as the command line sets up its own, timed stage by stage."""
    import contextlib
    import io

    started = time.perf_counter()
    from hf_chat_templates.cli.main import main, process_settings

    process_settings(["verify"])  # as the command line sets up its process, before transformers is imported
    stages: list[tuple[str, float]] = [("import hf_chat_templates and its CLI", time.perf_counter() - started)]

    def timed(label: str, fn):  # type: ignore[no-untyped-def]
        def run(*args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                stages.append((label, time.perf_counter() - start))

        return run

    from hf_chat_templates.verification import runner

    mark = time.perf_counter()
    import transformers  # noqa: F401  (its import timed on its own)

    stages.append(("import transformers", time.perf_counter() - mark))
    runner.read_folder = timed("read the folder (read_folder)", runner.read_folder)
    runner.load_tokenizer = timed("load the tokenizer (and its class)", runner.load_tokenizer)
    runner.CHECKS = [(check_id, timed(f"check {check_id}", fn)) for check_id, fn in runner.CHECKS]
    argv = ["verify", folder, *(["--template", template] if template else [])]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
    total = time.perf_counter() - started
    for label, seconds in stages:
        print(f"  {label:45s} {seconds:6.2f} s")
    print(f"  {'the rest (context, report, ...)':45s} {total - sum(s for _, s in stages):6.2f} s")
    print(f"  {'total, after the interpreter started':45s} {total:6.2f} s")


def main() -> None:
    if sys.argv[1:2] == ["--breakdown-of"]:
        breakdown(sys.argv[2], sys.argv[4] if sys.argv[3:4] == ["--template"] else None)
        return
    parser = common_arguments(__doc__, "verify")
    parser.add_argument("--one-template", action="store_true", help="time `verify` of one template instead")
    parser.add_argument("--template", type=Path, default=None, help="with --one-template: this template file")
    args = parser.parse_args()
    if args.one_template:
        one_template(args.family, args.template, args.repeat)
        return

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
                verify_conversations(
                    folder, data, TemplateChoice(kwargs={"date_string": "26 Jul 2024"}), workers=args.workers
                )
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
