"""Benchmark `prepare` with its segment cache against the floor: a bare `encode_batch` of the rendered strings.

Two generated data sets, each timed in this one run: plain chats (`bench_verify.conversation`) and tool-heavy agent
data (a long system prompt and eight tool schemas on every record, tool calls and results). For each it prints, as
a ratio to the bare encode_batch of the rendered strings (1.00x):
- a loop of `apply_chat_template(..., return_assistant_tokens_mask=True)` with the installed training template,
- torchtune's Llama 3 tokenizer (`tokenize_messages`, its masks) on the same messages, when torchtune is installed
  (skipped with a note otherwise; plain chats only: its Llama 3 format writes tools its own way),
- the segment encoder alone on the rendered strings (cache emptied first), and whole-string encoding through the
  same Python path, to show what the cache saves,
- `prepare` to an Arrow dataset, with the shape and segment cache lines of its report; and its one-time load (a
  one-record prepare: tokenizer, template, token inference), so the per-record ratio shows beside the whole one;
- `prepare --exact` (no fast path) and `prepare` without each fast path in turn (rendering by shape, the segment
  cache, tiktoken), so what each piece buys shows beside what it costs in checks.
With --memory N it also streams N plain chats and N / 10 agent records through `prepare`, each in a child process,
and prints that process's peak resident memory.

    python scripts/bench_segments.py --conversations 5000 --memory 100000
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hf_chat_templates import TemplateChoice

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_verify import PRINT_PEAK_KIB, WORDS, best, common_arguments, conversation, sentence

KWARGS = {"date_string": "26 Jul 2024"}
SYSTEM_SENTENCES = 50  # about 3,000 tokens with the tool block


def tool_schemas() -> list[dict[str, Any]]:
    """Eight tool schemas, the same on every record."""
    rng = random.Random(7)
    tools = []
    for k in range(8):
        properties = {
            f"arg_{k}_{j}": {"type": rng.choice(["string", "integer", "boolean"]), "description": sentence(rng, 12)}
            for j in range(4)
        }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{k}",
                    "description": sentence(rng, 30),
                    "parameters": {"type": "object", "properties": properties, "required": list(properties)[:2]},
                },
            }
        )
    return tools


SYSTEM = " ".join(sentence(random.Random(11), 18) for _ in range(SYSTEM_SENTENCES))
TOOLS = tool_schemas()


def agent_conversation(rng: random.Random) -> dict[str, Any]:
    """A long system prompt and the tools, then one to three exchanges, each with a tool call and its result."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": sentence(rng, rng.randint(5, 40))})
        tool = rng.choice(TOOLS)["function"]
        arguments = {name: rng.choice(WORDS) for name in tool["parameters"]["required"]}
        call = {"type": "function", "function": {"name": tool["name"], "arguments": arguments}}
        messages.append({"role": "assistant", "tool_calls": [call]})
        messages.append({"role": "tool", "content": sentence(rng, rng.randint(5, 60))})
        messages.append({"role": "assistant", "content": sentence(rng, rng.randint(5, 80))})
    return {"messages": messages, "tools": TOOLS}


PLAIN = ("plain chats", conversation)
AGENT = ("tool-heavy agent data", agent_conversation)


def write_jsonl(path: Path, count: int, seed: int, make: Any) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    records = [make(rng) for _ in range(count)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return records


def torchtune_time(records: list[dict[str, Any]]) -> float | str:
    """torchtune's Llama 3 tokenizer over the messages (tokens and masks), or why it cannot run."""
    if importlib.util.find_spec("torchtune") is None or importlib.util.find_spec("llama_models") is None:
        return "not installed, skipped (pip install torchtune to add its Llama 3 tokenizer)"
    try:
        import llama_models
        from torchtune.data import Message
        from torchtune.models.llama3 import llama3_tokenizer
    except Exception as err:  # torchtune 0.6.1 imports torchao, whose releases follow torch's (0.17.0 for 2.13)
        return f"does not import here ({type(err).__name__}: {str(err).splitlines()[0][:100]}), skipped"

    tokenizer = llama3_tokenizer(str(Path(llama_models.__file__).parent / "llama3" / "tokenizer.model"))
    conversations = [
        [Message(role=m["role"], content=m["content"], masked=m["role"] != "assistant") for m in r["messages"]]
        for r in records
    ]
    start = time.perf_counter()
    for messages in conversations:
        tokenizer.tokenize_messages(messages)
    return time.perf_counter() - start


def peak_memory(folder: Path, count: int, workdir: Path, seed: int, make: Any) -> tuple[float, float, str]:
    """(seconds, peak RSS in MiB, the segment cache line) of a child process preparing `count` records."""
    data = workdir / "memory.jsonl"
    with data.open("w", encoding="utf-8") as handle:
        rng = random.Random(seed)
        for _ in range(count):
            handle.write(json.dumps(make(rng), ensure_ascii=False) + "\n")
    code = (
        "import sys, time; from hf_chat_templates import TemplateChoice, prepare; t = time.perf_counter(); "
        f"r = prepare({str(folder)!r}, {str(data)!r}, {str(workdir / 'memory-out')!r}, "
        f"TemplateChoice(kwargs={KWARGS!r}), force=True); "
        "line = [x for x in r.describe().splitlines() if 'segment cache' in x][0].strip(); "
        "print(time.perf_counter() - t, r.written, line, sep='|'); " + PRINT_PEAK_KIB
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    *_, last, rss = out.strip().splitlines()
    seconds, written, line = last.split("|")
    assert int(written) == count, out
    data.unlink()
    return float(seconds), int(rss) / 1024, line


def without_piece(piece: str, folder: Path, data: Path) -> float:
    """One `prepare` with one fast path turned off as its own reason for being off would: what that piece buys."""
    from unittest import mock

    from hf_chat_templates import prepare
    from hf_chat_templates.training import bpe_engine, segments, shapes

    target = {"shapes": (shapes, "static_reason"), "segments": (segments, "static_reason")}.get(piece)
    if target is None:  # tiktoken has its switch
        with mock.patch.dict(os.environ, {bpe_engine.SWITCH: "0"}):
            return best(
                lambda: prepare(folder, data, data.with_suffix(".out"), TemplateChoice(kwargs=KWARGS), force=True), 1
            )
    with mock.patch.object(*target, lambda *args: "off for the benchmark"):
        return best(
            lambda: prepare(folder, data, data.with_suffix(".out"), TemplateChoice(kwargs=KWARGS), force=True), 1
        )


def measure(name: str, folder: Path, records: list[dict[str, Any]], data: Path, args: Any) -> None:
    from transformers import AutoTokenizer

    from hf_chat_templates import prepare
    from hf_chat_templates.training.segments import SegmentEncoder

    tok = AutoTokenizer.from_pretrained(str(folder))
    rendered = [tok.apply_chat_template(r["messages"], tools=r.get("tools"), tokenize=False, **KWARGS) for r in records]
    backend = tok.backend_tokenizer
    bare = best(lambda: backend.encode_batch(rendered, add_special_tokens=False), args.repeat)

    def by_segments() -> None:
        encoder = SegmentEncoder(backend, sample=0)  # a new cache, as a new run starts with
        for k in range(0, len(rendered), 2048):
            encoder.encode_batch(rendered[k : k + 2048])

    segments = best(by_segments, args.repeat)
    start = time.perf_counter()
    for r in records:
        tok.apply_chat_template(
            r["messages"],
            tools=r.get("tools"),
            chat_template="training",
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            **KWARGS,
        )
    loop = time.perf_counter() - start
    torchtune = torchtune_time(records) if name == "plain chats" else "plain chats only"
    reports = []
    ours = best(
        lambda: reports.append(
            prepare(folder, data, data.with_suffix(".out"), TemplateChoice(kwargs=KWARGS), force=True)
        ),
        args.repeat,
    )
    report = reports[-1]
    exact = best(
        lambda: prepare(folder, data, data.with_suffix(".out"), TemplateChoice(kwargs=KWARGS), force=True, exact=True),
        1,
    )
    without = {piece: without_piece(piece, folder, data) for piece in ("shapes", "segments", "tiktoken")}
    # What a run pays once whatever its size (tokenizer, template, token inference): a one-record prepare
    one = data.with_name(data.stem + "-one.jsonl")
    one.write_text(json.dumps(records[0], ensure_ascii=False) + "\n", encoding="utf-8")
    fixed = best(
        lambda: prepare(folder, one, one.with_suffix(".out"), TemplateChoice(kwargs=KWARGS), force=True), args.repeat
    )
    lines = report.describe().splitlines()
    segment_line = next(x for x in lines if "segment cache" in x).strip()
    shape_line = next(x for x in lines if "rendering by shape" in x).strip()
    encoder_line = next(x for x in lines if x.strip().startswith("encoder:")).strip()
    print(
        f"\n{name}: {len(records)} conversations, {sum(map(len, rendered)):,} characters, {report.tokens:,} tokens "
        f"({report.trained_tokens / max(report.tokens, 1):.1%} trained); best of {args.repeat}, loops run once"
    )
    print(f"  bare encode_batch of the rendered strings            : {bare:8.2f} s   1.00x")
    print(f"  segment encoder alone (empty cache at the start)     : {segments:8.2f} s  {segments / bare:5.2f}x")
    print(f"  apply_chat_template(return_assistant_tokens_mask) loop: {loop:8.2f} s  {loop / bare:5.2f}x")
    if isinstance(torchtune, float):
        print(f"  torchtune llama3_tokenizer.tokenize_messages loop    : {torchtune:8.2f} s  {torchtune / bare:5.2f}x")
    elif name == "plain chats":
        print(f"  torchtune: {torchtune}")
    print(f"  prepare (render, spans, encode, Arrow)               : {ours:8.2f} s  {ours / bare:5.2f}x")
    print(f"    of which its one-time load (a one-record prepare)  : {fixed:8.2f} s")
    steady = ours - fixed
    print(f"    prepare per record, the load left out              : {steady:8.2f} s  {steady / bare:5.2f}x")
    print(f"  prepare --exact (no fast path: the plain path)       : {exact:8.2f} s  {exact / bare:5.2f}x")
    for piece, seconds in without.items():
        print(f"  prepare without {piece:<9} (the others on)          : {seconds:8.2f} s  {seconds / bare:5.2f}x")
    print(f"  {shape_line}")
    print(f"  {segment_line}")
    print(f"  {encoder_line}")
    sys.stdout.flush()


def main() -> None:
    parser = common_arguments(__doc__, "prepare")
    parser.add_argument("--memory", type=int, default=0, help="also stream N plain chats (N / 10 agent records)")
    args = parser.parse_args()

    from hf_chat_templates import base_tokenizer, get_family, install

    family = get_family(args.family)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        folder = tmp / "tok"
        install(family, base_tokenizer(family.base_tokenizer), folder, training=True)
        for name, make in (PLAIN, AGENT):
            data = tmp / f"{make.__name__}.jsonl"
            records = write_jsonl(data, args.conversations, args.seed, make)
            measure(name, folder, records, data, args)
        for count, (name, make) in ((args.memory, PLAIN), (args.memory // 10, AGENT)):
            if count:
                seconds, rss, line = peak_memory(folder, count, tmp, args.seed, make)
                print(f"\nprepare streaming {count:,} {name}: {seconds:.1f} s, peak RSS {rss:.0f} MiB\n  {line}")


if __name__ == "__main__":
    main()
