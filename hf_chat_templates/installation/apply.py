"""Apply an install plan: write the folder atomically, after reloading it with transformers confirms what the plan
promised (the template, each control token one id, eos and pad, a post-processor BOS dropped when asked, the
vocabulary size).

>>> result = install("gigachat3", base_tokenizer("llama3"), "gigachat-tok", reuse_reserved=True)  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InstallCheckError
from ..families.registry import Family
from ..families.source import TemplateChoice
from ..template.rendering import named_template
from ..template.training_variant import TRAINING_TEMPLATE_NAME
from ..tokenizer.folder import TOKENIZER_JSON, folder_matches, write_folder
from .plan import InstallPlan, InstallResult
from .planner import plan_install


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
        problems.append("the reloaded chat_template differs from the template installed")
    for name, text in plan.expected_named.items():
        if named_template(tok, name) != text:
            problems.append(f"the reloaded '{name}' template differs from the one installed")
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


def apply_install(plan: InstallPlan, *, force: bool | None = None) -> InstallResult:
    """Write the planned folder atomically, after it passes `self_check`. `force` defaults to the plan's own: a
    plan made with force=True replaces a non-empty output (kept beside it)."""
    if folder_matches(plan.output, plan.staged):
        return InstallResult(plan, plan.output, None, already_installed=True)
    replaced = write_folder(
        plan.output,
        plan.staged,
        force=plan.force if force is None else force,
        check=lambda staging: self_check(staging, plan),
    )
    return InstallResult(plan, plan.output, replaced, already_installed=False)


def install(
    choice: TemplateChoice | str | Family,
    tokenizer: str | Path,
    output: str | Path,
    *,
    format: str = "both",
    reuse_reserved: bool = False,
    bos_postprocessor: bool = True,
    pad_token: str | None = None,
    training: bool = False,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> InstallResult:
    """Install the template `choice` names (a family, or its name, or a `TemplateChoice`) on the tokenizer at
    `tokenizer` (a folder or Hub repo id), writing `output`. See `plan_install` for `choice`, `pad_token` and
    `bos_postprocessor`.

    >>> install("gigachat3", base_tokenizer("llama3"), "gigachat-tok", reuse_reserved=True)  # doctest: +SKIP
    >>> choice = TemplateChoice(template="chat.jinja", stop_tokens=["<|im_end|>"])          # doctest: +SKIP
    >>> install(choice, "org/model", "out")                                                  # doctest: +SKIP
    """
    plan = plan_install(
        choice,
        tokenizer,
        output,
        format=format,
        reuse_reserved=reuse_reserved,
        bos_postprocessor=bos_postprocessor,
        pad_token=pad_token,
        training=training,
        force=force,
        revision=revision,
        token=token,
    )
    return apply_install(plan)
