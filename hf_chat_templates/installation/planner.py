"""`plan_install`: compute what installing a template on a tokenizer would write. Reads; writes nothing to the
output or the source (only the cache folder's records of files already checked, `tokenizer.cache_folder`).

>>> plan = plan_install("llama3.2-pythonic", "path/to/tokenizer", "out")   # doctest: +SKIP
>>> print(plan.describe())                                                  # doctest: +SKIP

The steps, each a function below: the tokens (control tokens registered; a post-processor BOS the template
already writes kept, or dropped when asked), the pad token, the three JSON files (tokenizer_config, special_tokens_map,
generation_config), and the list of every file of the output with what happens to it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TokenizerFolderError, UsageError, option
from ..families.registry import Family
from ..families.source import TemplateChoice, as_choice, check_source_options, template_files
from ..outputs import check_output, check_outside
from ..template.syntax import line_endings
from ..template.training_variant import TRAINING_TEMPLATE_NAME, derive_training_template, is_training_template
from ..tokenizer.folder import (
    CHAT_TEMPLATE_DIR,
    CHAT_TEMPLATE_FILE,
    GENERATION_CONFIG,
    SPECIAL_TOKENS_MAP,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
    StagedFile,
    TokenizerFolder,
    dump_json,
    read_folder,
    sha256_bytes,
)
from ..tokenizer.hub import resolve_source
from ..tokenizer.vocab import (
    TokenChange,
    Vocabulary,
    drop_post_processor_token,
    post_processor_adds,
    register_control_tokens,
    sync_config_tokens,
    token_content,
    with_content,
)
from .pad import choose_pad
from .plan import FORMATS, BosPlan, FileChange, InstallPlan
from .porting import Porter, port_subject
from .subject import InstallSubject, from_templates, subject_of_family


def _convert_slow(folder: TokenizerFolder) -> dict[str, Any]:
    """A folder with only a slow vocabulary (tokenizer.model …): let transformers build tokenizer.json."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder.path))
        return dict(json.loads(tok.backend_tokenizer.to_str()))
    except Exception as err:
        raise TokenizerFolderError(
            f"{folder.path}: has no {TOKENIZER_JSON}, and transformers could not build one "
            f"({type(err).__name__}: {err})",
            hint="install sentencepiece and protobuf, or provide tokenizer.json",
            path=folder.path,
        ) from None


def _as_id_list(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


@dataclass
class _Tokens:
    """The token side of a plan: the new tokenizer.json, its changes, and the vocabularies before and after."""

    tokenizer_json: dict[str, Any]
    changes: tuple[TokenChange, ...]
    before: Vocabulary
    after: Vocabulary
    bos_dropped: str | None
    bos_added: bool  # whether tokenizer(text) adds BOS with its defaults, after the install
    warnings: list[str]


def _plan_tokens(
    subject: InstallSubject,
    folder: TokenizerFolder,
    config: dict[str, Any],
    *,
    reuse_reserved: bool,
    bos_postprocessor: bool,
) -> _Tokens:
    """Register the control tokens; drop a post-processor BOS the template writes itself when `bos_postprocessor`
    is false (edits `config`)."""
    origin = str(folder.path / TOKENIZER_JSON)
    tokenizer_json = folder.tokenizer_json if folder.tokenizer_json is not None else _convert_slow(folder)
    before = Vocabulary(tokenizer_json, origin)
    keep = {token_content(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    new_tj, changes, warnings = register_control_tokens(
        tokenizer_json,
        subject.control_tokens,
        reuse_reserved=reuse_reserved,
        keep={k for k in keep if k},
        origin=origin,
        markup=subject.markup_tokens,
    )
    bos_dropped = None
    bos = token_content(config.get("bos_token"))
    if subject.template_writes_bos and not bos_postprocessor and bos:
        # Asked for: tokenizer(rendered) then gives one BOS, but tokenizer(text) on plain text (eval harnesses,
        # completions) gives none. Kept by default, and the rendering is tokenized without special tokens instead.
        new_tj, dropped = drop_post_processor_token(new_tj, bos)
        if dropped or config.get("add_bos_token") is True:
            bos_dropped = bos
        if config.get("add_bos_token") is True:
            config["add_bos_token"] = False
    added = bool(bos) and _adds_bos(new_tj, config, bos or "")
    return _Tokens(new_tj, changes, before, Vocabulary(new_tj, origin), bos_dropped, added, list(warnings))


def _adds_bos(tokenizer_json: dict[str, Any], config: dict[str, Any], bos: str) -> bool:
    """Whether `tokenizer(text)` adds `bos` with its defaults, as transformers loads the folder: add_bos_token or
    add_eos_token in the config rebuild the post-processor from add_bos_token; otherwise tokenizer.json's adds it."""
    if "add_bos_token" in config or "add_eos_token" in config:
        return config.get("add_bos_token") is True
    return post_processor_adds(tokenizer_json, bos)


def _bos_of(config: dict[str, Any], subject: InstallSubject, tokens: _Tokens) -> BosPlan | None:
    bos = token_content(config.get("bos_token"))
    if not bos:
        return None
    return BosPlan(bos, subject.template_writes_bos, tokens.bos_added, tokens.bos_dropped is not None)


def _plan_config(
    config: dict[str, Any],
    tokens: _Tokens,
    eos: str,
    pad: str | None,
    named: dict[str, str],
    format: str,
) -> dict[str, Any]:
    """tokenizer_config.json: tokens kept in step, eos and pad set, the template written as `format` asks."""
    config = sync_config_tokens(config, tokens.tokenizer_json, tokens.changes)
    config["eos_token"] = with_content(config.get("eos_token"), eos)
    if pad is not None:
        config["pad_token"] = with_content(config.get("pad_token"), pad)
    if format not in ("both", "config"):
        config.pop("chat_template", None)
        return config
    existing = config.get("chat_template")
    if isinstance(existing, list) or len(named) > 1:  # named templates: ours replaced, the others kept
        others = [
            t
            for t in (existing if isinstance(existing, list) else [])
            if isinstance(t, dict) and t.get("name") not in named
        ]
        config["chat_template"] = [{"name": k, "template": v} for k, v in named.items()] + others
    else:
        config["chat_template"] = named["default"]
    return config


def _plan_special_tokens_map(
    folder: TokenizerFolder, tokens: _Tokens, eos: str, pad: str | None
) -> dict[str, Any] | None:
    """special_tokens_map.json (legacy, but still read): kept saying the same as the config."""
    if folder.special_tokens_map is None:
        return None
    stm = sync_config_tokens(copy.deepcopy(folder.special_tokens_map), tokens.tokenizer_json, tokens.changes)
    stm["eos_token"] = with_content(stm.get("eos_token"), eos)
    if pad is not None:
        stm["pad_token"] = with_content(stm.get("pad_token"), pad)
    return stm


def _plan_generation_config(
    folder: TokenizerFolder,
    vocab: Vocabulary,
    config: dict[str, Any],
    old_eos: str | None,
    stop_ids: tuple[int, ...],
    pad: str | None,
    pad_asked: bool = False,
) -> tuple[dict[str, Any], tuple[int, ...]]:
    """generation_config.json with the stop ids merged into eos_token_id (created when missing), and pad_token_id
    set where it has none, or to the pad asked for."""
    gen = copy.deepcopy(folder.generation_config) if folder.generation_config is not None else None
    if gen is None:
        previous_eos_id = vocab.id_of(old_eos) if old_eos else None
        gen = {}
        bos = token_content(config.get("bos_token"))
        if bos and vocab.id_of(bos) is not None:
            gen["bos_token_id"] = vocab.id_of(bos)
        eos_ids = list(stop_ids) + ([previous_eos_id] if previous_eos_id is not None else [])
    else:
        eos_ids = _as_id_list(gen.get("eos_token_id"))
    eos_ids = list(dict.fromkeys([*eos_ids, *stop_ids]))
    gen["eos_token_id"] = eos_ids
    if pad is not None and ("pad_token_id" not in gen or pad_asked):
        gen["pad_token_id"] = vocab.id_of(pad)
    return gen, tuple(eos_ids)


def _training_template(
    folder: TokenizerFolder, subject: InstallSubject, wanted: bool, warnings: list[str]
) -> str | None:
    """The training variant to write: when asked, or when the source holds one derived from an earlier install
    (it is derived anew, so it never describes a template that is no longer there)."""
    existing = folder.named_template(TRAINING_TEMPLATE_NAME)
    if wanted or (existing is not None and is_training_template(existing)):
        return derive_training_template(subject.template, subject.stop_tokens, subject.control_tokens)
    if existing is not None:
        warnings.append(
            f"the source's own '{TRAINING_TEMPLATE_NAME}' template is kept as it is: it may not match "
            "the new default; pass --training to replace it with one derived from the new template"
        )
    return None


def _token_summary(changes: tuple[TokenChange, ...]) -> str:
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.action] = counts.get(c.action, 0) + 1
    return ", ".join(f"{n} {action}" for action, n in counts.items())


def _config_summary(before: dict[str, Any], after: dict[str, Any]) -> str:
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return "keys " + ", ".join(keys) if keys else ""


class _Files:
    """Every file of the output, in order, with what happens to it and where its bytes come from."""

    def __init__(self, folder: TokenizerFolder) -> None:
        self.folder = folder
        self.changes: list[FileChange] = []
        self.staged: list[StagedFile] = []
        self.handled: set[str] = set()

    def keep(self, rel: str) -> None:
        self.handled.add(rel)
        self.changes.append(FileChange(rel, "keep"))
        self.staged.append(StagedFile(rel, source=self.folder.path / rel))

    def _before_sha(self, rel: str) -> str | None:
        return sha256_bytes(self.folder.read_bytes(rel)) if rel in self.folder.files else None

    def write(self, rel: str, data: bytes, summary: str) -> None:
        """`data` as `rel`: kept when the source has exactly these bytes, else added or changed."""
        self.handled.add(rel)
        before = self.folder.read_bytes(rel) if rel in self.folder.files else None
        if before == data:
            self.keep(rel)
            return
        action = "change" if before is not None else "add"
        self.changes.append(FileChange(rel, action, summary, self._before_sha(rel), sha256_bytes(data)))
        self.staged.append(StagedFile(rel, content=data))

    def write_json(self, rel: str, before: Any, after: Any, summary: str) -> None:
        """A JSON file: kept byte for byte when its parsed content does not change."""
        self.handled.add(rel)
        if before is not None and before == after:
            self.keep(rel)
            return
        data = dump_json(after)
        action = "change" if rel in self.folder.files else "add"
        self.changes.append(FileChange(rel, action, summary, self._before_sha(rel), sha256_bytes(data)))
        self.staged.append(StagedFile(rel, content=data))

    def remove(self, rel: str, summary: str) -> None:
        self.handled.add(rel)
        if rel in self.folder.files:
            self.changes.append(FileChange(rel, "remove", summary, self._before_sha(rel)))

    def keep_the_rest(self) -> None:
        for rel in self.folder.files:
            if rel not in self.handled:
                self.keep(rel)


def _plan_files(
    folder: TokenizerFolder,
    jsons: dict[str, tuple[Any, Any, str]],
    named: dict[str, str],
    format: str,
    labels: dict[str, str],
    written: dict[str, str],
) -> _Files:
    """Every file: the JSON files, each template as a file (`format` both or jinja) or not (config), the rest kept.
    A template file's own line endings are kept in its .jinja file (`written`): transformers reads them as LF."""
    files = _Files(folder)
    for rel, (before, after, summary) in jsons.items():
        files.write_json(rel, before, after, summary)
    for name, text in named.items():
        rel = CHAT_TEMPLATE_FILE if name == "default" else f"{CHAT_TEMPLATE_DIR}/{name}.jinja"
        summary = labels.get(name) or labels["default"] + " with {% generation %}"
        if format in ("both", "jinja"):
            if name in written:
                summary += f", its {line_endings(written[name])} line endings kept (transformers reads LF)"
            files.write(rel, written.get(name, text).encode("utf-8"), summary)
        elif name == "default":
            files.remove(rel, "transformers would prefer it over the config key")
        else:
            files.remove(rel, "written to the config key instead")
    files.keep_the_rest()
    return files


def _plan_jsons(
    folder: TokenizerFolder,
    tokens: _Tokens,
    config: dict[str, Any],
    generation: tuple[Any, Any, str],
    eos: str,
    pad: str | None,
) -> dict[str, tuple[Any, Any, str]]:
    """The JSON files of the output: (before, after, summary) by path."""
    jsons: dict[str, tuple[Any, Any, str]] = {
        TOKENIZER_JSON: (folder.tokenizer_json, tokens.tokenizer_json, _token_summary(tokens.changes)),
        TOKENIZER_CONFIG: (
            folder.tokenizer_config if TOKENIZER_CONFIG in folder.files else None,
            config,
            _config_summary(folder.tokenizer_config, config),
        ),
        GENERATION_CONFIG: generation,
    }
    if (stm := _plan_special_tokens_map(folder, tokens, eos, pad)) is not None:
        jsons[SPECIAL_TOKENS_MAP] = (folder.special_tokens_map, stm, "eos/pad kept in step")
    return jsons


def _eos_token(subject: InstallSubject, config: dict[str, Any], warnings: list[str]) -> str:
    """The first stop token, unless the template writes `{{ eos_token }}` itself: then the tokenizer's eos stays,
    so the rendering does not change, and the stops reach generation through generation_config.json."""
    stop, current = subject.stop_tokens[0], token_content(config.get("eos_token"))
    if subject.template_writes_eos and current and current != stop:
        warnings.append(
            f"the template writes {{{{ eos_token }}}}, so eos_token stays {current} (set to {stop} it "
            f"would change the rendering); generation stops at {' '.join(subject.stop_tokens)} through "
            "generation_config.json eos_token_id"
        )
        return current
    return stop


def _growth(before: int, after: int) -> list[str]:
    """The warning a vocabulary that grows needs: the embeddings must grow with it."""
    if before == after:
        return []
    return [
        f"the vocabulary grows from {before} to {after} ids: call model.resize_token_embeddings({after}) before "
        "training, or use --reuse-reserved"
    ]


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise UsageError(
            f"unknown {option('format')} {format!r}; choose one of {', '.join(FORMATS)}",
            hint=f"{option('format')} both",
            parameter="format",
        )


def _template_subject(choice: TemplateChoice, folder: TokenizerFolder) -> InstallSubject:
    """Template files, their tokens inferred (unless declared) on the source tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder.path))
    return from_templates(choice, tokenizer, generation_config=folder.generation_config)


def _source_folder(
    tokenizer: str | Path, output_path: Path, *, force: bool, revision: str | None, token: str | None
) -> TokenizerFolder:
    check_source_options(tokenizer, revision=revision, token=token)
    source_path = resolve_source(str(tokenizer), revision=revision, token=token)
    if output_path == source_path.absolute() and not force:
        raise UsageError(
            f"{output_path}: {option('output')} is the source folder; the source is never changed in place",
            hint=f"choose another {option('output')}, or pass {option('force')} to replace the source "
            "(it is kept beside it)",
            path=output_path,
            parameter="output",
        )
    check_output(output_path, force=force)
    check_outside(output_path, source_path, "the source tokenizer")
    return read_folder(source_path)


def _check_template_names(choice: TemplateChoice, training: bool, format: str) -> None:
    """The format, and the template names, which become file names: refused here, before the source is read and
    anything is staged (and `training` is the name --training writes)."""
    _check_format(format)
    if choice.template is not None and TRAINING_TEMPLATE_NAME in template_files(choice.template) and training:
        raise UsageError(
            f"{option('template')} names a template '{TRAINING_TEMPLATE_NAME}', and {option('training')} writes "
            "the derived one under that name",
            parameter="template",
            hint=f"drop {option('training')}, or give your template another name",
        )


def plan_install(
    choice: TemplateChoice | str | Family,
    tokenizer: str | Path,
    output: str | Path,
    *,
    format: str = "both",
    reuse_reserved: bool = False,
    bos_postprocessor: bool = True,
    training: bool = False,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
    pad_token: str | None = None,
    port: Porter | None = None,
) -> InstallPlan:
    """What installing the template `choice` names on `tokenizer` into `output` would write; writes nothing there.
    `choice`: a family (or its name), or a `TemplateChoice` of a family and variant or of template files (its
    `template`: a FILE, NAME=FILE strings, or {name: file}), their tokens declared there or else inferred. `pad_token`:
    see `pad.choose_pad`. `bos_postprocessor=False` drops the BOS the post-processor adds where the template writes it
    (kept by default: `tokenizer(text)` on plain text keeps it; see `plan.BosPlan`). `port`: the default template is
    ported before anything is planned (`verification.port.port_for_install`; see `porting.port_subject`)."""
    choice = as_choice(choice)
    _check_template_names(choice, training, format)
    family_subject = subject_of_family(choice)
    output_path = Path(output).absolute()
    folder = _source_folder(tokenizer, output_path, force=force, revision=revision, token=token)
    subject = family_subject or _template_subject(choice, folder)
    ported = port_subject(subject, folder.tokenizer_config, port) if port is not None else None
    subject = ported[0] if ported is not None else subject
    config = copy.deepcopy(folder.tokenizer_config)
    tokens = _plan_tokens(subject, folder, config, reuse_reserved=reuse_reserved, bos_postprocessor=bos_postprocessor)
    warnings, vocab, eos = tokens.warnings, tokens.after, _eos_token(subject, config, tokens.warnings)
    warnings += subject.notes
    pad = choose_pad(subject, config, vocab, eos, pad_token, warnings)
    stop_ids = tuple(int(i) for t in subject.stop_tokens if (i := vocab.id_of(t)) is not None)
    assert len(stop_ids) == len(subject.stop_tokens)
    old_eos, old_pad = token_content(config.get("eos_token")), token_content(config.get("pad_token"))
    training_text = _training_template(folder, subject, training, warnings)
    named = dict(subject.templates)
    if training_text is not None:
        named[TRAINING_TEMPLATE_NAME] = training_text
    config = _plan_config(config, tokens, eos, pad, named, format)
    gen_before = tuple(_as_id_list((folder.generation_config or {}).get("eos_token_id")))
    gen, gen_after = _plan_generation_config(folder, vocab, config, old_eos, stop_ids, pad, pad_token is not None)
    generation = (folder.generation_config, gen, f"eos_token_id {list(gen_before)} -> {list(gen_after)}")
    jsons = _plan_jsons(folder, tokens, config, generation, eos, pad)
    labels = {"default": subject.label}
    labels |= {name: Path(origin).name for name, origin in subject.origins.items() if name != "default"}
    files = _plan_files(folder, jsons, named, format, labels, subject.written)
    warnings += _growth(tokens.before.size, vocab.size)
    return InstallPlan(
        family=subject.family,
        variant=subject.variant,
        source=str(tokenizer),
        source_path=folder.path,
        output=output_path,
        format=format,
        template_sha256=sha256_bytes(subject.template.encode("utf-8")),
        files=tuple(files.changes),
        tokens=tokens.changes,
        vocab_size_before=tokens.before.size,
        vocab_size_after=vocab.size,
        eos_token=(old_eos, eos),
        pad_token=(old_pad, pad),
        stop_token_ids=stop_ids,
        generation_eos_before=gen_before,
        generation_eos_after=gen_after,
        warnings=tuple(warnings),
        bos_dropped_from_post_processor=tokens.bos_dropped,
        bos=_bos_of(config, subject, tokens),
        force=force,
        staged=tuple(files.staged),
        expected_template=subject.template,
        training_template=training_text,
        subject=subject.label,
        tokens_from=subject.tokens_from,
        expected_named={k: v for k, v in subject.templates.items() if k != "default"},
        ported=ported[1] if ported is not None else None,
    )
