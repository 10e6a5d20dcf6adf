"""The docs site in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

It serves the built site on 127.0.0.1, searches for a rule code and for an entry id, follows the
first result and checks the page it lands on. Screenshots of the home page, a rule page and an
entry page are saved under ``test-artifacts/``.

Chromium is required in CI (``.ci/run`` installs it); elsewhere the test skips when it is missing.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from test_docs_site import build_site  # the same build as the site tests, made once per session

from kcheck.catalog import load_catalog
from kcheck.registry import find_rule

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
RULE = "KC201"
RULE_NAME = "host-sync-in-timed-region"
ENTRY = "measuring/l2-flushing"
RESULT = ".md-search-result__list > .md-search-result__item > a.md-search-result__link"  # one per page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _require_chromium() -> None:
    if Path(CHROMIUM).is_file() and shutil.which("chromium"):
        return
    message = f"{CHROMIUM} not found: apt-get install -y chromium (the browser test drives Debian's Chromium)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The built site over HTTP on 127.0.0.1 (search needs HTTP, not file://)."""
    site = build_site(tmp_path_factory)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def _search(page, query: str, expect: str) -> list[tuple[str, str]]:
    """Type ``query`` into Material's search box; the results as (URL path, text), best first.

    The query is sent whole (one key event), then the results are read once the best one is
    ``expect`` or a time limit has passed.
    """
    page.locator("label.md-search__icon, .md-search__input").first.click()
    box = page.locator("input.md-search__input")
    # The index loads in a web worker; on a busy machine that takes a while. Type once it is ready.
    page.wait_for_function(
        "() => !/Initializing/i.test(document.querySelector('.md-search-result__meta')?.textContent || '')",
        timeout=60_000)
    box.fill(query)
    box.press("End")  # Material reads the box on key events; one key sends the whole query at once
    page.locator(".md-search-result__item").first.wait_for(timeout=60_000)
    try:
        page.wait_for_function(
            "([sel, path]) => { const a = document.querySelector(sel);"
            " return a && new URL(a.href).pathname.endsWith(path); }",
            arg=[RESULT, expect], timeout=30_000)
    except Exception:  # noqa: BLE001 - the assertion below reports what was found instead
        pass
    links = page.locator(RESULT)
    return [(urlsplit(links.nth(i).get_attribute("href")).path, " ".join((links.nth(i).text_content() or "").split()))
            for i in range(links.count())]


def _shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


def test_home_page(page, server):
    page.goto(server)
    assert page.title().startswith("kcheck")
    tabs = page.locator(".md-tabs__link").all_inner_texts()
    for tab in ("Catalog", "Guides", "Rules", "Kernels"):
        assert any(t.strip() == tab for t in tabs), tabs
    # The palette toggle switches to dark mode.
    scheme = page.locator("body").get_attribute("data-md-color-scheme")
    for _ in range(3):
        page.locator("form[data-md-component=palette] label:visible").first.click()
        if page.locator("body").get_attribute("data-md-color-scheme") != scheme:
            break
    assert page.locator("body").get_attribute("data-md-color-scheme") != scheme
    page.locator("form[data-md-component=palette] label:visible").first.click()
    _shot(page, "home")


def test_search_rule_code_and_follow(page, server):
    rule = find_rule(RULE)
    page.goto(server)
    results = _search(page, RULE, f"rules/{rule.NAME}/")
    href, title = results[0]
    assert href.endswith(f"rules/{rule.NAME}/"), results[:3]
    assert RULE in title
    page.locator(RESULT).first.click()
    page.wait_for_url(f"**/rules/{rule.NAME}/**")
    assert page.locator("h1").first.inner_text().rstrip("¶ \n") == f"{rule.CODE} {rule.NAME}"
    body = page.locator("article").inner_text()
    assert "What it does" in body and "Catalog entries" in body
    # The catalog entries the rule cites are linked, and the edit link opens the rule module.
    for entry_id in rule.KNOWLEDGE:
        assert page.locator(f"article a[href$='catalog/{entry_id}/']").count() >= 1, entry_id
    edit = page.locator("a[title='Edit this page']").get_attribute("href")
    assert edit.endswith(rule.__module__.removeprefix("kcheck.").replace(".", "/") + ".py")
    # Code blocks carry a copy button.
    page.locator("article pre").first.scroll_into_view_if_needed()
    page.locator("article pre [data-clipboard-target]").first.wait_for(state="attached", timeout=10_000)
    page.evaluate("window.scrollTo(0, 0)")
    _shot(page, "rule")


@pytest.mark.parametrize("key", [RULE_NAME, "triton-cuda/int64-offsets"])
def test_search_finds_names_and_ids_with_hyphens(page, server, key):
    """Rule names and entry ids, typed whole with their hyphens and slashes, find their pages."""
    rule = find_rule(key)
    expect = f"rules/{key}/" if rule else f"catalog/{key}/"
    page.goto(server)
    results = _search(page, key, expect)
    assert results and results[0][0].endswith(expect), results[:3]


def test_search_entry_id_and_follow(page, server):
    entry = load_catalog().get(ENTRY)
    page.goto(server)
    results = _search(page, ENTRY, f"catalog/{ENTRY}/")
    href, title = results[0]
    assert href.endswith(f"catalog/{ENTRY}/"), results[:3]
    page.locator(RESULT).first.click()
    page.wait_for_url(f"**/catalog/{ENTRY}/**")
    assert page.locator("h1").first.inner_text().rstrip("¶ \n") == entry["title"]
    body = page.locator("article").inner_text()
    assert ENTRY in body
    assert "Facts" in body and "Pitfalls" in body
    assert page.locator("article .admonition.warning").count() == len(entry["pitfalls"])
    _shot(page, "entry")
