"""Reading and writing the files of a tokenizer folder. No other module touches them.

Reading parses the JSON files a tokenizer folder holds and reports a corrupt one by file, line and column.
Writing never edits a folder in place: `write_folder` stages the new folder through `outputs.staged_folder`,
checks it, and only then renames it into place; an output that is replaced (only with `force`) is kept beside it.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from .. import _compat
from ..errors import TokenizerFolderError
from ..outputs import is_staging, staged_folder
from ..template.syntax import transformers_text
from .cache_folder import cache_file, keep, read_kept
from .vocab import Vocabulary

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
GENERATION_CONFIG = "generation_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
# Files that make up a tokenizer (what is fetched from a Hub repo; later, what `push` may upload).
TOKENIZER_FILE_PATTERNS = (
    TOKENIZER_JSON,
    TOKENIZER_CONFIG,
    SPECIAL_TOKENS_MAP,
    GENERATION_CONFIG,
    CHAT_TEMPLATE_FILE,
    f"{CHAT_TEMPLATE_DIR}/*.jinja",
    "added_tokens.json",
    "tokenizer.model",
    "tekken.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
)
SLOW_VOCAB_FILES = ("tokenizer.model", "spiece.model", "vocab.json", "vocab.txt", "tekken.json")
_SKIP_DIRS = {".git", ".cache", "__pycache__"}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dump_json(obj: Any) -> bytes:
    """The one JSON layout this package writes: 2-space indent, UTF-8, trailing newline."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _parse_json(path: Path, data: bytes, *, want_object: bool = True) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TokenizerFolderError(
            f"{path}: not UTF-8 (byte {err.start})", hint="restore the file from its source", path=path
        ) from None
    # A tokenizer.json holds hundreds of thousands of lists and dicts, and none of them can form a cycle: the
    # collector, were it to run while they are made, would walk them over and over for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise TokenizerFolderError(
            f"{path}, line {err.lineno}, column {err.colno}: invalid JSON: {err.msg}",
            hint="restore the file from its source, or fix it by hand",
            path=path,
            line=err.lineno,
        ) from None
    finally:
        if collecting:
            gc.enable()
    if want_object and not isinstance(obj, dict):
        raise TokenizerFolderError(
            f"{path}: expected a JSON object at the top level, found {type(obj).__name__}",
            hint="restore the file from its source",
        )
    return obj


@dataclass(frozen=True)
class TokenizerFolder:
    """What a tokenizer folder holds, parsed. `files` lists every regular file, relative, sorted. `added_tokens`:
    tokenizer.json's added tokens (None without the file); the whole file is `tokenizer_json`. Two folders compare
    equal when their files' names, their configs, templates and added tokens are equal: the rest of tokenizer.json
    (the vocabulary, the merges) takes no part."""

    path: Path
    files: tuple[str, ...]
    tokenizer_config: dict[str, Any]
    special_tokens_map: dict[str, Any] | None
    generation_config: dict[str, Any] | None
    chat_template_file: str | None  # the .jinja files as transformers reads them: CRLF becomes LF
    additional_templates: dict[str, str] = field(default_factory=dict)
    added_tokens: list[dict[str, Any]] | None = None
    parsed_tokenizer_json: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def tokenizer_json(self) -> dict[str, Any] | None:
        """tokenizer.json, parsed and checked. `read_folder` leaves a file it checked in an earlier run unparsed
        (it reads only the added tokens it kept then), so that file is parsed, and checked again, when first asked
        for here."""
        if self.parsed_tokenizer_json is not None or TOKENIZER_JSON not in self.files:
            return self.parsed_tokenizer_json
        path = self.path / TOKENIZER_JSON
        try:
            data = path.read_bytes()
        except OSError as err:
            raise TokenizerFolderError(
                f"{path}: could not be read again ({err.strerror or err})",
                hint="the folder changed while it was in use: leave it as it is and run the command again",
                path=path,
            ) from None
        return _checked_tokenizer_json(path, data)

    def read_bytes(self, relpath: str) -> bytes:
        return (self.path / relpath).read_bytes()

    def config_templates(self) -> dict[str, str]:
        """The `chat_template` key of tokenizer_config.json by name: a string is the default, a list of
        {name, template} entries names each. Entries that are not such objects with two strings are left out; of
        two entries with one name, the first counts."""
        key = self.tokenizer_config.get("chat_template")
        if isinstance(key, str):
            return {"default": key}
        found: dict[str, str] = {}
        for entry in key if isinstance(key, list) else []:
            if not isinstance(entry, dict):
                continue
            name, text = entry.get("name"), entry.get("template")
            if isinstance(name, str) and isinstance(text, str):
                found.setdefault(name, text)
        return found

    def loaded_templates(self) -> tuple[str | None, str | None] | None:
        """(default, tool_use) as the tokenizer holds them once loaded, read without loading it: the template files
        when there are any (transformers then sets the config key aside), else the config key; None when the key
        is neither a string nor a list of {name, template} entries (the tokenizer is asked then)."""
        if self.chat_template_file is not None or self.additional_templates:
            return self.chat_template_file, self.additional_templates.get("tool_use")
        key = self.tokenizer_config.get("chat_template")
        if key is not None and not isinstance(key, (str, list)):
            return None
        templates = self.config_templates()
        return templates.get("default"), templates.get("tool_use")

    def named_template(self, name: str) -> str | None:
        """A template by name, as transformers loads it: `chat_template.jinja` and `additional_chat_templates/`
        first, then the config key."""
        if name == "default" and self.chat_template_file is not None:
            return self.chat_template_file
        if name in self.additional_templates:
            return self.additional_templates[name]
        return self.config_templates().get(name)


def _link_roots(root: Path) -> tuple[Path, ...]:
    """Where a symlink in `root` may point: inside it, or, for a Hub cache snapshot, into its repo's blobs."""
    resolved = root.resolve()
    roots = [resolved]
    if resolved.parent.name == "snapshots":
        roots.append(resolved.parent.parent / "blobs")
    return tuple(roots)


def _outside(link: Path, allowed: tuple[Path, ...]) -> TokenizerFolderError | None:
    target = link.resolve()
    if any(target.is_relative_to(r) for r in allowed):
        return None
    # A link out of the folder would copy (and later upload) a file the user never meant to share.
    return TokenizerFolderError(
        f"{link}: a symlink to {target}, outside the folder",
        hint="replace the link with the file or folder itself, or remove it",
        path=link,
    )


def _walk(root: Path, here: Path, allowed: tuple[Path, ...], seen: tuple[Path, ...], found: list[str]) -> None:
    """Every regular file under `here`, relative to `root`. A symlinked folder inside the folder is followed (its
    files are listed under the link's path, as a loader reads them); one that leads out of it, or back into a
    folder it is in, is refused: never a file left out without a word."""
    try:
        entries = sorted(os.scandir(here), key=lambda e: e.name)
    except OSError as err:
        raise TokenizerFolderError(
            f"{here}: cannot read the folder ({err.strerror or err})", hint="check its permissions", path=here
        ) from None
    for entry in entries:
        full = Path(entry.path)
        if entry.is_dir() and (entry.name in _SKIP_DIRS or is_staging(entry.name)):
            continue
        if entry.is_symlink() and (refused := _outside(full, allowed)) is not None:
            raise refused
        if entry.is_dir():
            real = full.resolve()
            if real in seen:
                raise TokenizerFolderError(
                    f"{full}: a symlink to {real}, a folder it is in (a loop)",
                    hint="replace the link with the folder itself, or remove it",
                    path=full,
                )
            _walk(root, full, allowed, (*seen, real), found)
        elif entry.is_file():  # follows symlinks: Hub cache snapshots are links to blobs
            found.append(full.relative_to(root).as_posix())


def _list_files(root: Path) -> tuple[str, ...]:
    found: list[str] = []
    _walk(root, root, _link_roots(root), (root.resolve(),), found)
    return tuple(sorted(found))


def check_links(path: Path) -> None:
    """Refuse a local tokenizer folder with a symlink that leaves it (a file or folder), before a loader reads
    through it; a path that is not a folder is left to the reader."""
    if Path(path).is_dir():
        _list_files(Path(path))


def read_folder(path: str | Path) -> TokenizerFolder:
    """Parse a local tokenizer folder, or raise TokenizerFolderError saying which file is wrong and how."""
    root = Path(path)
    if not root.exists():
        raise TokenizerFolderError(
            f"{root}: no such folder", hint="pass a tokenizer folder, or a Hub repo id such as org/name"
        )
    if not root.is_dir():
        raise TokenizerFolderError(f"{root}: not a folder", hint="pass the folder that holds tokenizer.json")
    files = _list_files(root)

    def load(name: str) -> dict[str, Any] | None:
        return _parse_json(root / name, (root / name).read_bytes()) if name in files else None

    if TOKENIZER_JSON not in files and not any(name in files for name in SLOW_VOCAB_FILES):
        raise TokenizerFolderError(
            f"{root}: no tokenizer here (no {TOKENIZER_JSON} and no {', '.join(SLOW_VOCAB_FILES)})",
            hint="pass the folder that holds the tokenizer files (tokenizer.json, or a slow tokenizer's vocabulary)",
            path=root,
            parameter="tokenizer",
        )
    config, special_map = load(TOKENIZER_CONFIG) or {}, load(SPECIAL_TOKENS_MAP)
    for name, doc in ((TOKENIZER_CONFIG, config), (SPECIAL_TOKENS_MAP, special_map or {})):
        _check_special_tokens(root / name, doc)
    added, parsed = _read_tokenizer_json(root / TOKENIZER_JSON) if TOKENIZER_JSON in files else (None, None)
    additional = {}
    for rel in files:
        if rel.startswith(CHAT_TEMPLATE_DIR + "/") and rel.endswith(".jinja"):
            additional[rel[len(CHAT_TEMPLATE_DIR) + 1 : -len(".jinja")]] = _read_text(root / rel)
    return TokenizerFolder(
        path=root,
        files=files,
        tokenizer_config=config,
        special_tokens_map=special_map,
        generation_config=load(GENERATION_CONFIG),
        chat_template_file=_read_text(root / CHAT_TEMPLATE_FILE) if CHAT_TEMPLATE_FILE in files else None,
        additional_templates=additional,
        added_tokens=added,
        parsed_tokenizer_json=parsed,
    )


def _checked_tokenizer_json(path: Path, data: bytes) -> dict[str, Any]:
    """tokenizer.json parsed, with a model object and added tokens that agree with its vocabulary, or
    TokenizerFolderError saying what is wrong."""
    tokenizer_json: dict[str, Any] = _parse_json(path, data)
    if not isinstance(tokenizer_json.get("model"), dict):
        raise TokenizerFolderError(
            f"{path}: key 'model' is missing or not an object",
            hint="restore the file; it does not look like a tokenizers file",
        )
    if not isinstance(tokenizer_json.get("added_tokens", []), list):
        raise TokenizerFolderError(f"{path}: key 'added_tokens' is not a list", hint="restore the file")
    Vocabulary(tokenizer_json, str(path))  # duplicate, mismatched or renumbered added tokens
    return tokenizer_json


@lru_cache(maxsize=1)
def _checker_fingerprint() -> str:
    """What checking a tokenizer.json depends on besides its bytes: the code of this module and the vocabulary's."""
    return hashlib.sha256(Path(__file__).read_bytes() + Path(__file__).with_name("vocab.py").read_bytes()).hexdigest()


def _read_tokenizer_json(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(tokenizer.json's added tokens, the file parsed), or TokenizerFolderError. A file checked in an earlier run
    (the same bytes, the same checking code) is not parsed again: its added tokens are read from the record kept
    in the cache folder then, and the file is None. The file is the largest a folder holds (Llama 3's: 9 MB,
    0.2 s to parse), and most commands need only its added tokens. A record that cannot be found, read or
    trusted, or a cache folder that cannot be named, means the file is parsed and checked as if for the first
    time."""
    data = path.read_bytes()
    record = _record_path(data)
    added = _recorded_added_tokens(record) if record is not None else None
    if added is not None:
        return added, None
    parsed = _checked_tokenizer_json(path, data)
    added = parsed.get("added_tokens", [])
    if record is not None:
        keep(record, json.dumps({"added_tokens": added}).encode())  # escaped: a lone surrogate too
    return added, parsed


def _record_path(data: bytes) -> Path | None:
    """Where the record of a tokenizer.json with these bytes is kept, or None when that cannot be told (the
    checking code unreadable, no home folder to hold the cache)."""
    try:
        key = hashlib.sha256(_checker_fingerprint().encode() + data).hexdigest()
    except OSError:
        return None
    return cache_file("checked-tokenizers", f"{key}.json")


def _recorded_added_tokens(record: Path) -> list[dict[str, Any]] | None:
    """The added tokens a record keeps, when it holds them in the shape tokenizer.json gives them (a list of
    objects, each with an int id and a str content), else None: a damaged record is not trusted."""
    try:
        added = json.loads(read_kept(record) or b"")["added_tokens"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(added, list) or not all(
        isinstance(t, dict) and type(t.get("id")) is int and isinstance(t.get("content"), str) for t in added
    ):
        return None
    return added


def _read_text(path: Path) -> str:
    """A template file of the folder as transformers reads it: `open(path, encoding="utf-8").read()`, whose
    universal newlines turn CRLF and a lone CR into LF."""
    data = path.read_bytes()
    try:
        return transformers_text(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise TokenizerFolderError(f"{path}: not UTF-8 (byte {err.start})", hint="save it as UTF-8") from None


@dataclass(frozen=True)
class StagedFile:
    """A file of the folder to write: copied from `source` or written from `content`."""

    path: str
    content: bytes | None = field(default=None, repr=False)
    source: Path | None = None

    def data(self) -> bytes:
        if self.content is not None:
            return self.content
        assert self.source is not None
        return self.source.read_bytes()


def folder_matches(output: Path, files: Iterable[StagedFile]) -> bool:
    """True when `output` already holds exactly these files with exactly these bytes."""
    files = list(files)
    if not output.is_dir() or set(_list_files(output)) != {f.path for f in files}:
        return False
    return all((output / f.path).read_bytes() == f.data() for f in files)


def write_folder(
    output: Path,
    files: Iterable[StagedFile],
    *,
    force: bool,
    check: Callable[[Path], None] | None = None,
) -> Path | None:
    """Write `files` as the folder `output`, atomically. Returns where a replaced output was moved, if any.

    The folder is staged as a hidden sibling, `check(staging)` runs on it, and only then is it renamed into place.
    """
    with staged_folder(Path(output), force=force) as staging:
        for item in files:
            target = staging.path / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if item.content is not None:
                target.write_bytes(item.content)
            else:
                assert item.source is not None
                shutil.copyfile(item.source, target)
        if check is not None:
            check(staging.path)
    return staging.replaced_to


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _check_special_tokens(path: Path, doc: dict[str, Any]) -> None:
    """A special token key holds a token's text, an AddedToken's fields ({"content": ...}) or null; transformers
    fails on anything else (an id, a list) with an error that names neither the file nor the key."""
    for key in SPECIAL_TOKEN_KEYS:
        value = doc.get(key)
        if value is None or isinstance(value, str):
            continue
        if isinstance(value, dict) and isinstance(value.get("content"), str):
            continue
        raise TokenizerFolderError(
            f"{path}: key {key!r} is {json.dumps(value)[:80]}, not a token's text",
            hint=f'write the token itself, e.g. "{key}": "</s>" (an id belongs in generation_config.json)',
            path=path,
            key=key,
        )


def copy_tree_atomic(source: Path, output: Path, *, force: bool, skip: tuple[str, ...] = ()) -> Path | None:
    """Copy every file of `source` into a new folder `output`, atomically."""
    files = [StagedFile(rel, source=source / rel) for rel in _list_files(source) if rel not in skip]
    return write_folder(output, files, force=force)


def added_tokens_kwargs(files: Any) -> dict[str, Any]:
    """transformers' `added_tokens_decoder` argument, from the tokenizer.json read by `read_folder`, where
    transformers would read that file again to find it (no `added_tokens_decoder` in tokenizer_config.json, and no
    special_tokens_map.json or added_tokens.json to merge): the same tokens, one parse fewer."""
    if (
        files is None
        or files.added_tokens is None
        or "added_tokens_decoder" in files.tokenizer_config
        or any(name in files.files for name in ("special_tokens_map.json", "added_tokens.json"))
    ):
        return {}
    from tokenizers import AddedToken

    return {
        "added_tokens_decoder": {
            int(t["id"]): AddedToken(**{k: v for k, v in t.items() if k != "id"}) for t in files.added_tokens
        }
    }


# tokenizer_config.json's classes that AutoTokenizer loads as TokenizersBackend itself, when nothing else in the
# folder can make it pick another: no config.json (a model type maps to its own class) and no auto_map (remote code).
PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(path: str | Path, files: TokenizerFolder | None) -> Any:
    """The folder's tokenizer as `AutoTokenizer.from_pretrained` loads it, with `added_tokens_kwargs(files)`.

    A folder read by `read_folder` whose tokenizer_config.json names a plain class (`PLAIN_CLASSES`) is loaded
    with TokenizersBackend directly, the class AutoTokenizer ends with for it: the same tokenizer, without
    importing AutoTokenizer's tables of every model type (0.4 s). Any other folder, or `files` None (a source not
    read here), goes through AutoTokenizer."""
    kwargs = added_tokens_kwargs(files)
    if (
        files is not None
        and files.added_tokens is not None
        and files.tokenizer_config.get("tokenizer_class") in PLAIN_CLASSES
        and "auto_map" not in files.tokenizer_config
        and "config.json" not in files.files
    ):
        return _compat.load_plain_tokenizer(str(path), **kwargs)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), **kwargs)
