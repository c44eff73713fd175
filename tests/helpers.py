"""The helpers test modules share (fixtures live in tests/conftest.py; no test module imports another one).

- the toy tokenizer: a byte-level BPE trained in well under a second (`build_toy_tokenizer`);
- the ChatML-like baseline: a template (`GOOD`) that passes every check on the toy tokenizer (`chatml_folder`), and
  `context`/`check` to run one check on it;
- `run`: the CLI in this process, with its exit code, stdout and stderr;
- `snapshot`: every file of a folder with its bytes, to assert a folder was not touched;
- the conversations, JSONL writer, expected labels and hand-marked training templates of the training tests;
- `parse_view`: the token spans, views and anchors of the HTML the view and the report write;
- the corpus of published chat templates (tests/data/templates, or another folder of the same layout such as
  tests/data/unseen): `corpus_names`, `corpus_manifest` and `model_folder`, a base tokenizer made into the model's
  folder as it ships, or bare.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.cli import main
from hf_chat_templates.conversations.probes import Probe
from hf_chat_templates.tokenizer.folder import dump_json, read_folder
from hf_chat_templates.tokenizer.vocab import register_control_tokens
from hf_chat_templates.training.features import IGNORE_INDEX
from hf_chat_templates.verification.context import VerifyContext
from hf_chat_templates.verification.results import CheckResult
from hf_chat_templates.verification.runner import run_checks

REPO_ROOT = Path(__file__).resolve().parent.parent
SEEDS = REPO_ROOT.parent / "shared" / "seeds"

# ---- the toy tokenizer -----------------------------------------------------------------------------------------

TOY_SPECIALS = [
    "<unk>",
    "<s>",
    "</s>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|reserved_special_token_2|>",
]
TOY_TEXT = (
    "The quick brown fox jumps over the lazy dog. Привет, мир! 你好世界 🦙 tool call arguments "
    "user assistant system role message separator function result weather in Paris is sunny\n"
) * 20


def build_toy_tokenizer(folder: Path, *, add_bos: bool = True, generation_config: bool = True) -> Path:
    """A byte-level BPE trained in well under a second, with a BOS post-processor like Llama 3's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=TOY_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TOY_TEXT], trainer=trainer)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(folder))
    if generation_config:
        (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes, to assert a folder was not touched."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- the CLI in this process -----------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`hf-chat-templates ARGS` in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


# ---- the ChatML-like baseline: it passes every check, and each test breaks one thing ---------------------------

CONTROL = ["<|im_start|>", "<|im_end|>"]
# Renders tool calls, parts and results; every control token is written from a literal.
GOOD = (
    "{%- if tools -%}{{- '<|im_start|>tools\\n' + tools | tojson + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.content is string -%}{{- m.content -}}"
    "{%- elif m.content -%}{%- for p in m.content -%}{{- p.text -}}{%- endfor -%}{%- endif -%}"
    "{%- for c in m.tool_calls or [] -%}"
    "{{- '<tool_call>' + c.function.name + ' ' + (c.function.arguments if c.function.arguments is string "
    "else c.function.arguments | tojson) + '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def chatml_folder(
    root: Path,
    *,
    add_bos: bool = False,
    register: bool = True,
    stop_in_generation: bool = True,
    normalizer: dict[str, Any] | None = None,
) -> Path:
    """The toy tokenizer at `root` with GOOD as its template and CONTROL registered as special tokens."""
    folder = build_toy_tokenizer(root, add_bos=add_bos)
    tj_path = folder / "tokenizer.json"
    tj = json.loads(tj_path.read_text(encoding="utf-8"))
    if register:
        tj, _, _ = register_control_tokens(tj, CONTROL, reuse_reserved=False)
    if normalizer is not None:
        tj["normalizer"] = normalizer
    tj_path.write_bytes(dump_json(tj))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = GOOD
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    if register:
        stop_id = next(e["id"] for e in tj["added_tokens"] if e["content"] == "<|im_end|>")
        gen = {"bos_token_id": 1, "eos_token_id": [2, stop_id] if stop_in_generation else [2]}
        (folder / "generation_config.json").write_bytes(dump_json(gen))
    return folder


def context(
    folder: Path, template: str = GOOD, probes: tuple[Probe, ...] | None = None, **options: Any
) -> VerifyContext:
    """A VerifyContext on the folder's tokenizer; `options` are VerifyContext's (training, sanitize, ...)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return VerifyContext(tokenizer, template, folder=read_folder(folder), probes=probes, **options)


def check(ctx: VerifyContext, check_id: str) -> CheckResult:
    (result,) = run_checks(ctx, [check_id])
    return result


# ---- training: conversations, labels and hand-marked training templates ----------------------------------------

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, friend"}]},
    {
        "messages": [
            {"role": "system", "content": "Be brief"},
            {"role": "user", "content": "One?"},
            {"role": "assistant", "content": "Yes"},
            {"role": "user", "content": "Two?"},
            {"role": "assistant", "content": "Also yes"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
                ],
            },
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    },
]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def expected_labels(folder: Path, template: str, record: dict) -> list[int]:
    """What transformers' own assistant mask gives with the derived training template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    out = tok.apply_chat_template(
        record["messages"],
        tools=record.get("tools"),
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    return [i if m else IGNORE_INDEX for i, m in zip(out["input_ids"], out["assistant_masks"])]


def with_training(folder: Path, template: str) -> Path:
    """`folder` with `template` as its additional_chat_templates/training.jinja."""
    (folder / "additional_chat_templates").mkdir(exist_ok=True)
    (folder / "additional_chat_templates" / "training.jinja").write_text(template, encoding="utf-8")
    return folder


# The assistant branch of GOOD, rewritten with hand-placed markers.
_CONTENT = "{%- if m.content is string -%}{{- m.content -}}{%- endif -%}"


def marked(header_inside: bool, stop_inside: bool) -> str:
    """A ChatML training template with {% generation %} markers around the answer, the role header and the stop
    token inside or outside them."""
    header = "{{- '<|im_start|>' + m.role + '\\n' -}}"
    stop = "{{- '<|im_end|>' -}}"
    body = (
        "{%- generation -%}"
        + (header if header_inside else "")
        + _CONTENT
        + (stop if stop_inside else "")
        + "{%- endgeneration -%}"
    )
    body = (header if not header_inside else "") + body + (stop if not stop_inside else "")
    return (
        "{%- for m in messages -%}{%- if m.role == 'assistant' -%}" + body + "{{- '\\n' -}}{%- else -%}"
        "{{- '<|im_start|>' + m.role + '\\n' -}}" + _CONTENT + "{{- '<|im_end|>\\n' -}}{%- endif -%}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )


# ---- the HTML of the token view and the report ----------------------------------------------------------------


class ViewTokens(HTMLParser):
    """Collects every token span: its attributes and its text, per view."""

    def __init__(self) -> None:
        super().__init__()
        self.views: list[list[dict]] = []
        self.ids: dict[str, dict] = {}
        self._depth = 0
        self._current: dict | None = None
        self._external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag in ("script", "link", "img") or (tag == "style" and a.get("src")):
            self._external.append(tag)
        if "id" in a:
            self.ids[a["id"]] = a
        classes = (a.get("class") or "").split()
        if tag == "div" and "view" in classes:
            self.views.append([])
        if tag == "span" and "t" in classes and "data-i" in a:
            self._current = {**a, "classes": classes, "text": ""}
            self.views[-1].append(self._current)
            self._depth = 1
        elif tag == "span" and self._current is not None:
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._current is not None:
            self._depth -= 1
            if self._depth == 0:
                self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current["text"] += data


def parse_view(page: str) -> ViewTokens:
    parser = ViewTokens()
    parser.feed(page)
    return parser


# ---- the corpus of published chat templates ---------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parent / "data" / "templates"


def corpus_names(corpus: Path = CORPUS) -> list[str]:
    """Every template of the corpus: a folder of `corpus` (tests/data/templates unless named) with a model.toml."""
    return sorted(p.name for p in corpus.iterdir() if (p / "model.toml").is_file())


def corpus_manifest(name: str, corpus: Path = CORPUS) -> dict[str, Any]:
    """The model.toml of corpus template `name`: what the model ships with its template."""
    with (corpus / name / "model.toml").open("rb") as f:
        return tomllib.load(f)


def corpus_templates(name: str, corpus: Path = CORPUS) -> dict[str, Path]:
    """The template files of `name` by template name: `default` (chat_template.jinja), then the named ones."""
    folder = corpus / name
    named = corpus_manifest(name, corpus).get("named_templates", [])
    return {"default": folder / "chat_template.jinja", **{n: folder / f"{n}.jinja" for n in named}}


def _registered_tokenizer(folder: Path, manifest: dict[str, Any]) -> None:
    """Rewrite the tokenizer in `folder` the way the model ships it: its special tokens (special=True) and added
    tokens (special=False) registered, bos/eos/pad as shipped, BOS added by `tokenizer(text)` only when the model
    adds it, and generation_config.json's eos_token_id as the ids of `generation_eos`."""
    from tokenizers import AddedToken, Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    bos, eos, pad = (manifest.get(k) or None for k in ("bos_token", "eos_token", "pad_token"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    specials = dict.fromkeys(
        [*manifest.get("special_tokens", []), *(t for t in (bos, eos, pad) if t), *manifest.get("generation_eos", [])]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    plain = [t for t in manifest.get("added_tokens", []) if t not in specials]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    if manifest.get("add_bos") and bos:
        single, pair = f"{bos}:0 $A:0", f"{bos}:0 $A:0 {bos}:1 $B:1"
        tok.post_processor = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(bos, tok.token_to_id(bos))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad)
    (folder / "tokenizer_config.json").unlink()
    fast.save_pretrained(str(folder))
    stops = [tok.token_to_id(t) for t in manifest.get("generation_eos", [])] or [tok.token_to_id(eos)]
    gen: dict[str, Any] = {"bos_token_id": tok.token_to_id(bos)} if bos else {}
    gen["eos_token_id"] = stops[0] if len(stops) == 1 else stops
    (folder / "generation_config.json").write_bytes(dump_json(gen))


def model_folder(name: str, base: Path, out: Path, *, registered: bool = True, corpus: Path = CORPUS) -> Path:
    """Corpus template `name` on a copy of the base tokenizer folder `base`, written to `out`.

    `registered`: the model's folder as it ships (its tokens registered, bos/eos/pad and generation_config.json as
    model.toml says). Otherwise the bare base tokenizer with only the template files added. The templates are
    written as chat_template.jinja and additional_chat_templates/NAME.jinja, byte for byte."""
    shutil.copytree(base, out)
    if registered:
        _registered_tokenizer(out, corpus_manifest(name, corpus))
    for template, path in corpus_templates(name, corpus).items():
        target = out / "chat_template.jinja" if template == "default" else out / "additional_chat_templates" / path.name
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(path.read_bytes())
    return out


def tiny_llama(tokenizer: Any) -> Any:
    """A one-layer Llama with the tokenizer's vocabulary: enough for a trainer to take a step on CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config)


def spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[tuple[Any, ...]]:
    """The arguments of each call of `owner.name` from now on, recorded; the function still runs."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(owner, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return calls


def verify_recording_workers(monkeypatch: Any, folder: Path, **options: Any) -> tuple[Any, list[tuple[str, bool]]]:
    """`runner.verify(folder, **options)`, recording each worker begun as (its last argument, whether the tokenizer
    had loaded by then): the proof that verify begins its workers before the tokenizer loads."""
    from hf_chat_templates.template.engines import json_worker
    from hf_chat_templates.verification import runner

    begun: list[tuple[str, bool]] = []
    loaded = False
    popen, load = json_worker._popen, runner.load_tokenizer

    def record(command: list[str]) -> Any:
        begun.append((command[-1], loaded))
        return popen(command)

    def load_tokenizer(*args: object) -> object:
        nonlocal loaded
        loaded = True
        return load(*args)

    monkeypatch.setattr(json_worker, "_popen", record)
    monkeypatch.setattr(runner, "load_tokenizer", load_tokenizer)
    return runner.verify(folder, **options), begun


# ---- template-safety rule cases: each rule fires on its broken input and not on the legitimate shape beside it ----


def rule_findings(template: str, rule: str) -> list[tuple[str, int, int, str, str]]:
    """(severity, line, column, message, fix) of each error or warning `rule` finds in `template`."""
    from hf_chat_templates.template.safety import scan_template

    return [
        (f.severity, f.line, f.column, f.message, f.fix)
        for f in scan_template(template)
        if f.rule == rule and f.severity != "info"
    ]


def assert_rule_case(rule: str, severity: str, broken: str, legitimate: str, *, any_rule: bool = False) -> None:
    """The rule's first finding on `broken` has `severity`, a position and a fix; `legitimate` draws no error or
    warning of the rule (of any rule, with `any_rule`)."""
    from hf_chat_templates.template.safety import scan_template

    found = rule_findings(broken, rule)
    assert found and found[0][0] == severity and found[0][1] >= 1 and found[0][4], found
    kept = [f for f in scan_template(legitimate) if f.severity in ("error", "warning") and (any_rule or f.rule == rule)]
    assert kept == [], kept
