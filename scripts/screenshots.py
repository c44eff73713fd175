"""Screenshots of the `verify --html` report for a failing upstream seed and its corrected variant, taken in
headless Chromium (Debian package `chromium`), written to docs/.

    python scripts/screenshots.py --family gemma3-tools
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hf_chat_templates import TemplateChoice

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DOCS = Path(__file__).resolve().parent.parent / "docs"
# As root in a closed network: no sandbox, no GPU, and none of Chromium's background connections.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def screenshot(page: Path, png: Path, *, width: int, height: int, profile: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed: apt-get install chromium")
    subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="gemma3-tools")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()

    from hf_chat_templates import base_tokenizer, get_family, install
    from hf_chat_templates.verification.runner import verify_with_context
    from hf_chat_templates.view.report import verification_html

    family = get_family(args.family)
    DOCS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for variant in ("upstream", "corrected"):
            folder = tmp / variant
            install(TemplateChoice(family=family, variant=variant), base_tokenizer(family.base_tokenizer), folder)
            report, ctx = verify_with_context(folder, TemplateChoice(family=family.name, variant=variant))
            page = tmp / f"{variant}.html"
            page.write_text(
                verification_html([(report, ctx)], title=f"verify {family.name}/{variant}"), encoding="utf-8"
            )
            png = DOCS / f"report-{family.name}-{variant}.png"
            screenshot(page, png, width=args.width, height=args.height, profile=tmp / "chromium")
            print(f"{png}: {report.summary}")


if __name__ == "__main__":
    main()
