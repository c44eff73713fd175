"""The README and docs/ stay in step with the package: every page is reachable from the README, every relative
link and anchor resolves, and every HF_CHAT_TEMPLATES_* variable the code reads is documented."""

from __future__ import annotations

import re
from pathlib import Path

from ..helpers import REPO_ROOT

DOCS = REPO_ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_links_every_docs_page() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in DOCS.glob("*.md") if f"](docs/{p.name})" not in readme]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in pages():
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_every_environment_variable_is_documented() -> None:
    read = set()
    for folder in ("hf_chat_templates", "tests", "scripts"):
        for source in (REPO_ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"HF_CHAT_TEMPLATES_[A-Z0-9_]*[A-Z0-9]", source.read_text(encoding="utf-8")))
    documented = (DOCS / "environment.md").read_text(encoding="utf-8")
    assert read, "no variable found: the search is wrong"
    missing = sorted(v for v in read if f"`{v}`" not in documented)
    assert not missing, f"read by the code, not in docs/environment.md: {missing}"
