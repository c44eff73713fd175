"""How Ollama serves the published templates and the bundled families: by a Modelfile of the Jinja template's
translation (`export ollama`), or as a GGUF imported without one (the Go template Ollama picks for it).

    python scripts/ollama_report.py [TEMPLATE ...]

For each template (default: tests/data/templates/*/chat_template.jinja and model_configs/*/*.jinja):
- translation: translated, or refused with the construct and line; when translated, how many probes Ollama renders
  exactly as transformers does (of the probes Ollama can send and transformers renders), identical on every one or
  not;
- as a GGUF: the template Ollama would pick from its index (`ollama_named`; "default" for `{{ .Prompt }}` when none
  is within 100 edits), its distance, and how many of the same probes it renders identically (after the BOS
  Ollama's runner adds where the model.toml says add_bos).
Then the shares. Needs Go (the Ollama profile's renderer).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _variables(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """The special tokens a published template renders with (its model.toml) or a bundled variant's kwargs, and
    the BOS a GGUF of the model would have Ollama's runner add (its add_bos)."""
    from hf_chat_templates.families.registry import identify

    toml = path.parent / "model.toml"
    if toml.is_file():
        data = tomllib.loads(toml.read_text(encoding="utf-8"))
        found = {k: data[k] for k in ("bos_token", "eos_token", "pad_token") if data.get(k)}
        bos = str(data.get("bos_token") or "") if data.get("add_bos") else ""
        return {**found, **dict(data.get("kwargs") or {})}, bos
    family = identify(text)
    return (dict(family[1].kwarg_defaults) if family is not None else {}), ""


def _identical(template: str, variables: dict[str, Any], profile: Any) -> tuple[int, int, str]:
    """(probes Ollama renders as transformers does, probes compared, the first that differs) with the profile set."""
    from hf_chat_templates.conversations.probes import id_format_for
    from hf_chat_templates.conversations.suite import build_probes
    from hf_chat_templates.template.engines.base import RenderJob
    from hf_chat_templates.verification.context import CLOCKS
    from hf_chat_templates.verification.template_diff import TemplateSide, render_side

    probes = [p for p in build_probes(id_format_for(template)) if not p.continue_final_message]
    side = TemplateSide(Path("template"), "template", template, {k: str(v) for k, v in variables.items()})
    ours = [render_side(side, p, {}, clock=CLOCKS[0]) for p in probes]
    jobs = [RenderJob(p.message_list(), p.tool_list(), p.add_generation_prompt, dict(variables)) for p in probes]
    theirs = profile.render_all(template, jobs, clock=CLOCKS[0])
    same = compared = 0
    first = ""
    for probe, (text, _), other in zip(probes, ours, theirs, strict=True):
        if text is None or getattr(other, "input_refused", False):
            continue  # transformers does not render it, or Ollama cannot send it
        compared += 1
        if other.ok and other.text == text:
            same += 1
        elif not first:
            first = probe.id
    return same, compared, first


def main() -> None:
    from hf_chat_templates.template.engines.gotemplate import Untranslatable, translate
    from hf_chat_templates.template.engines.ollama_named import ollama_pick
    from hf_chat_templates.template.engines.registry import ollama_profile
    from hf_chat_templates.template.syntax import read_template

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("templates", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.templates or [
        *sorted((ROOT / "tests/data/templates").glob("*/chat_template.jinja")),
        *sorted((ROOT / "model_configs").glob("*/*.jinja")),
    ]
    profile = ollama_profile()
    if why := profile.unavailable() if profile.given is not None else None:
        sys.exit(why)
    started = time.perf_counter()
    translated = identical = picked = pick_identical = 0
    probes = {"translation": [0, 0], "pick": [0, 0]}  # probes identical, probes compared
    refused: dict[str, int] = {}
    for path in paths:
        text = read_template(path).text
        variables, bos = _variables(path, text)
        name = f"{path.parent.name}/{path.name}"
        try:
            translate(text, variables)
        except Untranslatable as err:
            refused[err.construct] = refused.get(err.construct, 0) + 1
            cell = f"refused: line {err.line}: {err.construct}"
        else:
            translated += 1
            profile.use_pick(None)
            profile.translating = True
            same, total, first = _identical(text, variables, profile)
            identical += same == total
            probes["translation"][0] += same
            probes["translation"][1] += total
            cell = f"translated, {same}/{total} identical" + (f" (first differs: {first})" if first else "")
        profile.translating = False
        pick = dataclasses.replace(ollama_pick(text), bos=bos)
        profile.use_pick(pick)
        same, total, first = _identical(text, variables, profile)
        profile.use_pick(None)
        picked += pick.name is not None
        pick_identical += same == total
        probes["pick"][0] += same
        probes["pick"][1] += total
        chosen = f"{pick.name} ({pick.distance} edits)" if pick.name else "default {{ .Prompt }}"
        print(f"{name:<40} {cell}; as a GGUF: {chosen}, {same}/{total} identical")
    n = len(paths)
    print(
        f"\n{n} templates: translated {translated}/{n} ({translated / n:.0%}), refused {n - translated} "
        f"({', '.join(f'{c} ×{k}' for c, k in sorted(refused.items()))}); identical on every probe "
        f"{identical}/{n} ({identical / n:.0%}; {identical}/{translated or 1} of those translated)\n"
        f"as a GGUF: Ollama picks one of its templates for {picked}/{n} ({picked / n:.0%}), the rest get "
        f"{{{{ .Prompt }}}}; identical on every probe {pick_identical}/{n} ({pick_identical / n:.0%})\n"
        + "; ".join(f"{k}: {a}/{b} probes identical ({a / (b or 1):.0%})" for k, (a, b) in probes.items())
        + f" ({time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
