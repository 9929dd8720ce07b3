"""Draw docs/dashboard.png, the picture of the status dashboard in docs/operations/status-server.md: a fresh store
with jobs in every state (a paused type, a limited one, running, failed, a live worker),
served by ``StatusServer`` and shot in headless Chromium (``make browser``).

    .venv/bin/python docs/screenshot.py docs/dashboard.png
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from jobs.observe import workers
from monitor import StatusServer  # noqa: E402

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
        "--disable-background-networking", "--disable-component-update"]


def fill(db) -> None:
    for type, timeout in (("resize", 30), ("email", 10), ("report", 300)):
        jobs.set_type_timeout(db, type, timeout)
    jobs.set_limits(db, "email", concurrency=4, key_rate=(10, 60))
    for i in range(40):
        jobs.add(db, "resize", f"img-{i:03d}", {"path": f"photos/{i}.jpg"}, priority=-1 if i < 5 else 0)
    for i in range(12):
        jobs.add(db, "email", f"welcome-{i}", {"to": f"user{i}@example.com"}, key=f"tenant-{i % 3}")
    for i in range(3):
        jobs.add(db, "report", f"daily-{i}")
    for _ in range(6):
        jobs.finish(db, jobs.accept(db, "resize", timeout=0))
    for reason in ("ValueError: image is truncated", "OSError: disk full"):
        jobs.finish(db, jobs.accept(db, "resize", timeout=0), failed=reason)
    jobs.accept(db, "resize", timeout=0)
    jobs.accept(db, "email", timeout=0)
    jobs.pause(db, "report")
    workers.register(db, workers.new_worker(["resize", "email"], 4, interval=5.0))


def main(out: str) -> int:
    from playwright.sync_api import sync_playwright

    directory = tempfile.mkdtemp(prefix="jobs-screenshot-")
    try:
        db = jobs.open("sqlite:" + os.path.join(directory, "jobs.sqlite"))
        fill(db)
        with StatusServer(db, port=0, min_interval=0, token="screenshot-token-0123") as server, \
                sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            page.goto(server.url)
            page.wait_for_selector("#types button")  # the script refreshed the tables
            time.sleep(0.2)
            page.screenshot(path=out, full_page=True)
            browser.close()
        db.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png"))
