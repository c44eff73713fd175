"""The bundled template families: `model_configs/<family>/family.toml` plus its `.jinja` files.

A family is one model's chat format; a variant is one template for it (`upstream` is the seed as given).
Configs are validated when loaded: an unknown key, a stop token that is not a control token, a template file
that is missing or does not parse, each raise ConfigError/TemplateError naming the file and the key.

>>> from hf_chat_templates import get_family
>>> get_family("llama3.2-pythonic").variant().stop_tokens
('<|eot_id|>',)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UnknownNameError, closest_hint
from ..template.syntax import check_template_syntax, parser_fingerprint, read_template_file
from ..tokenizer.cache_folder import cache_file, keep

CONFIG_FILE = "family.toml"
# More family folders: a list of folders in this variable, and the folders packages register in this group.
FAMILIES_ENV = "HF_CHAT_TEMPLATES_FAMILIES"
ENTRY_POINT_GROUP = "hf_chat_templates.families"
_NO_DEFAULT = object()

_FAMILY_KEYS = {
    "name": str,
    "description": str,
    "default_variant": str,
    "base_tokenizer": str,
    "template_writes_bos": bool,
    "pad_tokens": list,
    "control_tokens": list,
    "stop_tokens": list,
    "variants": dict,
}
_VARIANT_KEYS = {
    "template": str,
    "description": str,
    "control_tokens": list,
    "stop_tokens": list,
    "kwargs": dict,
    "provenance": dict,
}
_KWARG_KEYS = {"default": object, "doc": str}
_PROVENANCE_KEYS = {"seed": str, "sha256": str, "origin": str, "derived_from": str}


@dataclass(frozen=True)
class TemplateKwarg:
    """A keyword the template reads beyond messages/tools, and its default (None when it has none)."""

    name: str
    doc: str
    default: Any = None
    has_default: bool = False


@dataclass(frozen=True)
class Variant:
    """One template of a family, with everything needed to install it."""

    family: str
    name: str
    template_path: Path
    description: str
    control_tokens: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    kwargs: tuple[TemplateKwarg, ...]
    provenance: dict[str, str] = field(hash=False)

    @property
    def template(self) -> str:
        """The template text, exactly as shipped."""
        return read_template_file(self.template_path)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.template_path.read_bytes()).hexdigest()

    @property
    def kwarg_defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.kwargs if k.has_default}


@dataclass(frozen=True)
class Family:
    """A chat format: its variants, the base tokenizer it is tested on, and its BOS/pad expectations."""

    name: str
    description: str
    directory: Path
    default_variant: str
    base_tokenizer: str
    template_writes_bos: bool
    pad_tokens: tuple[str, ...]
    variants: dict[str, Variant] = field(hash=False)

    def variant(self, name: str | None = None) -> Variant:
        """The named variant, or the family's default one."""
        name = name or self.default_variant
        try:
            return self.variants[name]
        except KeyError:
            raise UnknownNameError(
                f"family {self.name!r} has no variant {name!r}; it has: {', '.join(sorted(self.variants))}"
                + closest_hint(name, self.variants),
                hint=f"hf-chat-templates show {self.name}",
            ) from None


def default_config_root() -> Path:
    """Where the bundled families live: inside the installed package, or at the top of a source checkout."""
    override = os.environ.get("HF_CHAT_TEMPLATES_MODEL_CONFIGS")
    if override:
        return Path(override)
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "model_configs", package.parent / "model_configs"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(
        f"no model_configs folder in {package} or beside it",
        hint="reinstall hf-chat-templates; the wheel ships model_configs inside the package",
    )


def _check_keys(table: dict[str, Any], allowed: Mapping[str, type], where: str, file: Path) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(
                f"{file}: unknown key '{where}{key}'" + closest_hint(key, allowed),
                hint=f"allowed keys here: {', '.join(sorted(allowed))}",
                path=file,
                key=where + key,
            )
        expected = allowed[key]
        if expected is not object and not isinstance(value, expected):
            raise ConfigError(
                f"{file}: key '{where}{key}' must be a {expected.__name__}, got {type(value).__name__}",
                hint="fix the value in the TOML file",
                path=file,
                key=where + key,
            )


def _token_list(value: Any, key: str, file: Path) -> tuple[str, ...]:
    if not all(isinstance(t, str) and t and not any(c.isspace() for c in t) for t in value):
        raise ConfigError(
            f"{file}: key {key!r} must be a list of non-empty token strings without whitespace",
            hint="list each control token exactly as the template writes it",
            path=file,
            key=key,
        )
    if len(set(value)) != len(value):
        raise ConfigError(f"{file}: key {key!r} lists a token twice", hint="remove the duplicate", path=file, key=key)
    return tuple(value)


def _read_config(file: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{file}: missing", hint=f"every family folder needs a {CONFIG_FILE}", path=file) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{file}: not valid TOML: {err}", hint="fix the syntax", path=file) from None


def _load_kwargs(table: Any, where: str, file: Path) -> tuple[TemplateKwarg, ...]:
    kwargs = []
    for kname, kraw in table.items():
        if not isinstance(kraw, dict):
            raise ConfigError(
                f"{file}: key '{where}kwargs.{kname}' must be a table",
                hint="give doc/default",
                path=file,
                key=f"{where}kwargs.{kname}",
            )
        _check_keys(kraw, _KWARG_KEYS, f"{where}kwargs.{kname}.", file)
        default = kraw.get("default", _NO_DEFAULT)
        kwargs.append(
            TemplateKwarg(
                name=kname,
                doc=kraw.get("doc", ""),
                default=None if default is _NO_DEFAULT else default,
                has_default=default is not _NO_DEFAULT,
            )
        )
    return tuple(kwargs)


def _load_variant(
    directory: Path,
    file: Path,
    family: str,
    vname: str,
    vraw: Any,
    family_controls: tuple[str, ...],
    family_stops: tuple[str, ...],
) -> Variant:
    where = f"variants.{vname}."
    if not isinstance(vraw, dict):
        raise ConfigError(
            f"{file}: key 'variants.{vname}' must be a table",
            hint="use [variants.NAME]",
            path=file,
            key=f"variants.{vname}",
        )
    _check_keys(vraw, _VARIANT_KEYS, where, file)
    if "template" not in vraw:
        raise ConfigError(
            f"{file}: missing key '{where}template'",
            hint="name the variant's .jinja file",
            path=file,
            key=where + "template",
        )
    template_path = directory / vraw["template"]
    if not template_path.is_file():
        raise ConfigError(
            f"{file}: key '{where}template' names {vraw['template']!r}, which does not exist in {directory}",
            hint="add the template file or fix the name",
            path=file,
            key=where + "template",
        )
    controls = _token_list(vraw.get("control_tokens", family_controls), where + "control_tokens", file)
    stops = _token_list(vraw.get("stop_tokens", family_stops), where + "stop_tokens", file)
    if not stops:
        raise ConfigError(
            f"{file}: key '{where}stop_tokens' is empty",
            hint="name the token that ends a turn",
            path=file,
            key=where + "stop_tokens",
        )
    for stop in stops:
        if stop not in controls:
            raise ConfigError(
                f"{file}: key '{where}stop_tokens' lists {stop!r}, which is not in its control_tokens",
                hint="a stop token must be one of the control tokens the template emits",
                path=file,
                key=where + "stop_tokens",
            )
    provenance = vraw.get("provenance", {})
    _check_keys(provenance, _PROVENANCE_KEYS, where + "provenance.", file)
    _check_syntax_once(read_template_file(template_path), template_path)
    return Variant(
        family=family,
        name=vname,
        template_path=template_path,
        description=vraw.get("description", ""),
        control_tokens=controls,
        stop_tokens=stops,
        kwargs=_load_kwargs(vraw.get("kwargs", {}), where, file),
        provenance=dict(provenance),
    )


def _check_syntax_once(source: str, path: Path) -> None:
    """`check_template_syntax`, remembered across runs for a text that parsed: every command loads every family,
    and parsing them all again each time is most of that load. The mark is keyed by the text and what its parse
    depends on (`parser_fingerprint`); a cache folder that cannot be written only means parsing again."""
    digest = hashlib.sha256(f"{parser_fingerprint()}\n{source}".encode()).hexdigest()
    mark = cache_file("parsed-templates", digest)
    if mark is not None and mark.exists():
        return
    check_template_syntax(source, path)
    if mark is not None:
        keep(mark, b"")


def load_family(directory: Path) -> Family:
    """Load and validate one family folder."""
    file = directory / CONFIG_FILE
    raw = _read_config(file)
    _check_keys(raw, _FAMILY_KEYS, "", file)
    for key in ("name", "default_variant", "base_tokenizer", "variants"):
        if key not in raw:
            raise ConfigError(
                f"{file}: missing key {key!r}", hint="see model_configs/README.md for the schema", path=file, key=key
            )
    if raw["name"] != directory.name:
        raise ConfigError(
            f"{file}: key 'name' is {raw['name']!r} but the folder is {directory.name!r}",
            hint="name the folder after the family",
            path=file,
            key="name",
        )
    family_controls = _token_list(raw.get("control_tokens", []), "control_tokens", file)
    family_stops = _token_list(raw.get("stop_tokens", []), "stop_tokens", file)
    variants = {
        vname: _load_variant(directory, file, raw["name"], vname, vraw, family_controls, family_stops)
        for vname, vraw in raw["variants"].items()
    }
    if raw["default_variant"] not in variants:
        raise ConfigError(
            f"{file}: key 'default_variant' names {raw['default_variant']!r}, which is not a variant",
            hint=f"variants: {', '.join(sorted(variants))}",
            path=file,
            key="default_variant",
        )
    return Family(
        name=raw["name"],
        description=raw.get("description", ""),
        directory=directory,
        default_variant=raw["default_variant"],
        base_tokenizer=raw["base_tokenizer"],
        template_writes_bos=raw.get("template_writes_bos", False),
        pad_tokens=_token_list(raw.get("pad_tokens", []), "pad_tokens", file),
        variants=variants,
    )


def _entry_point_roots() -> list[Path]:
    """Family folders other packages ship: each entry point of the group gives a folder (or a function that
    returns one)."""
    from importlib.metadata import entry_points

    roots = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = ep.load()
            roots.append(Path(value() if callable(value) else value))
        except Exception as err:  # a broken plugin is named, never skipped without a word
            raise ConfigError(
                f"the entry point {ep.name!r} ({ep.value}) of {ENTRY_POINT_GROUP} does not load: "
                f"{type(err).__name__}: {err}",
                hint="fix or uninstall the package that ships it",
            ) from None
    return roots


# Folders given for a run (`family_folders`, the CLI's --families): this process's state, never its environment.
_RUN_FOLDERS: list[tuple[Path, ...]] = []


@contextlib.contextmanager
def family_folders(folders: Iterable[str | Path]) -> Iterator[tuple[Path, ...]]:
    """Read families from `folders` too within the context, before those of HF_CHAT_TEMPLATES_FAMILIES: what the
    CLI's --families does for one command. Nothing outlives the context (os.environ is left as it is)."""
    added = tuple(Path(f) for f in folders)
    _RUN_FOLDERS.append(added)
    try:
        yield added
    finally:
        _RUN_FOLDERS.remove(added)


def family_roots() -> tuple[Path, ...]:
    """Where families are read from, in order: the bundled ones, the folders of `family_folders` (innermost
    first), the folders in HF_CHAT_TEMPLATES_FAMILIES (separated by the path separator), and the folders other
    packages ship through the entry-point group."""
    given = [root for folders in reversed(_RUN_FOLDERS) for root in folders]
    extra = [*given, *(Path(p) for p in os.environ.get(FAMILIES_ENV, "").split(os.pathsep) if p)]
    for root in extra:
        if not root.is_dir():
            raise ConfigError(
                f"{root}: no such folder (from {FAMILIES_ENV} or --families)",
                path=root,
                hint="point it at a folder that holds family folders (each with a family.toml)",
            )
    roots = [default_config_root(), *extra, *_entry_point_roots()]
    return tuple(dict.fromkeys(root.resolve() for root in roots))  # a folder named twice is read once


@lru_cache(maxsize=8)
def _load_all(roots: tuple[Path, ...]) -> dict[str, Family]:
    families: dict[str, Family] = {}
    for root in roots:
        for directory in sorted(p for p in root.iterdir() if p.is_dir() and (p / CONFIG_FILE).exists()):
            family = load_family(directory)
            if family.name in families:  # never one silently hiding another
                raise ConfigError(
                    f"two families are named {family.name!r}: {families[family.name].directory} and {directory}",
                    hint="rename one (its folder and its name key)",
                    path=directory / CONFIG_FILE,
                    key="name",
                )
            families[family.name] = family
    return dict(sorted(families.items()))


def list_families(root: Path | None = None) -> list[Family]:
    """Every family, sorted by name: the bundled ones and those of `family_roots` (or only those in `root`)."""
    return list(_load_all((root,) if root else family_roots()).values())


def get_family(name: str, root: Path | None = None) -> Family:
    """The family called `name`; an unknown name lists the families that exist and the closest match."""
    families = _load_all((root,) if root else family_roots())
    try:
        return families[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown family {name!r}; families: {', '.join(families)}" + closest_hint(name, families),
            hint="hf-chat-templates list",
        ) from None


def identify(template: str) -> tuple[Family, Variant] | None:
    """The bundled family and variant whose template is exactly `template` (by sha256), if any."""
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    for fam in list_families():
        for var in fam.variants.values():
            if var.sha256 == digest:
                return fam, var
    return None
