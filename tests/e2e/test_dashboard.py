"""The dashboard in a real browser (Debian's headless Chromium, driven by Playwright) on the
whole service: every page loads, and a running tuning's curves grow on the open page as its
trials are measured, without reloading it."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.conftest import Service, example
from tests.service.redis_server import redis_server_binary
from tunehub.client.sdk import Client
from tunehub.compiler.canonical import workload_key
from tunehub.compiler.program import load
from tunehub.schemas.api import Scope
from tunehub.server.db import tokens
from tunehub.server.db.session import make_engine, session_factory, session_scope
from tunehub.server.standalone import Stack, StackConfig

# A workload no other end-to-end test tunes, so this tuning starts from nothing.
TASK = "rmsnorm"
TRIALS = 40
TIMEOUT_MS = 240_000


def chromium_binary() -> str | None:
    """Debian's `chromium` (Playwright's own browser downloads are not used)."""
    default = Path("/usr/bin/chromium")
    return str(default) if default.exists() else shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium binary (/usr/bin/chromium): apt-get install chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    yield context.new_page()
    context.close()


def points(page: Page, chart: str) -> int:
    return int(page.get_attribute(f"#chart-{chart}", "data-points") or 0)


def test_every_page_loads_and_a_live_tuning_curve_grows(
    service: Service, client: Client, page: Page
) -> None:
    signature: dict[str, Any] = json.loads(example(TASK).read_text())
    submitted = client.submit(signature, trials=TRIALS)
    assert submitted.outcome == "created"
    ui = f"{service.url}/ui"

    page.goto(ui)
    row = page.locator(f'tr[data-tuning="{submitted.id}"]')
    expect(row).to_be_visible()
    expect(row.locator(".trials")).to_contain_text(f"/ {TRIALS}")
    # The list refreshes itself too, and still shows the tuning after it has.
    page.wait_for_function("Number(document.querySelector('[data-live]').dataset.refreshed) > 0")
    expect(row).to_be_visible()

    page.goto(f"{ui}/tunings/{submitted.id}")
    expect(page.locator("h1")).to_contain_text(f"Tuning {submitted.id}")
    # The open page refreshes itself: its curve gains points while the tuning runs.
    seen = [points(page, "trials")]
    for _ in range(2):
        page.wait_for_function(
            "n => Number(document.querySelector('#chart-trials').dataset.points) > n",
            arg=seen[-1],
            timeout=TIMEOUT_MS,
        )
        seen.append(points(page, "trials"))
    assert seen == sorted(seen) and seen[-1] > seen[0]
    assert page.locator("#chart-trials circle.best").count() == seen[-1]
    # When it ends the page stops refreshing, showing all its trials on both axes.
    page.wait_for_selector("[data-final]", state="attached", timeout=TIMEOUT_MS)
    final = client.get(submitted.id)
    assert final.status == "done"
    expect(page.locator(".summary .trials")).to_have_text(f"{TRIALS} / {TRIALS}")
    assert points(page, "time") == points(page, "trials") > seen[0]
    expect(page.locator("#chart-trials line.baseline")).to_have_count(1)  # naive
    expect(page.locator("table.records tbody tr")).to_have_count(final.trials_done)

    key = workload_key(load(signature))
    page.goto(f"{ui}/workloads")
    page.click(f'a[href="/ui/workloads/{key}"]')
    expect(page.locator("h1")).to_contain_text(signature["name"])
    expect(page.locator("table.dispatch tbody tr")).to_have_count(1)

    page.goto(f"{ui}/workers")
    for process in service.fleet.processes:
        expect(page.locator("table.workers")).to_contain_text(process.name)
    expect(page.locator("table.queues")).to_contain_text("tunehub:measure:cpu")
    expect(page.locator("table.tuners")).to_contain_text(re.compile(r"standalone-\S+-tuner"))


def test_a_browser_logs_in_with_a_token(tmp_path: Path, page: Page) -> None:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    database_url = f"sqlite:///{tmp_path / 'tunehub.db'}"
    config = StackConfig(
        home=tmp_path,
        database_url=database_url,
        workers=0,
        tuner=False,
        env={"TUNEHUB_AUTH": "token"},
    )
    with Stack(config) as stack:
        engine = make_engine(database_url)
        with session_scope(session_factory(engine)) as s:
            _, secret = tokens.create_token(s, name="browser", scope=Scope.READ)
        engine.dispose()

        page.goto(f"{stack.url}/ui/workers")
        expect(page.locator("h1")).to_have_text("Log in")
        page.fill("input[name=token]", "not-a-token")
        page.click("button[type=submit]")
        expect(page.locator("p.error")).to_contain_text("invalid or revoked")
        page.fill("input[name=token]", secret)
        page.click("button[type=submit]")
        # Back where it was going, and every page opens with the cookie.
        expect(page.locator("h1")).to_have_text("Workers and queues")
        page.click("nav >> text=Tunings")
        expect(page.locator("h1")).to_have_text("Tunings")
        page.click("text=Log out")
        expect(page.locator("h1")).to_have_text("Log in")
        page.goto(f"{stack.url}/ui")
        expect(page.locator("h1")).to_have_text("Log in")
