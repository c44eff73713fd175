"""llama.cpp's engine (ggufdoctor's WebAssembly build) rendering in a process of its own, for
`llamacpp.LlamaCppEngine.start_all`: a JSON request on stdin, {"template": ..., "contexts": [...]}, and on stdout
{"engine": {"available", "reason", "version", "commit", "pinned_now"}, "results": [...]}: what the engine is, and
{"text", "error", "extra"} of ggufdoctor's `RenderResult` by context.

Run by its path, so that only ggufdoctor and wasmtime load (not this package), and apart from the caller's process:
its renders run on another core while the caller's checks run, outside the address-space cap and the CPU timer a
guarded render sets for the whole process (`template.limits`). It loads the engine before it reads its request,
so that one begun early (`json_worker.prestart`) is ready when the request comes; stdin closed with no request
ends it.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    from ggufdoctor.engines.jinja2_engine import PINNED_NOW
    from ggufdoctor.engines.llamacpp_engine import LlamaCppEngine

    engine = LlamaCppEngine()
    facts = {
        "available": engine.available,
        "reason": engine.unavailable_reason,
        "version": engine.version,
        "commit": engine.commit,
        "pinned_now": PINNED_NOW.isoformat(),
    }
    data = sys.stdin.read()
    if not data:  # the caller asked for nothing
        os._exit(0)
    request = json.loads(data)
    # an engine that cannot run here answers each render with why (`engine:unavailable: ...`), as it would there
    results = [engine.render(request["template"], context) for context in request["contexts"]]
    json.dump(
        {"engine": facts, "results": [{"text": r.text, "error": r.error, "extra": r.extra} for r in results]},
        sys.stdout,
    )
    sys.stdout.flush()
    # wasmtime's objects freed at interpreter teardown print errors: the process ends here, its output written
    os._exit(0)


if __name__ == "__main__":
    main()
