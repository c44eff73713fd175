"""Installing a chat template into a GGUF file: the same plan as a folder install, written as GGUF metadata.

The GGUF's tokenizer is saved as a folder (loading.py) and planned on exactly as `install` plans on a folder
(installation/planner.py): which template, which control tokens and ids, which eos and stop ids. The plan then
becomes metadata changes: `tokenizer.chat_template` (and `tokenizer.chat_template.NAME`), every control token
CONTROL in `tokenizer.ggml.token_type`, a reserved slot's new text in `tokenizer.ggml.tokens` (--reuse-reserved),
eos set to the first stop id and eot/eom to the other stop ids the folder install lists (`_stop_ids`), pad when
one is chosen or asked for (`pad_token`), and add_bos_token false when the template writes the BOS itself and
`bos_postprocessor=False` asks to drop the tokenizer's own (kept by default, as a folder install keeps its
post-processor's). A token the vocabulary lacks is
refused: a GGUF file's vocabulary cannot grow without its embeddings. Everything else is copied byte for byte
(writing.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError, option
from ..families.registry import Family
from ..families.source import TemplateChoice, as_choice
from ..installation.plan import BosPlan
from ..installation.planner import plan_install
from ..tokenizer.folder import CHAT_TEMPLATE_DIR, CHAT_TEMPLATE_FILE
from .loading import gguf_tokenizer_folder
from .reading import read_layout, tokenizer_from_layout
from .writing import GgufValue, GgufWriteResult, metadata_changes, write_gguf

SPECIAL_ACTIONS = ("unchanged", "made-special", "added", "renamed-reserved")


@dataclass(frozen=True)
class GgufInstallPlan:
    """What installing a template into a GGUF file would change; nothing is written until `apply_gguf_install`."""

    subject: str
    source: Path
    output: Path
    template_sha256: str
    tokens: tuple[str, ...]  # each control token's line, as the folder plan describes it
    changes: dict[str, GgufValue] = field(repr=False)
    arguments: dict[str, Any] = field(repr=False)
    warnings: tuple[str, ...]
    tokens_from: str
    force: bool = False
    bos: str | None = None  # what the install does with BOS, in words

    def to_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "source": str(self.source),
            "output": str(self.output),
            "template_sha256": self.template_sha256,
            "tokens": list(self.tokens),
            "tokens_from": self.tokens_from,
            "changed_keys": sorted(self.changes),
            "token_ids": self.arguments.get("token_ids", {}),
            "bos": self.bos,
            "warnings": list(self.warnings),
        }

    def describe(self) -> str:
        lines = [
            f"install {self.subject} from {self.source} into {self.output}",
            f"  template sha256 {self.template_sha256[:16]}…",
            f"  tokens from: {self.tokens_from}",
            "  control tokens (CONTROL in tokenizer.ggml.token_type):",
            *(f"    {t}" for t in self.tokens),
            "  keys written again (everything else, tensor data included, copied byte for byte):",
            *(f"    {key}" for key in sorted(self.changes)),
        ]
        ids = self.arguments.get("token_ids", {})
        lines.append("  ids: " + ", ".join(f"{name} {value}" for name, value in ids.items()))
        if self.bos is not None:
            lines.append(f"  {self.bos}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def plan_gguf_install(
    choice: TemplateChoice | str | Family | None,
    gguf: str | Path,
    output: str | Path,
    *,
    force: bool = False,
    reuse_reserved: bool = False,
    pad_token: str | None = None,
    bos_postprocessor: bool = True,
) -> GgufInstallPlan:
    """What installing the template `choice` names (as `plan_install` takes it) into the GGUF file `gguf` as the
    new file `output` would change. A choice of neither a family nor template files (or None): the file's own
    template, installed again (with the stop tokens or pad token declared)."""
    choice = as_choice(choice)
    layout = read_layout(gguf)
    source = tokenizer_from_layout(layout)
    own = choice.family is None and choice.template is None
    with tempfile.TemporaryDirectory(prefix="hfct-gguf-") as tmp:
        folder = gguf_tokenizer_folder(source, Path(tmp) / "tokenizer")
        if own:  # the file's own template, installed again with what is declared (--stop-token, --pad-token)
            choice = dataclasses.replace(choice, template=_own_templates(folder, layout.path))
        plan = plan_install(
            choice,
            folder,
            Path(tmp) / "out",
            reuse_reserved=reuse_reserved,
            pad_token=pad_token,
            bos_postprocessor=bos_postprocessor,
        )
    size = len(source.tokens)
    if too_far := [c for c in plan.tokens if c.id >= size]:
        raise UsageError(
            f"{layout.path}: the vocabulary ({size} tokens) lacks "
            + ", ".join(f"{c.token} (it would be id {c.id})" for c in too_far),
            hint=f"a GGUF file's vocabulary cannot grow without its embeddings: pass {option('reuse_reserved')} to "
            "write a control token over an unused reserved slot"
            + (
                f" (a tool-call tag is a plain token; {option('control_tokens')} TAG makes it a control token that "
                "can take one)"
                if any(c.action == "added-markup" for c in too_far)
                else ""
            ),
            path=layout.path,
        )
    token_ids, undeclared = _stop_ids(plan.stop_token_ids, plan.generation_eos_after)
    warnings = [w for w in plan.warnings if "resize_token_embeddings" not in w]
    if undeclared:
        warnings.append(
            "a GGUF declares three stop ids (eos, eot, eom); generation_config.json's "
            + ", ".join(f"{i} ({source.token(i)!r})" for i in undeclared)
            + " cannot be declared too (llama.cpp stops on some tokens by their text: check with verify --against)"
        )
    if plan.pad_token[1] is not None and plan.pad_token[1] in source.tokens:
        token_ids["pad"] = source.tokens.index(plan.pad_token[1])
    arguments: dict[str, Any] = {
        "chat_template": plan.expected_template,
        "named_templates": plan.expected_named or None,
        "token_ids": token_ids,
        "control_token_ids": [c.id for c in plan.tokens if c.action in SPECIAL_ACTIONS],
        "token_texts": {c.id: c.token for c in plan.tokens if source.token(c.id) != c.token} or None,
        "add_bos_token": False if plan.bos_dropped_from_post_processor else None,
    }
    return GgufInstallPlan(
        subject=f"the template of {layout.path.name}" if own else plan.subject,
        source=layout.path,
        output=Path(output).absolute(),
        template_sha256=plan.template_sha256,
        tokens=tuple(c.describe() for c in plan.tokens),
        changes=metadata_changes(layout, **arguments),
        arguments=arguments,
        warnings=tuple(warnings),
        tokens_from=plan.tokens_from,
        force=force,
        bos=_bos_line(plan.bos),
    )


def _bos_line(bos: BosPlan | None) -> str | None:
    """What the install does with BOS, in a GGUF's terms: llama.cpp adds BOS to a prompt by add_bos_token."""
    if bos is None:
        return None
    t, key = bos.token, "tokenizer.ggml.add_bos_token"
    if bos.dropped:
        return (
            f"BOS {t}: {key} set false (--no-bos-postprocessor): the template writes it; a plain-text prompt gets none"
        )
    if bos.template_writes and bos.tokenizer_adds:
        return (
            f"BOS {t}: {key} kept, so a plain-text prompt starts with it; the template writes it too, so a "
            "rendering is to be tokenized without adding BOS (--no-bos-postprocessor sets the key false instead)"
        )
    return f"BOS {t}: {key} unchanged; the template " + ("writes it" if bos.template_writes else "does not write it")


def _own_templates(folder: Path, gguf: Path) -> dict[str, Path]:
    """The GGUF's own templates, as the folder saved from it holds them: the default and the named ones."""
    files = {"default": folder / CHAT_TEMPLATE_FILE} if (folder / CHAT_TEMPLATE_FILE).is_file() else {}
    files |= {path.stem: path for path in sorted((folder / CHAT_TEMPLATE_DIR).glob("*.jinja"))}
    if "default" not in files:
        raise UsageError(
            f"{gguf}: has no tokenizer.chat_template to install again",
            hint=f"name a family, or pass {option('template')} FILE",
            path=gguf,
            parameter="template",
        )
    return files


def _stop_ids(stops: tuple[int, ...], listed: tuple[int, ...]) -> tuple[dict[str, int], list[int]]:
    """eos: the template's stop; eot and eom: the other stop ids the folder install lists (the template's next
    stops, then generation_config.json's), eot being the template's stop again when one other id remains."""
    eos = stops[0]
    others = [i for i in dict.fromkeys((*stops[1:], *listed)) if i != eos]
    if len(others) <= 1:
        return {"eos": eos, "eot": eos} | ({"eom": others[0]} if others else {}), []
    return {"eos": eos, "eot": others[0], "eom": others[1]}, others[2:]


def apply_gguf_install(plan: GgufInstallPlan) -> GgufWriteResult:
    """Write the planned GGUF file (atomically; the source is never changed)."""
    return write_gguf(plan.source, plan.output, force=plan.force, **plan.arguments)
