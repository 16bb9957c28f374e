"""The manual stays a manual: its hand-written pages short, free of commit hashes and dated
measurements (those belong in docs/results/), its generated reference current, its links whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.cli.reference import pages
from node.kit import builtin_protocols

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs"
MANUAL = sorted([*DOCS.glob("*.md"), *(DOCS / "protocols").glob("*.md")])
COMMIT = re.compile(r"(?<![-\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![-\w])")
"""A commit-like hex word (not a Go pseudo-version's suffix, which follows a dash)."""
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_the_manual_has_the_pages_the_architecture_names():
    names = {p.relative_to(DOCS).as_posix() for p in MANUAL}
    assert {"quickstart.md", "first-protocol.md", "architecture.md", "experiments.md", "protocols/README.md"} <= names
    assert {f"protocols/{m}.md" for m in ("gossip", "static_gossip", "stan", "spidercast", "poldercast", "dps")} <= names


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_a_manual_page_is_short_and_holds_no_commit_or_dated_measurement(page):
    text = page.read_text()
    assert text.count("\n") <= 320, f"{page.name}: {text.count(chr(10))} lines; split it"
    assert not COMMIT.findall(text), f"{page.name}: commit-like words {COMMIT.findall(text)}: results go to docs/results/"
    assert not DATE.findall(text), f"{page.name}: dates {DATE.findall(text)}: results go to docs/results/"


def test_the_checks_above_catch_a_hash_and_a_date():
    assert COMMIT.findall("measured at 58b2991 on") == ["58b2991"] and DATE.findall("on 2026-11-29.")
    assert not COMMIT.findall("v0.0.0-20260906172039-d70b66ad97ac and 1000000")


def test_the_generated_reference_is_current():
    for name, text in pages(builtin_protocols()).items():
        assert (DOCS / "reference" / name).read_text() == text, f"docs/reference/{name} is stale: run `make docs`"


def test_relative_links_between_pages_resolve():
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#:\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.relative_to(DOCS)} links to {target}"
