"""The official renderers' ids of verify's probes in a process of its own (`references.begin`): a JSON request on
stdin ({"family", "date", "kwargs", "probes"}), and on stdout one JSON object by probe id: {"ids": [...]},
{"unsupported": why}, or {} where the renderer raised (the caller renders that probe itself, and reports it).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..conversations.probes import Probe
from .references import REFERENCES, Unsupported


def outcome(renderer: Any, probe: Probe, date: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ids": renderer(probe, date=date, kwargs=kwargs)}
    except Unsupported as why:
        return {"unsupported": str(why)}
    except Exception:  # raised again where the caller renders it
        return {}


def main() -> None:
    request = json.load(sys.stdin)
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
