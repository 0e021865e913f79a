"""The documentation stays true to the repository: the configuration reference is the schema's docstrings, every
relative link (and its #anchor) points at something that exists, and the README stays a short front door with its
two commands verbatim and nothing outside the repository."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted([README, ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
COMMANDS = (  # CI (.ci/run) and test_packaging read these two lines of the README
    'bash scripts/setup.sh && python train_optimized.py --config quickstart --test',
    'bash scripts/setup.sh test && python -m pytest -m "not slow" -q -n 2',
)
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _config_reference():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """The text without fenced code blocks, inline code and HTML comments: links there are not links."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text(encoding="utf-8")))


def relative_links(path: Path) -> list[tuple[str, Path, str]]:
    """(link as written, the file or folder it names, its #anchor or '') of every link that is not a URL."""
    out = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        out.append((target, (path.parent / file_part).resolve() if file_part else path, anchor))
    return out


def slugs(path: Path) -> set[str]:
    """The anchors GitHub makes for a Markdown file's headings: lowercase, punctuation dropped, spaces to hyphens,
    a repeated heading numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m[1].lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_configuration_reference_is_the_generators_output():
    expected = _config_reference().render()
    written = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert written == expected, (
        "docs/configuration.md is not what the config schema's docstrings give: run "
        "`python scripts/config_reference.py --write` (and commit the result)")


def test_configuration_reference_covers_every_section_and_key():
    import dataclasses

    from adaptive_ir.config import Config

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for f in dataclasses.fields(Config):
        if dataclasses.is_dataclass(f.default_factory):
            assert f"\n## {f.name}\n" in text
            for key in dataclasses.fields(f.default_factory):
                assert f"| `{f.name}.{key.name}` |" in text


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file(path):
    missing = [target for target, resolved, _ in relative_links(path) if not resolved.exists()]
    assert not missing, f"{path.relative_to(ROOT)}: links to nothing: {missing}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_anchor_names_a_heading(path):
    broken = [target for target, resolved, anchor in relative_links(path)
              if anchor and resolved.suffix == ".md" and resolved.is_file() and anchor not in slugs(resolved)]
    assert not broken, f"{path.relative_to(ROOT)}: no such heading: {broken}"


@pytest.mark.parametrize("path", [p for p in DOCS if p.name != "configuration.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_file_named_exists(path):
    # the package moved into subpackages once (adaptive_ir/trainer.py → adaptive_ir/training/trainer.py); a path
    # quoted in prose must follow. (configuration.md quotes the schema's docstrings: fixed there, then regenerated.)
    named = set(re.findall(r"\b((?:adaptive_ir|scripts|benchmarks|tests)/[\w/.-]*\w\.(?:py|sh|yaml|ipynb))\b",
                           path.read_text(encoding="utf-8")))
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"{path.relative_to(ROOT)} names files that do not exist: {missing}"


def test_links_are_found_and_checked():
    # the checks above are only as good as the link finder: it finds links, skips code and URLs
    readme = links(README)
    assert "docs/guide.md" in readme and "docs/configuration.md" in readme
    assert not any(target.startswith("http") for target, _, _ in relative_links(README))
    sample = "see [a](docs/a.md#x), `[b](no.md)`, [c](https://x.org), ![img](p.png)\n```\n[d](code.md)\n```\n"
    assert LINK.findall(_prose(sample)) == ["docs/a.md#x", "https://x.org"]


def test_readme_is_a_short_front_door_with_the_two_commands_verbatim():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: at most 200 (move the rest into docs/)"
    for command in COMMANDS:
        assert any(line.startswith(command) for line in lines), f"README.md lacks the command, verbatim: {command}"


def test_readme_links_stay_inside_the_repository():
    # users of the repository or of the wheel have no ../shared (nor anything else outside the checkout)
    text = README.read_text(encoding="utf-8")
    outside = [target for target, resolved, _ in relative_links(README)
               if ROOT not in (resolved, *resolved.parents)]
    assert not outside, f"README.md links outside the repository: {outside}"
    assert "../shared" not in text and "shared/DESIGN.md" not in text
