"""A template with CRLF line endings is the template transformers reads: `--template FILE`, a folder's
`chat_template.jinja` and the `chat_template` key render and verify it as they do its LF copy, and `install` keeps
the file's own bytes where transformers reads them the same. Where a reader does see the carriage returns
(minijinja, which TGI gives the config key as it is), verify says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice, get_family, install, verify
from hf_chat_templates.families.source import choose_template
from hf_chat_templates.template.rendering import Renderer
from hf_chat_templates.template.syntax import line_endings, read_template, transformers_text
from hf_chat_templates.tokenizer.folder import read_folder

from ..helpers import run

# The ChatML-like baseline written over several lines, so its raw newlines reach the rendering. Its block tags
# trim the line break after them themselves (`-%}`), as TGI, which has no trim_blocks, needs.
TEMPLATE = (
    "{%- if tools -%}\n<|im_start|>tools\n{{ tools | tojson }}<|im_end|>\n{% endif -%}\n"
    "{%- for m in messages -%}\n"
    "<|im_start|>{{ m.role }}\n"
    "{{ m.content if m.content is string else (m.content | map(attribute='text') | join('') if m.content else '') }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} {{ c.function.arguments if "
    "c.function.arguments is string else c.function.arguments | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor -%}\n"
    "{%- if add_generation_prompt -%}\n<|im_start|>assistant\n{% endif -%}\n"
)
CRLF = TEMPLATE.replace("\n", "\r\n")
MESSAGES = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, friend"}]


def _results(folder: Path, choice: TemplateChoice | None = None) -> list[tuple[str, str, str]]:
    return [(c.id, c.status, c.message) for c in verify(folder, choice).checks]


def _with_template(source: Path, target: Path, *, file: str | None = None, key: str | None = None) -> Path:
    """A copy of the folder `source` whose template is `file` (chat_template.jinja) and/or `key` (the config key)."""
    shutil.copytree(source, target)
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.pop("chat_template", None)
    if key is not None:
        config["chat_template"] = key
    config_path.write_text(json.dumps(config), encoding="utf-8")
    if file is not None:
        (target / "chat_template.jinja").write_bytes(file.encode("utf-8"))
    return target


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    written = {}
    for name, text in (("lf", TEMPLATE), ("crlf", CRLF), ("cr", TEMPLATE.replace("\n", "\r"))):
        written[name] = tmp_path / f"{name}.jinja"
        written[name].write_bytes(text.encode("utf-8"))
    return written


def test_transformers_reads_a_crlf_chat_template_jinja_as_lf(
    good: Path, tmp_path: Path, files: dict[str, Path]
) -> None:
    from transformers import AutoTokenizer

    folder = _with_template(good, tmp_path / "tok", file=CRLF)
    assert AutoTokenizer.from_pretrained(str(folder)).chat_template == TEMPLATE  # open() in text mode
    assert read_folder(folder).chat_template_file == TEMPLATE  # and so do we
    for name in ("lf", "crlf", "cr"):
        template = read_template(files[name])
        assert template.text == TEMPLATE and template.written == files[name].read_bytes().decode()
    assert [line_endings(read_template(files[n]).written) for n in ("lf", "crlf", "cr")] == ["LF", "CRLF", "CR"]
    assert line_endings("a\r\nb\n") == "mixed" and transformers_text("a\r\nb\rc") == "a\nb\nc"


def test_jinja_renders_carriage_returns_as_newlines(good: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(good))
    lf, crlf = Renderer(tokenizer, TEMPLATE), Renderer(tokenizer, CRLF)
    for add in (False, True):
        assert lf.render(MESSAGES, add_generation_prompt=add) == crlf.render(MESSAGES, add_generation_prompt=add)
    assert "\r" not in (crlf.render(MESSAGES).text or "") and "\n" in (lf.render(MESSAGES).text or "")


def test_the_same_template_verifies_the_same_as_a_file_and_in_a_folder(
    good: Path, tmp_path: Path, files: dict[str, Path]
) -> None:
    expected = _results(good, TemplateChoice(template=files["lf"]))
    assert all(status in ("pass", "skip", "warn", "info") for _, status, _ in expected)
    assert _results(good, TemplateChoice(template=files["crlf"])) == expected
    assert _results(good, TemplateChoice(template=files["cr"])) == expected
    in_folder = _results(_with_template(good, tmp_path / "lf", file=TEMPLATE))
    assert _results(_with_template(good, tmp_path / "crlf", file=CRLF)) == in_folder
    # The folder's own file and a CRLF file beside an LF key: transformers and TGI read the same template
    assert _results(_with_template(good, tmp_path / "both", file=CRLF, key=TEMPLATE)) == in_folder


def test_a_crlf_config_key_renders_the_same_in_transformers_but_minijinja_keeps_the_carriage_returns(
    good: Path, tmp_path: Path
) -> None:
    lf = _results(_with_template(good, tmp_path / "lf", key=TEMPLATE))
    crlf = _results(_with_template(good, tmp_path / "crlf", key=CRLF))
    differing = [(a, b) for a, b in zip(lf, crlf) if a != b]
    assert [a[0] for a, _ in differing] == ["engine-parity"]  # every check on transformers' rendering agrees
    (_, (_, status, message)) = differing[0]
    assert status == "fail"
    assert "transformers <|im_start|>user⟨here⟩\\nHello" in message
    assert "minijinja <|im_start|>user⟨here⟩\\r\\nHello" in message
    assert "the template holds carriage returns (CRLF line endings)" in message


def test_a_key_that_differs_from_the_file_only_in_line_endings_is_named(good: Path, tmp_path: Path) -> None:
    results = dict(
        (check_id, message)
        for check_id, _, message in _results(_with_template(good, tmp_path / "tok", file=TEMPLATE, key=CRLF))
    )
    assert (
        "key 'chat_template' differ only in line endings: the key holds carriage returns"
        in results["template-sources-agree"]
    )


def test_install_keeps_the_files_line_endings_and_writes_the_key_with_lf(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, files: dict[str, Path]
) -> None:
    lf = install(TemplateChoice(template=files["lf"]), toy_tokenizer, tmp_path / "out-lf")
    crlf = install(TemplateChoice(template=files["crlf"]), toy_tokenizer, tmp_path / "out-crlf")
    assert crlf.plan.template_sha256 == lf.plan.template_sha256  # the template transformers reads
    assert (tmp_path / "out-crlf" / "chat_template.jinja").read_bytes() == files["crlf"].read_bytes()
    config = json.loads((tmp_path / "out-crlf" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == TEMPLATE  # TGI reads the key as it is: LF, as transformers reads the file
    for rel in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / "out-crlf" / rel).read_bytes() == (tmp_path / "out-lf" / rel).read_bytes()
    summary = next(f.summary for f in crlf.plan.files if f.path == "chat_template.jinja")
    assert summary == "crlf.jinja, its CRLF line endings kept (transformers reads LF)"
    assert _results(tmp_path / "out-crlf") == _results(tmp_path / "out-lf")
    # --format config writes the key alone, with LF
    code, _, err = run(
        capsys, "install", "--tokenizer", str(toy_tokenizer), "--output", str(tmp_path / "cfg"),
        "--template", str(files["crlf"]), "--format", "config",
    )  # fmt: skip
    assert code == 0, err
    assert not (tmp_path / "cfg" / "chat_template.jinja").exists()
    assert json.loads((tmp_path / "cfg" / "tokenizer_config.json").read_text())["chat_template"] == TEMPLATE


def test_a_crlf_copy_of_a_bundled_template_is_that_family(good: Path, tmp_path: Path) -> None:
    family = get_family("llama3.2-pythonic")
    variant = family.variant()
    copy = tmp_path / "copy.jinja"
    copy.write_bytes(variant.template_path.read_bytes().replace(b"\n", b"\r\n"))
    choice = choose_template(good, TemplateChoice(template=copy))
    assert choice.template == variant.template
    assert choice.identified(choice.template).variant == variant
