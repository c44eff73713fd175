"""What each command's `--help` ends with: the `HF_CHAT_TEMPLATES_*` variables that change what it does, and for
`verify` its check ids and exit codes. docs/environment.md describes every variable at length."""

from __future__ import annotations

from ..verification.checks import CHECK_ORDER, CHECK_SUMMARIES

# Every variable the package reads, in a few words (docs/environment.md has the defaults and more).
ENVIRONMENT = {
    "HF_CHAT_TEMPLATES_CACHE": "the cache folder (default ~/.cache/hf_chat_templates)",
    "HF_CHAT_TEMPLATES_FAMILIES": "more folders of families, separated by ':'",
    "HF_CHAT_TEMPLATES_MODEL_CONFIGS": "the folder of the bundled families",
    "HF_CHAT_TEMPLATES_RENDER_SECONDS": "CPU seconds one render may take (10)",
    "HF_CHAT_TEMPLATES_RENDER_MAX_CHARS": "characters one rendering may have (10000000)",
    "HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB": "extra memory one render may take (2048)",
    "HF_CHAT_TEMPLATES_TIKTOKEN": "0 keeps the tokenizer's own encoder, never tiktoken",
    "HF_CHAT_TEMPLATES_JS_DIR": "where @huggingface/jinja is installed (transformers.js engine)",
    "HF_CHAT_TEMPLATES_PROGRESS": "1 writes progress on stderr even when it is not a terminal",
    "HF_CHAT_TEMPLATES_DEBUG": "1 adds the traceback to an error",
}
_FAMILIES = ("HF_CHAT_TEMPLATES_FAMILIES", "HF_CHAT_TEMPLATES_MODEL_CONFIGS")
_RENDER = (
    "HF_CHAT_TEMPLATES_CACHE",
    "HF_CHAT_TEMPLATES_RENDER_SECONDS",
    "HF_CHAT_TEMPLATES_RENDER_MAX_CHARS",
    "HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB",
)
# The variables each command reads (HF_CHAT_TEMPLATES_DEBUG: every command).
COMMAND_ENVIRONMENT = {
    "list": _FAMILIES,
    "show": _FAMILIES,
    "base-tokenizer": ("HF_CHAT_TEMPLATES_CACHE",),
    "family init": _FAMILIES,
    "diff": (*_FAMILIES, *_RENDER),
    "port": (*_FAMILIES, *_RENDER, "HF_CHAT_TEMPLATES_JS_DIR"),
    "view": (*_FAMILIES, *_RENDER),
    "install": (*_FAMILIES, *_RENDER),
    "push": (*_FAMILIES, *_RENDER, "HF_CHAT_TEMPLATES_JS_DIR"),
    "prepare": (*_FAMILIES, *_RENDER, "HF_CHAT_TEMPLATES_TIKTOKEN", "HF_CHAT_TEMPLATES_PROGRESS"),
    "verify": (*_FAMILIES, *_RENDER, "HF_CHAT_TEMPLATES_JS_DIR", "HF_CHAT_TEMPLATES_PROGRESS"),
    "export ollama": (*_FAMILIES, *_RENDER),
}
EXIT_CODES = (
    ("0", "no error found"),
    ("1", "an error (--fail-on warning: a warning too), a failing default variant (--all),"),
    ("", "a difference (--against), records past --max-skipped (--conversations)"),
    ("2", "bad usage, input or environment"),
    ("3", "an internal error (a bug; HF_CHAT_TEMPLATES_DEBUG=1 shows the traceback)"),
    ("143", "SIGTERM, handled like Ctrl-C"),
)


def _block(title: str, rows: list[tuple[str, str]]) -> str:
    """A titled list click prints as it is (`\\b` keeps it from rewrapping the lines)."""
    width = max(len(name) for name, _ in rows)
    return "\b\n" + title + "\n" + "\n".join(f"  {name.ljust(width)}  {text}" for name, text in rows)


def environment_epilog(command: str) -> str:
    names = (*COMMAND_ENVIRONMENT[command], "HF_CHAT_TEMPLATES_DEBUG")
    return _block("Environment (docs/environment.md):", [(name, ENVIRONMENT[name]) for name in dict.fromkeys(names)])


def verify_epilog() -> str:
    checks = _block("Checks (--only ID,ID; docs/checks.md):", [(c, CHECK_SUMMARIES[c]) for c in CHECK_ORDER])
    codes = _block("Exit codes:", list(EXIT_CODES))
    return "\n\n".join((checks, codes, environment_epilog("verify")))
