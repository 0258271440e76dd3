"""Headless Chromium for the tests that look at pages as a person does: Debian's chromium, driven by Playwright.

Playwright's own browser download cannot work here (no host but the package registries), so it drives the
system's /usr/bin/chromium, which `.ci/run` installs where it is missing. Every request a page makes is
recorded; one to another host is refused before it leaves the machine, and the test sees it in the list.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium calls Google's hosts at every start; this machine refuses them.
FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
OFFLINE = ("file:", "data:")  # a report opened from disk asks for nothing else


def _missing(why: str) -> None:
    """Skip where a developer has no browser; fail where the suite must run everything (CI)."""
    if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{why} (SPARKNB_REQUIRE_SERVERS=1 requires the browser tests)", pytrace=False)
    pytest.skip(why)


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Chromium (a Playwright Browser) for the duration of a test module."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: pip install -e '.[dev]'")
    if not CHROMIUM.exists():
        _missing(f"no {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as playwright:
        # Playwright gives each launch a fresh, empty profile and adds --headless and --no-sandbox itself.
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Requests:
    """Every URL a page asked for; those of other hosts than `allowed` were stopped before leaving."""

    allowed: tuple[str, ...]
    seen: list[str] = field(default_factory=list)

    def foreign(self) -> list[str]:
        return [url for url in self.seen if not url.startswith(self.allowed)]


def open_page(browser, *, allowed: tuple[str, ...]):
    """A new page whose every request is recorded in page.requests; foreign ones are aborted."""
    page = browser.new_page(viewport=VIEWPORT)
    page.requests = Requests(allowed)
    page.on("request", lambda request: page.requests.seen.append(request.url))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(allowed) else route.abort())
    return page


def single_colour(png: bytes) -> bool:
    """True for a blank picture: every pixel the same colour."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    return all(low == high for low, high in image.getextrema())


# Each table that has at least one body row, and each image the browser decoded (naturalWidth > 0), within `scope`.
TABLES_WITH_ROWS = "s => [...document.querySelectorAll(s + ' table')].filter(t => t.querySelector('tbody tr')).length"
DECODED_IMAGES = "s => [...document.querySelectorAll(s + ' img')].filter(i => i.complete && i.naturalWidth > 0).length"


def images_not_blank(page, scope: str) -> list[bool]:
    """For each image within `scope`, whether the browser drew more than one colour of it."""
    return [not single_colour(image.screenshot()) for image in page.locator(f"{scope} img").all()]


def decode_runs_of_both_tiny_models(tiny_dense, tiny_moe, outputs: Path) -> list[Path]:
    """Two small sealed decode runs, one per tiny model, for the comparison notebook to open."""
    from sparknb.runs.execute import run_notebook

    small = {"prompt_lengths": [64], "output_tokens": 16, "warmup": 0, "repetitions": 2}
    return [run_notebook("decode", {"model": name, "endpoint": server.url, **small}, outputs=outputs)
            for name, server in (("tiny-dense", tiny_dense), ("tiny-moe", tiny_moe))]


def look_at(browser, report: Path, screenshot: Path) -> dict:
    """Open a report from disk as a reader does; what the browser saw: its text, the requests to other hosts, tables
    with rows, images decoded and each drawn (not one colour), and whether the whole page is blank."""
    page = open_page(browser, allowed=OFFLINE)
    try:
        page.goto(report.as_uri(), wait_until="load")
        page.screenshot(path=str(screenshot), full_page=True)
        return {"text": page.inner_text("body"), "foreign": page.requests.foreign(),
                "tables": page.evaluate(TABLES_WITH_ROWS, "body"),
                "images": page.evaluate(DECODED_IMAGES, "body"),
                "drawn": images_not_blank(page, "body"),
                "blank_page": single_colour(screenshot.read_bytes())}
    finally:
        page.close()
