"""llama.cpp's engine (ggufdoctor's WebAssembly build) rendering in a process of its own, for
`llamacpp.LlamaCppEngine.start_all`: a JSON request on stdin, {"template": ..., "contexts": [...]}, and on stdout
a JSON list, {"text", "error", "extra"} of ggufdoctor's `RenderResult` by context.

Run by its path, so that only ggufdoctor and wasmtime load (not this package), and apart from the caller's process:
its renders run on another core while the caller's checks run, outside the address-space cap and the CPU timer a
guarded render sets for the whole process (`template.limits`).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    request = json.load(sys.stdin)
    from ggufdoctor.engines.llamacpp_engine import LlamaCppEngine

    engine = LlamaCppEngine()
    results = [engine.render(request["template"], context) for context in request["contexts"]]
    json.dump([{"text": r.text, "error": r.error, "extra": r.extra} for r in results], sys.stdout)
    sys.stdout.flush()
    # wasmtime's objects freed at interpreter teardown print errors: the process ends here, its output written
    os._exit(0)


if __name__ == "__main__":
    main()
