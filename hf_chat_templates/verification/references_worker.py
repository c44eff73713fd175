"""The official renderers' ids of verify's probes in a process of its own (`references.begin`): a JSON request on
stdin ({"family", "date", "kwargs", "probes"}), and on stdout one JSON object by probe id: {"ids": [...]},
{"unsupported": why}, or {} where the renderer raised (the caller renders that probe itself, and reports it).
For mistral-common (family "mistral") the request is {"family", "cases", "texts"}: the template's renderings, which
are tokenized here too, on mistral-common's vocabularies; the answer is `mistral_reference.compare`'s.

With a family as its argument it sets up that family's renderer (its imports, its tokenizer) before it reads the
request, so that one begun early (`json_worker.prestart`) is ready when the request comes; stdin closed with no
request ends it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..conversations.probes import Probe
from . import mistral_reference
from .references import MISTRAL, REFERENCES, Unsupported


def outcome(renderer: Any, probe: Probe, date: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ids": renderer(probe, date=date, kwargs=kwargs)}
    except Unsupported as why:
        return {"unsupported": str(why)}
    except Exception:  # raised again where the caller renders it
        return {}


# What sets a renderer up: a conversation every official renderer expresses.
WARM_UP = Probe("warm-up", ({"role": "user", "content": "Hello"},), None, True, False)


def main() -> None:
    if sys.argv[1:] and sys.argv[1] in REFERENCES:
        outcome(REFERENCES[sys.argv[1]][1], WARM_UP, "01 Jan 2026", {})
    elif sys.argv[1:] == [MISTRAL]:
        mistral_reference.warm_up()
    data = sys.stdin.read()
    if not data:  # the caller asked for nothing
        return
    request = json.loads(data)
    if request["family"] == MISTRAL:
        cases = [mistral_reference.Case(**fields) for fields in request["cases"]]
        json.dump(mistral_reference.compare(cases, request["texts"]), sys.stdout)
        return
    renderer = REFERENCES[request["family"]][1]
    found = {}
    for fields in request["probes"]:
        tools = fields["tools"]
        probe = Probe(
            fields["id"],
            tuple(fields["messages"]),
            tuple(tools) if tools is not None else None,
            fields["add_generation_prompt"],
            fields["continue_final_message"],
        )
        found[probe.id] = outcome(renderer, probe, request["date"], request["kwargs"])
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
