"""Which Go template Ollama renders an imported GGUF with: a port of Ollama's template detection.

Ollama does not run a GGUF's `tokenizer.chat_template`. `ollama create` from a GGUF without a Modelfile TEMPLATE
(`server/create.go` → `detectChatTemplate` in `server/model.go`) calls `template.Named(chat_template)`
(`template/template.go`): the Levenshtein distance, in runes, from the chat template to each Jinja template of
`template/index.json`, in the index's order, keeps the first of the smallest; under 100 edits its Go template
(`NAME.gotmpl`, CRLF read as LF) and its parameters (`NAME.json`: stop strings) are the model's, else the model
keeps Ollama's default template, `{{ .Prompt }}`.

The index, the Go templates and their parameters are Ollama's, stored unchanged under `ollama/templates/` with
Ollama's MIT license (`ollama/templates/README.md` names the commit they were read at).

>>> pick = ollama_pick(gguf.chat_template)          # doctest: +SKIP
>>> pick.name, pick.distance                          # doctest: +SKIP
('chatml', 0)
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "ollama" / "templates"
LIMIT = 100  # Named: `if score < 100`
DEFAULT_TEMPLATE = "{{ .Prompt }}"  # template.DefaultTemplate: what a model without a template layer renders


@dataclass(frozen=True)
class OllamaPick:
    """What Ollama renders a GGUF with: `name` (None: no template of its own within LIMIT edits, so the default
    `{{ .Prompt }}`), the Go `template`, the `stops` of its parameters (None: it has none), and `distance`, the
    edits from the GGUF's chat template to the index entry that won (None when none is within LIMIT). `bos`: the
    BOS token text Ollama's runner puts before the rendering when the GGUF's tokenizer.ggml.add_bos_token is true
    (the template's text then starts with it as the model sees it; "" when it adds none)."""

    name: str | None
    template: str
    stops: tuple[str, ...] | None
    distance: int | None
    bos: str = ""

    def says(self) -> str:
        """The sentence a finding names it with."""
        if self.name is None:
            return (
                f"Ollama would render this GGUF with its default template `{DEFAULT_TEMPLATE}`: none of its own is "
                f"within {LIMIT} edits of the GGUF's chat_template"
            )
        edits = "the same text as" if self.distance == 0 else f"{self.distance} edit(s) from"
        return (
            f"Ollama would render this GGUF with its `{self.name}` template (its index holds a Jinja template "
            f"{edits} the GGUF's chat_template)"
        )


@functools.cache
def index() -> tuple[tuple[str, str], ...]:
    """(name, Jinja template) of Ollama's index.json, in its order."""
    entries = json.loads((TEMPLATES / "index.json").read_text(encoding="utf-8"))
    return tuple((str(e["name"]), str(e["template"])) for e in entries)


@functools.cache
def go_template(name: str) -> tuple[str, tuple[str, ...] | None]:
    """The Go template Ollama ships as `name` (CRLF read as LF, as Ollama reads it) and its parameters' stops."""
    text = (TEMPLATES / f"{name}.gotmpl").read_bytes().replace(b"\r\n", b"\n").decode("utf-8")
    params = TEMPLATES / f"{name}.json"
    stops = None
    if params.is_file():
        stops = tuple(json.loads(params.read_text(encoding="utf-8")).get("stop") or ())
    return text, stops


def distance_within(a: str, b: str, limit: int) -> int | None:
    """The Levenshtein distance between `a` and `b` (in code points, as Go's levenshtein counts runes) when it is
    at most `limit`, else None: only the band of `limit` cells either side of the diagonal is computed."""
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end = 0
    while end < len(a) - start and end < len(b) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    a, b = a[start : len(a) - end], b[start : len(b) - end]
    if len(a) > len(b):
        a, b = b, a
    n, m = len(a), len(b)
    if m - n > limit:
        return None
    over = limit + 1
    previous = [j if j <= limit else over for j in range(m + 1)]
    for i in range(1, n + 1):
        low, high = max(1, i - limit), min(m, i + limit)
        current = [over] * (m + 1)
        current[0] = i if i <= limit else over
        char = a[i - 1]
        for j in range(low, high + 1):
            value = previous[j - 1] + (char != b[j - 1])
            value = min(value, previous[j] + 1, current[j - 1] + 1, over)
            current[j] = value
        if min(current[low - 1 : high + 1]) > limit:
            return None
        previous = current
    return previous[m] if previous[m] <= limit else None


def ollama_pick(chat_template: str | None) -> OllamaPick:
    """The template Ollama picks for a GGUF whose `tokenizer.chat_template` is `chat_template` (None or "": it
    picks none)."""
    best: tuple[str, int] | None = None
    for name, jinja in index() if chat_template else ():
        limit = LIMIT - 1 if best is None else best[1] - 1  # strictly smaller, as Named keeps the first
        if limit < 0:
            break
        found = distance_within(chat_template or "", jinja, limit)
        if found is not None:
            best = (name, found)
    if best is None:
        return OllamaPick(None, DEFAULT_TEMPLATE, None, None)
    text, stops = go_template(best[0])
    return OllamaPick(best[0], text, stops, best[1])
