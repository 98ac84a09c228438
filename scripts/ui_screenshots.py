"""Screenshots of the dashboard's pages for docs/ui/, taken from a real service on this
machine: a private Redis, the API, the tuner and two workers on a temporary database.

    .venv/bin/python scripts/ui_screenshots.py [--out docs/ui]

The service runs with tokens (the login form is the first page taken). Tunes
examples/matmul_128.json (the tuning page), examples/int4_matmul.json at two values
of M (a workload with a two-entry dispatch table), and takes the tunings list and the
workers page while examples/softmax.json is being tuned. Headless Debian Chromium
(/usr/bin/chromium) through Playwright.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, ViewportSize, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tunehub.client.sdk import Client  # noqa: E402
from tunehub.compiler.canonical import workload_key  # noqa: E402
from tunehub.compiler.program import load  # noqa: E402
from tunehub.schemas.api import Scope  # noqa: E402
from tunehub.server.db import tokens  # noqa: E402
from tunehub.server.db.session import make_engine, session_factory, session_scope  # noqa: E402
from tunehub.server.standalone import Stack, StackConfig  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = ViewportSize(width=1280, height=860)
TIMEOUT_S = 900


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "examples" / f"{name}.json").read_text())
    return data


def shoot(page: Page, url: str, path: Path, *, full_page: bool = True) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(path), full_page=full_page)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def create_token(database_url: str) -> str:
    engine = make_engine(database_url)
    try:
        with session_scope(session_factory(engine)) as s:
            _, secret = tokens.create_token(s, name="screenshots", scope=Scope.SUBMIT)
    finally:
        engine.dispose()
    return secret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tunehub-ui-") as home:
        database_url = f"sqlite:///{home}/tunehub.db"
        config = StackConfig(
            home=Path(home), database_url=database_url, workers=2, env={"TUNEHUB_AUTH": "token"}
        )
        with Stack(config) as stack:
            secret = create_token(database_url)
            take(stack.url, secret, out)


def take(url: str, secret: str, out: Path) -> None:
    """Tune, and take each page at the moment it shows what it is for."""
    with Client(url, token=secret) as client:
        ui = f"{url}/ui"
        matmul = client.submit(example("matmul_128"), trials=48)
        client.wait(matmul.id, timeout_s=TIMEOUT_S)
        int4 = example("int4_matmul")
        for m in (1, 128):
            tuning = client.submit(int4, trials=12, symbols={"M": m})
            client.wait(tuning.id, timeout_s=TIMEOUT_S)
        running = client.submit(example("softmax"), trials=64)
        deadline = time.monotonic() + TIMEOUT_S
        while client.get(running.id).trials_done < 16 and time.monotonic() < deadline:
            time.sleep(0.5)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport=VIEWPORT)
            shoot(page, f"{ui}/login", out / "login.png")
            page.fill("input[name=token]", secret)
            page.click("button[type=submit]")
            shoot(page, ui, out / "tunings.png")
            shoot(page, f"{ui}/workers", out / "workers.png")
            client.wait(running.id, timeout_s=TIMEOUT_S)
            # The curves and the newest records: its whole table is taller than useful.
            shoot(page, f"{ui}/tunings/{matmul.id}", out / "tuning.png", full_page=False)
            shoot(page, f"{ui}/workloads", out / "workloads.png")
            shoot(page, f"{ui}/workloads/{workload_key(load(int4))}", out / "workload.png")
            browser.close()


if __name__ == "__main__":
    main()
