"""The install plan: every change an install would make, as a value computed before anything is written.

What an install does, and never does:
- writes the template as `chat_template.jinja` and/or the `chat_template` key of tokenizer_config.json (the two
  never disagree: the form not chosen is removed);
- registers every control token as one special id (see tokenizer/vocab.py), sets eos to the family's first stop
  token, sets the pad token asked for or picks one when there is none, and merges the stop ids into
  generation_config.json's eos_token_id;
- keeps the BOS the tokenizer's post-processor adds, so `tokenizer(text)` on plain text still starts with it; when
  the template writes BOS too, a rendering is tokenized without special tokens (`BosPlan`). Asked
  (`bos_postprocessor=False`), it drops that BOS instead;
- copies every other file byte for byte, never touches the source, and writes the output atomically after
  reloading it with transformers to confirm the template and that each control token is one id.

`planner.plan_install` computes it; `apply.apply_install` writes it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..template.training_variant import TRAINING_TEMPLATE_NAME
from ..tokenizer.folder import StagedFile
from ..tokenizer.vocab import TokenChange

FORMATS = ("both", "jinja", "config")


@dataclass(frozen=True)
class FileChange:
    """One file of the output. action: add | change | remove | keep."""

    path: str
    action: str
    summary: str = ""
    before_sha256: str | None = None
    after_sha256: str | None = None


@dataclass(frozen=True)
class BosPlan:
    """What an install does with BOS: whether the template writes it, whether `tokenizer(text)` adds it with its
    defaults once installed, and whether the post-processor's was dropped (`bos_postprocessor=False`)."""

    token: str
    template_writes: bool
    tokenizer_adds: bool
    dropped: bool

    def describe(self) -> str:
        t = self.token
        if self.dropped:
            return (
                f"BOS {t}: dropped from the post-processor (--no-bos-postprocessor): the template writes it, so "
                "tokenizer(rendered) gives one; tokenizer(text) on plain text (eval harnesses, completions) gives none"
            )
        if self.template_writes and self.tokenizer_adds:
            return (
                f"BOS {t}: the post-processor keeps adding it, so tokenizer(text) on plain text starts with it as "
                "before; the template writes it too, so tokenize a rendering with apply_chat_template(..., "
                "tokenize=True) or tokenizer(text, add_special_tokens=False), not tokenizer(text) (two BOS); "
                "--no-bos-postprocessor drops it from the post-processor instead"
            )
        if self.template_writes:
            return f"BOS {t}: written by the template; tokenizer(text) adds none (unchanged)"
        if self.tokenizer_adds:
            return f"BOS {t}: added by tokenizer(text) (unchanged); the template does not write it"
        return f"BOS {t}: neither the template nor tokenizer(text) writes it (unchanged)"


@dataclass(frozen=True)
class InstallPlan:
    """Everything an install would do, computed before anything is written."""

    family: str | None  # None for template files
    variant: str | None
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
    bos: BosPlan | None = None  # None: the tokenizer has no BOS token
    force: bool = False  # replace a non-empty output (kept beside it): what the plan was made to do
    staged: tuple[StagedFile, ...] = field(repr=False, compare=False, default=())
    expected_template: str = field(repr=False, compare=False, default="")
    training_template: str | None = field(repr=False, compare=False, default=None)
    subject: str = ""  # what is installed: "family/variant", or the template file's name
    tokens_from: str = ""  # where the control and stop tokens came from: declared, a bundled family, inferred
    expected_named: dict[str, str] = field(repr=False, compare=False, default_factory=dict)
    ported: tuple[str, ...] | None = None  # install --port: what the port did, line by line (None: not asked)

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
            "bos": asdict(self.bos) if self.bos is not None else None,
            "training_template": TRAINING_TEMPLATE_NAME if self.training_template is not None else None,
            "named_templates": sorted(self.expected_named),
            "tokens_from": self.tokens_from,
            "port": list(self.ported) if self.ported is not None else None,
            "warnings": list(self.warnings),
        }

    def describe(self) -> str:
        lines = [
            (f"install {self.family} (variant {self.variant})" if self.family else f"install {self.subject}")
            + f" from {self.source} into {self.output}",
            f"  template sha256 {self.template_sha256[:16]}…, written as: {self.format}",
            f"  tokens from: {self.tokens_from}",
        ]
        if self.ported is not None:
            lines += ["  port:"] + [f"    {line}" for line in self.ported]
        lines.append("  files:")
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
        if self.bos is not None:
            lines.append(f"  {self.bos.describe()}")
        if self.training_template is not None:
            lines.append(
                f"  training template '{TRAINING_TEMPLATE_NAME}': the same text with {{% generation %}} "
                "around each assistant turn (apply_chat_template(..., chat_template='training', "
                "return_assistant_tokens_mask=True))"
            )
        lines.append(f"  eos_token: {self.eos_token[0]} -> {self.eos_token[1]}")
        lines.append(f"  pad_token: {self.pad_token[0]} -> {self.pad_token[1]}")
        lines.append(
            f"  generation_config eos_token_id: {list(self.generation_eos_before)} -> {list(self.generation_eos_after)}"
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
