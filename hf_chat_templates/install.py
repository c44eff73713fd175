"""Install a bundled template on a tokenizer: plan every change as a value, then apply it.

>>> plan = plan_install("llama3.2-pythonic", "path/to/tokenizer", "out")   # doctest: +SKIP
>>> print(plan.describe())                                                  # doctest: +SKIP
>>> result = apply_install(plan)                                            # doctest: +SKIP

What an install does, and never does:
- writes the template as `chat_template.jinja` and/or the `chat_template` key of tokenizer_config.json (the two
  never disagree: the form not chosen is removed);
- registers every control token as one special id (see vocab.py), sets eos to the family's first stop token,
  picks a pad token when there is none, and merges the stop ids into generation_config.json's eos_token_id;
- copies every other file byte for byte, never touches the source, and writes the output atomically after
  reloading it with transformers to confirm the template and that each control token is one id.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import InstallCheckError, TokenizerFolderError, UsageError
from .folder import (
    CHAT_TEMPLATE_DIR,
    CHAT_TEMPLATE_FILE,
    GENERATION_CONFIG,
    SPECIAL_TOKENS_MAP,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
    StagedFile,
    TokenizerFolder,
    check_output,
    dump_json,
    folder_matches,
    read_folder,
    resolve_source,
    sha256_bytes,
    write_folder,
)
from .registry import Family, Variant, get_family
from .rendering import named_template
from .templates import check_template_syntax
from .training import TRAINING_TEMPLATE_NAME, derive_training_template, is_training_template
from .vocab import (
    TokenChange,
    Vocabulary,
    drop_post_processor_token,
    register_control_tokens,
    sync_config_tokens,
    token_content,
    with_content,
)

FORMATS = ("both", "jinja", "config")
# Tried in order when a tokenizer has no pad token (after the family's own preferences).
GENERIC_PAD_TOKENS = ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>", "<|endoftext|>")


@dataclass(frozen=True)
class FileChange:
    """One file of the output. action: add | change | remove | keep."""

    path: str
    action: str
    summary: str = ""
    before_sha256: str | None = None
    after_sha256: str | None = None


@dataclass(frozen=True)
class InstallPlan:
    """Everything an install would do, computed before anything is written."""

    family: str
    variant: str
    source: str
    source_path: Path
    output: Path
    format: str
    template_sha256: str
    files: tuple[FileChange, ...]
    tokens: tuple[TokenChange, ...]
    vocab_size_before: int
    vocab_size_after: int
    eos_token: tuple[str | None, str]
    pad_token: tuple[str | None, str | None]
    stop_token_ids: tuple[int, ...]
    generation_eos_before: tuple[int, ...]
    generation_eos_after: tuple[int, ...]
    warnings: tuple[str, ...]
    bos_dropped_from_post_processor: str | None = None
    staged: tuple[StagedFile, ...] = field(repr=False, compare=False, default=())
    expected_template: str = field(repr=False, compare=False, default="")
    training_template: str | None = field(repr=False, compare=False, default=None)

    @property
    def vocabulary_grew(self) -> int:
        return self.vocab_size_after - self.vocab_size_before

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "variant": self.variant,
            "source": self.source,
            "output": str(self.output),
            "format": self.format,
            "template_sha256": self.template_sha256,
            "files": [asdict(f) for f in self.files],
            "tokens": [asdict(t) for t in self.tokens],
            "vocab_size_before": self.vocab_size_before,
            "vocab_size_after": self.vocab_size_after,
            "resize_embeddings_to": self.vocab_size_after if self.vocabulary_grew else None,
            "eos_token": {"before": self.eos_token[0], "after": self.eos_token[1]},
            "pad_token": {"before": self.pad_token[0], "after": self.pad_token[1]},
            "stop_token_ids": list(self.stop_token_ids),
            "generation_config_eos_token_id": {
                "before": list(self.generation_eos_before),
                "after": list(self.generation_eos_after),
            },
            "bos_dropped_from_post_processor": self.bos_dropped_from_post_processor,
            "training_template": TRAINING_TEMPLATE_NAME if self.training_template is not None else None,
            "warnings": list(self.warnings),
        }

    def describe(self) -> str:
        lines = [
            f"install {self.family} (variant {self.variant}) from {self.source} into {self.output}",
            f"  template sha256 {self.template_sha256[:16]}…, written as: {self.format}",
            "  files:",
        ]
        for f in self.files:
            if f.action != "keep":
                lines.append(f"    {f.action:<7} {f.path}" + (f"  ({f.summary})" if f.summary else ""))
        kept = sum(f.action == "keep" for f in self.files)
        if kept:
            lines.append(f"    keep    {kept} other file(s) byte for byte")
        lines.append("  control tokens:")
        lines += [f"    {t.describe()}" for t in self.tokens]
        if self.vocabulary_grew:
            lines.append(
                f"  vocabulary grows {self.vocab_size_before} -> {self.vocab_size_after}: resize the model's "
                f"embeddings to {self.vocab_size_after} rows (model.resize_token_embeddings({self.vocab_size_after}))"
            )
        else:
            lines.append(f"  vocabulary size unchanged ({self.vocab_size_after})")
        if self.bos_dropped_from_post_processor:
            lines.append(f"  post-processor: no longer adds {self.bos_dropped_from_post_processor} (the template "
                         "writes it; tokenizer(rendered) and apply_chat_template then give one BOS)")
        if self.training_template is not None:
            lines.append(f"  training template '{TRAINING_TEMPLATE_NAME}': the same text with {{% generation %}} "
                         "around each assistant turn (apply_chat_template(..., chat_template='training', "
                         "return_assistant_tokens_mask=True))")
        lines.append(f"  eos_token: {self.eos_token[0]} -> {self.eos_token[1]}")
        lines.append(f"  pad_token: {self.pad_token[0]} -> {self.pad_token[1]}")
        lines.append(
            f"  generation_config eos_token_id: {list(self.generation_eos_before)} -> "
            f"{list(self.generation_eos_after)}"
        )
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass(frozen=True)
class InstallResult:
    plan: InstallPlan
    output: Path
    replaced_to: Path | None
    already_installed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.plan.to_dict(),
            "replaced_to": str(self.replaced_to) if self.replaced_to else None,
            "already_installed": self.already_installed,
        }


def _convert_slow(folder: TokenizerFolder) -> dict[str, Any]:
    """A folder with only a slow vocabulary (tokenizer.model …): let transformers build tokenizer.json."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder.path))
        return json.loads(tok.backend_tokenizer.to_str())
    except Exception as err:
        raise TokenizerFolderError(
            f"{folder.path}: has no {TOKENIZER_JSON}, and transformers could not build one "
            f"({type(err).__name__}: {err})",
            hint="install sentencepiece and protobuf, or provide tokenizer.json",
        ) from None


def _choose_pad(
    family: Family, config: dict[str, Any], vocab: Vocabulary, eos: str, stops: tuple[str, ...]
) -> tuple[str | None, list[str]]:
    current = token_content(config.get("pad_token"))
    warnings = []
    if current is not None and vocab.id_of(current) is not None:
        if current == eos or current in stops:
            warnings.append(
                f"pad_token {current} is also a stop token: with labels masked on pad, the model is never "
                "trained to stop; set a distinct pad token"
            )
        return current, warnings
    unk = token_content(config.get("unk_token")) or vocab.data["model"].get("unk_token")
    for candidate in (*family.pad_tokens, *GENERIC_PAD_TOKENS, unk):
        if candidate and candidate != eos and candidate not in stops and vocab.is_special(candidate):
            return candidate, warnings
    warnings.append(
        f"no pad token distinct from eos was found; pad_token is set to eos {eos}: mask padding by attention "
        "mask, not by token id"
    )
    return eos, warnings


def _as_id_list(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def plan_install(
    family: str | Family,
    tokenizer: str | Path,
    output: str | Path,
    *,
    variant: str | None = None,
    format: str = "both",
    reuse_reserved: bool = False,
    keep_tokenizer_bos: bool = False,
    training: bool = False,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> InstallPlan:
    """Compute what installing `family` on `tokenizer` into `output` would write. Writes nothing."""
    if format not in FORMATS:
        raise UsageError(f"unknown --format {format!r}; choose one of {', '.join(FORMATS)}", hint="--format both")
    fam = family if isinstance(family, Family) else get_family(family)
    var: Variant = fam.variant(variant)
    template = var.template
    check_template_syntax(template, var.template_path)
    output_path = Path(output).absolute()
    source_path = resolve_source(str(tokenizer), revision=revision, token=token)
    if output_path == source_path.absolute() and not force:
        raise UsageError(
            f"{output_path}: --output is the source folder; the source is never changed in place",
            hint="choose another --output, or pass --force to replace the source (it is kept beside it)",
        )
    check_output(output_path, force=force)
    folder = read_folder(source_path)
    tj_path = source_path / TOKENIZER_JSON
    tokenizer_json = folder.tokenizer_json if folder.tokenizer_json is not None else _convert_slow(folder)
    before_vocab = Vocabulary(tokenizer_json, str(tj_path))
    config = copy.deepcopy(folder.tokenizer_config)

    eos = var.stop_tokens[0]
    keep = {token_content(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    new_tj, changes, warnings = register_control_tokens(
        tokenizer_json, var.control_tokens, reuse_reserved=reuse_reserved, keep=keep - {None}, origin=str(tj_path)
    )
    bos_dropped = None
    bos = token_content(config.get("bos_token"))
    if fam.template_writes_bos and not keep_tokenizer_bos and bos:
        # The template writes {{ bos_token }}; a post-processor adding it too gives a double BOS to everyone who
        # tokenizes the rendered text with the defaults.
        new_tj, dropped = drop_post_processor_token(new_tj, bos)
        if dropped or config.get("add_bos_token") is True:
            bos_dropped = bos
        if config.get("add_bos_token") is True:
            config["add_bos_token"] = False
    vocab = Vocabulary(new_tj, str(tj_path))
    pad, pad_warnings = _choose_pad(fam, config, vocab, eos, var.stop_tokens)
    warnings += pad_warnings
    stop_ids = tuple(vocab.id_of(t) for t in var.stop_tokens)
    assert all(i is not None for i in stop_ids)

    # tokenizer_config.json
    old_eos = token_content(config.get("eos_token"))
    old_pad = token_content(config.get("pad_token"))
    config = sync_config_tokens(config, new_tj, changes)
    config["eos_token"] = with_content(config.get("eos_token"), eos)
    if pad is not None:
        config["pad_token"] = with_content(config.get("pad_token"), pad)
    training_text = _training_template(folder, var, training, warnings)
    if format in ("both", "config"):
        existing = config.get("chat_template")
        named = {"default": template}
        if training_text is not None:
            named[TRAINING_TEMPLATE_NAME] = training_text
        if isinstance(existing, list) or len(named) > 1:  # named templates: ours replaced, the others kept
            others = [t for t in (existing if isinstance(existing, list) else []) if isinstance(t, dict)
                      and t.get("name") not in named]
            config["chat_template"] = [{"name": k, "template": v} for k, v in named.items()] + others
        else:
            config["chat_template"] = template
    else:
        config.pop("chat_template", None)

    # special_tokens_map.json (legacy, but still read): keep it saying the same as the config
    stm = copy.deepcopy(folder.special_tokens_map) if folder.special_tokens_map is not None else None
    if stm is not None:
        stm = sync_config_tokens(stm, new_tj, changes)
        stm["eos_token"] = with_content(stm.get("eos_token"), eos)
        if pad is not None:
            stm["pad_token"] = with_content(stm.get("pad_token"), pad)

    # generation_config.json
    gen = copy.deepcopy(folder.generation_config) if folder.generation_config is not None else None
    gen_before = tuple(_as_id_list(gen.get("eos_token_id"))) if gen is not None else ()
    if gen is None:
        previous_eos_id = vocab.id_of(old_eos) if old_eos else None
        gen = {}
        bos = token_content(config.get("bos_token"))
        if bos and vocab.id_of(bos) is not None:
            gen["bos_token_id"] = vocab.id_of(bos)
        eos_ids = list(stop_ids) + ([previous_eos_id] if previous_eos_id is not None else [])
    else:
        eos_ids = list(gen_before)
    for sid in stop_ids:
        if sid not in eos_ids:
            eos_ids.append(sid)
    eos_ids = list(dict.fromkeys(eos_ids))
    gen["eos_token_id"] = eos_ids
    if pad is not None and "pad_token_id" not in gen:
        gen["pad_token_id"] = vocab.id_of(pad)
    gen_after = tuple(eos_ids)

    # Every file of the output, in order.
    new_contents: dict[str, tuple[Any, Any, str]] = {
        TOKENIZER_JSON: (folder.tokenizer_json, new_tj, _token_summary(changes)),
        TOKENIZER_CONFIG: (folder.tokenizer_config if TOKENIZER_CONFIG in folder.files else None, config, ""),
        GENERATION_CONFIG: (folder.generation_config, gen, f"eos_token_id {list(gen_before)} -> {eos_ids}"),
    }
    if stm is not None:
        new_contents[SPECIAL_TOKENS_MAP] = (folder.special_tokens_map, stm, "eos/pad kept in step")
    files: list[FileChange] = []
    staged: list[StagedFile] = []
    for rel, (before, after, summary) in new_contents.items():
        data = dump_json(after)
        if before is not None and before == after:
            staged.append(StagedFile(rel, source=source_path / rel))
            files.append(FileChange(rel, "keep"))
            continue
        before_sha = sha256_bytes(folder.read_bytes(rel)) if rel in folder.files else None
        action = "change" if rel in folder.files else "add"
        if rel == TOKENIZER_CONFIG:
            summary = _config_summary(folder.tokenizer_config, config)
        files.append(FileChange(rel, action, summary, before_sha, sha256_bytes(data)))
        staged.append(StagedFile(rel, content=data))
    template_bytes = template.encode("utf-8")
    if format in ("both", "jinja"):
        before = folder.read_bytes(CHAT_TEMPLATE_FILE) if CHAT_TEMPLATE_FILE in folder.files else None
        if before == template_bytes:
            files.append(FileChange(CHAT_TEMPLATE_FILE, "keep"))
            staged.append(StagedFile(CHAT_TEMPLATE_FILE, source=source_path / CHAT_TEMPLATE_FILE))
        else:
            action = "change" if before is not None else "add"
            files.append(
                FileChange(
                    CHAT_TEMPLATE_FILE,
                    action,
                    f"{fam.name}/{var.name}",
                    sha256_bytes(before) if before is not None else None,
                    sha256_bytes(template_bytes),
                )
            )
            staged.append(StagedFile(CHAT_TEMPLATE_FILE, content=template_bytes))
    elif CHAT_TEMPLATE_FILE in folder.files:
        files.append(
            FileChange(
                CHAT_TEMPLATE_FILE,
                "remove",
                "transformers would prefer it over the config key",
                sha256_bytes(folder.read_bytes(CHAT_TEMPLATE_FILE)),
            )
        )
    training_file = f"{CHAT_TEMPLATE_DIR}/{TRAINING_TEMPLATE_NAME}.jinja"
    if training_text is not None and format in ("both", "jinja"):
        data = training_text.encode("utf-8")
        before = folder.read_bytes(training_file) if training_file in folder.files else None
        if before == data:
            files.append(FileChange(training_file, "keep"))
            staged.append(StagedFile(training_file, source=source_path / training_file))
        else:
            files.append(FileChange(training_file, "change" if before is not None else "add",
                                    f"{fam.name}/{var.name} with {{% generation %}}",
                                    sha256_bytes(before) if before is not None else None, sha256_bytes(data)))
            staged.append(StagedFile(training_file, content=data))
    elif training_file in folder.files and training_text is not None:
        files.append(FileChange(training_file, "remove", "written to the config key instead",
                                sha256_bytes(folder.read_bytes(training_file))))
    handled = set(new_contents) | {CHAT_TEMPLATE_FILE}
    if training_text is not None:
        handled.add(training_file)
    for rel in folder.files:
        if rel not in handled:
            files.append(FileChange(rel, "keep"))
            staged.append(StagedFile(rel, source=source_path / rel))
    if before_vocab.size != vocab.size:
        warnings.append(
            f"the vocabulary grows from {before_vocab.size} to {vocab.size} ids: call "
            f"model.resize_token_embeddings({vocab.size}) before training, or use --reuse-reserved"
        )
    return InstallPlan(
        family=fam.name,
        variant=var.name,
        source=str(tokenizer),
        source_path=source_path,
        output=output_path,
        format=format,
        template_sha256=sha256_bytes(template_bytes),
        files=tuple(files),
        tokens=changes,
        vocab_size_before=before_vocab.size,
        vocab_size_after=vocab.size,
        eos_token=(old_eos, eos),
        pad_token=(old_pad, pad),
        stop_token_ids=tuple(int(i) for i in stop_ids if i is not None),
        generation_eos_before=gen_before,
        generation_eos_after=gen_after,
        warnings=tuple(warnings),
        bos_dropped_from_post_processor=bos_dropped,
        staged=tuple(staged),
        expected_template=template,
        training_template=training_text,
    )


def _training_template(folder: TokenizerFolder, var: Variant, wanted: bool, warnings: list[str]) -> str | None:
    """The training variant to write: when asked, or when the source holds one derived from an earlier install
    (it is derived anew, so it never describes a template that is no longer there)."""
    existing = folder.additional_templates.get(TRAINING_TEMPLATE_NAME)
    config = folder.tokenizer_config.get("chat_template")
    if existing is None and isinstance(config, list):
        existing = next((t.get("template") for t in config if isinstance(t, dict)
                         and t.get("name") == TRAINING_TEMPLATE_NAME), None)
    if wanted or (isinstance(existing, str) and is_training_template(existing)):
        return derive_training_template(var.template, var.stop_tokens, var.control_tokens)
    if existing is not None:
        warnings.append(f"the source's own '{TRAINING_TEMPLATE_NAME}' template is kept as it is: it may not match "
                        "the new default; pass --training to replace it with one derived from the new template")
    return None


def _token_summary(changes: tuple[TokenChange, ...]) -> str:
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.action] = counts.get(c.action, 0) + 1
    return ", ".join(f"{n} {action}" for action, n in counts.items())


def _config_summary(before: dict[str, Any], after: dict[str, Any]) -> str:
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return "keys " + ", ".join(keys) if keys else ""


def self_check(folder: Path, plan: InstallPlan) -> None:
    """Reload `folder` with transformers and confirm what the plan promised."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    try:
        Tokenizer.from_file(str(folder / TOKENIZER_JSON))
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as err:
        raise InstallCheckError(
            f"the installed folder does not load ({type(err).__name__}: {err})",
            hint="report this with the source tokenizer; nothing was published",
        ) from None
    problems = []
    if named_template(tok) != plan.expected_template:
        problems.append("the reloaded chat_template differs from the variant's template")
    if plan.training_template is not None and named_template(tok, TRAINING_TEMPLATE_NAME) != plan.training_template:
        problems.append(f"the reloaded '{TRAINING_TEMPLATE_NAME}' template differs from the derived one")
    for change in plan.tokens:
        ids = tok.encode(change.token, add_special_tokens=False)
        if ids != [change.id]:
            problems.append(f"{change.token} encodes to {ids}, expected [{change.id}]")
    if tok.eos_token != plan.eos_token[1]:
        problems.append(f"eos_token reloads as {tok.eos_token}, expected {plan.eos_token[1]}")
    if plan.pad_token[1] is not None and tok.pad_token != plan.pad_token[1]:
        problems.append(f"pad_token reloads as {tok.pad_token}, expected {plan.pad_token[1]}")
    if plan.bos_dropped_from_post_processor and tok.bos_token_id in tok("x")["input_ids"]:
        problems.append(f"tokenizer(text) still adds {plan.bos_dropped_from_post_processor}")
    if len(tok) != plan.vocab_size_after:
        problems.append(f"the reloaded tokenizer has {len(tok)} ids, expected {plan.vocab_size_after}")
    if problems:
        raise InstallCheckError(
            "the installed folder failed its reload check: " + "; ".join(problems),
            hint="nothing was published; report this with the source tokenizer",
        )


def apply_install(plan: InstallPlan, *, force: bool = False) -> InstallResult:
    """Write the planned folder atomically, after it passes `self_check`."""
    if folder_matches(plan.output, plan.staged):
        return InstallResult(plan, plan.output, None, already_installed=True)
    replaced = write_folder(
        plan.output, plan.staged, force=force, check=lambda staging: self_check(staging, plan)
    )
    return InstallResult(plan, plan.output, replaced, already_installed=False)


def install(
    family: str | Family,
    tokenizer: str | Path,
    output: str | Path,
    *,
    variant: str | None = None,
    format: str = "both",
    reuse_reserved: bool = False,
    keep_tokenizer_bos: bool = False,
    training: bool = False,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> InstallResult:
    """Install `family` on the tokenizer at `tokenizer` (a folder or Hub repo id), writing `output`.

    >>> install("gigachat3", base_tokenizer("llama3"), "gigachat-tok", reuse_reserved=True)  # doctest: +SKIP
    """
    plan = plan_install(
        family,
        tokenizer,
        output,
        variant=variant,
        format=format,
        reuse_reserved=reuse_reserved,
        keep_tokenizer_bos=keep_tokenizer_bos,
        training=training,
        force=force,
        revision=revision,
        token=token,
    )
    return apply_install(plan, force=force)
