"""The book in a real browser: a small book built from two notebooks this test run executed, read by headless Chromium.

``make test`` runs this file in a phase of its own after every notebook has run (``course_tools.testrun``), and a
plain ``pytest`` moves it to the end (the top-level ``conftest.py``): it reads the executed copies nbval left in
``build/test-notebooks/`` and executes nothing itself. Without them (this file run alone) it skips, except under CI,
where their absence is a fault of the test run. Without a headless Chromium it skips and says how to install one
(``.ci/run`` installs Debian's ``chromium-headless-shell`` and a CJK font).
"""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from course_tools import book
from course_tools.browser import Browser, find_chromium
from course_utils.paths import repo_root

CHAPTERS = ("00", "04")
"""the two chapters of the small book: 00 has the course map, the pipeline figure and glossary tables, 04 formulas
and figures; both are quick, and nbval runs them anyway"""
BUILD_BUDGET_S = 60


@pytest.fixture(scope="module")
def site():
    executed = repo_root() / book.EXECUTED_BY_TESTS
    missing = [nb.filename for nb in book.NOTEBOOKS if nb.number in CHAPTERS
               and not (executed / nb.filename).is_file()]
    if missing:
        reason = (f"no executed copy of {missing} in {executed}: this test reads what the notebooks of the same "
                  f"test run left there (make test runs them first)")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    if find_chromium() is None:
        pytest.skip("no headless Chromium: apt-get install chromium-headless-shell fonts-wqy-microhei "
                    "(.ci/run installs them)")
    out = repo_root() / "build" / "test-book"
    t0 = time.time()
    index = book.build(executed, out, list(CHAPTERS), src_dir=out.parent / "test-book-src")
    seconds = time.time() - t0
    assert seconds < BUILD_BUDGET_S, f"a two-chapter book took {seconds:.0f} s to build"
    return out, index


def _pages(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*.html"))


def _internal_target(link: str, page: Path) -> tuple[Path, str] | None:
    """``(file, fragment)`` of a link into the site (file://), None for an external one."""
    parts = urlsplit(link)
    if parts.scheme != "file":
        return None
    return Path(unquote(parts.path)), parts.fragment


@pytest.fixture(scope="module")
def pages(site):
    out, _ = site
    reports, ids = {}, {}
    with Browser() as browser:
        for page in _pages(out):
            reports[page.name] = browser.visit(page.as_uri())
            ids[page.name] = set(browser.evaluate(
                "Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.name)"))
    return reports, ids


def test_every_page_loads_without_errors(pages, site):
    reports, _ = pages
    out, _ = site
    assert {"index.html", "glossary.html", "messages.html", "00_setup_and_map.html",
            "04_rl_foundations.html", "search.html"} <= set(reports)
    for name, report in reports.items():
        assert not report.errors, f"{name}: console errors {report.errors}"
        assert not report.failed_requests, f"{name}: failed requests {report.failed_requests}"
        assert not report.raw_tables, f"{name}: Markdown shown as text, not rendered: {report.raw_tables}"


def test_every_figure_loads(pages):
    reports, _ = pages
    assert any(r.images for r in reports.values())
    assert reports["index.html"].images, "the front page has no cover figure"
    assert len(reports["04_rl_foundations.html"].images) >= 2, "04's figures are missing"
    for name, report in reports.items():
        broken = [i["src"] for i in report.images if not i["loaded"]]
        assert not broken, f"{name}: images that did not load: {broken}"


def test_every_internal_link_resolves(pages, site):
    reports, ids = pages
    out, _ = site
    checked = 0
    for name, report in reports.items():
        for link in report.links:
            target = _internal_target(link, out / name)
            if target is None:
                continue
            path, fragment = target
            assert path.exists(), f"{name}: link to a missing file {link}"
            if fragment and path.suffix == ".html" and path.parent == out and path.name in ids:
                assert fragment in ids[path.name], f"{name}: link to a missing anchor {link}"
            checked += 1
    assert checked > 20, f"only {checked} internal links found"
    chapter_links = {Path(urlsplit(link).path).name for link in reports["index.html"].links}
    assert {"00_setup_and_map.html", "04_rl_foundations.html", "glossary.html"} <= chapter_links


def test_math_is_typeset(pages):
    reports, _ = pages
    chapter = reports["04_rl_foundations.html"]
    assert chapter.math >= 5, f"MathJax typeset {chapter.math} formulas on 04's page"
    assert all(r.math_errors == 0 for r in reports.values())


def test_chinese_terms_render_as_glyphs(site):
    out, _ = site
    cjk_fonts = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout
    families = {f.strip() for line in cjk_fonts.splitlines() for f in line.split(",") if f.strip()}
    if not families:
        pytest.skip("no font with Chinese glyphs on this machine (apt-get install fonts-wqy-microhei)")
    with Browser() as browser:
        browser.visit((out / "glossary.html").as_uri())
        fonts = browser.fonts_for("table tbody tr td:nth-child(2)")   # the 中文 column
    assert fonts, "the glossary has no Chinese column"
    drawn = {f["familyName"] for f in fonts if f.get("glyphCount", 0) > 0}
    assert drawn & families, f"the Chinese terms were drawn with {drawn}, none of which has Chinese glyphs"


def test_search_finds_a_term(site):
    out, _ = site
    with Browser() as browser:
        report = browser.visit((out / "search.html").as_uri() + "?q=importance", settle_s=15)
        deadline = time.time() + 10
        hits = 0
        while time.time() < deadline and not hits:
            hits = browser.evaluate("document.querySelectorAll('#search-results li').length")
            time.sleep(0.3)
    assert not report.errors, report.errors
    assert hits > 0, "the search box found nothing for 'importance' (04 teaches importance sampling)"


def test_chapters_open_with_a_run_box_and_no_frozen_bars(site):
    out, _ = site
    text = (out / "04_rl_foundations.html").read_text(encoding="utf-8")
    assert "Run it yourself" in text and "04_rl_foundations.ipynb" in text
    assert "0%|" not in text, "a progress bar frozen at 0% is on the page"
    assert "Opened on a hosted notebook service" not in text, "the install cell is on the page: the lesson comes first"


def test_the_site_is_served_by_http_server(site):
    out, _ = site
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with Browser() as browser:
            for page in ("index.html", "04_rl_foundations.html"):
                report = browser.visit(f"http://127.0.0.1:{server.server_address[1]}/{page}")
                assert not report.errors and not report.failed_requests, (page, report.errors, report.failed_requests)
                assert all(i["loaded"] for i in report.images)
    finally:
        server.shutdown()
