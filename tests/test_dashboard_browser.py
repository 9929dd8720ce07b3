"""The dashboard in a real browser: headless Chromium (Debian's
``chromium`` package: ``make browser`` installs it) driven by Playwright.  A failed job
appears, its retry button makes it run again (a worker takes it and the failure goes
away); the pause button pauses the type, resume resumes it; without the token the buttons
do nothing but say why.

Without Chromium these tests skip, unless ``JOBS_REQUIRE_BROWSER`` is set (CI sets it:
there a missing browser is a failure, not a skip)."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

import jobs
from monitor import StatusServer
from waiting import DEADLINE, wait_until

T = "t"
TOKEN = "browser-test-token-0123"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]
TIMEOUT_MS = DEADLINE * 1000


def _missing(what: str) -> None:
    if os.environ.get("JOBS_REQUIRE_BROWSER"):
        pytest.fail(f"JOBS_REQUIRE_BROWSER is set but {what}")
    pytest.skip(what)


@pytest.fixture(scope="module")
def browser():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        _missing("Chromium is not installed (`make browser` installs Debian's chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        _missing("Playwright is not installed (the dev extra has it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def store(tmp_path):
    db = jobs.open("sqlite:" + str(tmp_path / "jobs.sqlite"))
    jobs.set_type_timeout(db, T, 60)
    yield db
    db.close()


@pytest.fixture
def page(browser, store):
    with StatusServer(store, port=0, min_interval=0, token=TOKEN) as server:
        context = browser.new_context()
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto(server.url)
        yield pg
        context.close()


def use_token(page, token: str = TOKEN) -> None:
    page.fill("#token", token)
    page.click("#auth button[type=submit]")
    page.wait_for_selector("#acted:has-text('token set')")


def fail_a_job(store, job_id: str) -> None:
    jobs.add(store, T, job_id, {"n": 1})
    job = jobs.accept(store, T, timeout=0)
    jobs.finish(store, job, failed="it broke")


def test_a_failed_job_appears_and_retry_runs_it_again(page, store):
    fail_a_job(store, "broken-1")
    row = page.locator("#failures tr", has_text="broken-1")
    row.wait_for()  # the page's refresh shows it
    assert "it broke" in row.inner_text()
    use_token(page)
    row.locator("button[data-action=retry]").click()
    page.wait_for_selector("#acted:has-text('retry t/broken-1: done')")
    assert jobs.get_job(store, T, "broken-1").state == "pending"

    ran = []

    def worker():  # the job runs again
        job = jobs.accept(store, T, timeout=DEADLINE)
        ran.append(job.id)
        jobs.finish(store, job)

    t = threading.Thread(target=worker)
    t.start()
    t.join(DEADLINE)
    assert ran == ["broken-1"]
    page.locator("#failures tr", has_text="broken-1").wait_for(state="detached")
    assert jobs.get_job(store, T, "broken-1").state == "finished"


def test_pause_and_resume_from_the_page(page, store):
    jobs.add(store, T, "waiting")
    row = page.locator("#types tr", has_text=T)
    row.wait_for()
    use_token(page)
    row.locator("button[data-action=pause]").click()
    page.locator("#types tr", has_text=f"{T} (paused)").wait_for()
    assert jobs.is_paused(store, T)
    assert jobs.accept(store, T, timeout=0) is None
    page.locator("#types tr", has_text=f"{T} (paused)").locator("button[data-action=resume]").click()
    page.locator("#types tr", has_text=f"{T} (paused)").wait_for(state="detached")
    assert wait_until(lambda: not jobs.is_paused(store, T))
    assert jobs.accept(store, T, timeout=0) is not None


def test_without_the_token_an_action_says_why_and_changes_nothing(page, store):
    jobs.add(store, T, "j")
    row = page.locator("#types tr", has_text=T)
    row.wait_for()
    row.locator("button[data-action=pause]").click()
    page.wait_for_selector("#acted:has-text('pause failed')")
    assert "bearer token" in page.inner_text("#acted")
    assert not jobs.is_paused(store, T)


def test_show_a_jobs_details(page, store):
    fail_a_job(store, "detail-1")
    row = page.locator("#failures tr", has_text="detail-1")
    row.wait_for()
    use_token(page)
    row.locator("button[data-action=show]").click()
    page.wait_for_selector("#job:has-text('it broke')")
    assert '"id": "detail-1"' in page.inner_text("#job")
    assert '"started"' in page.inner_text("#job") and '"finished"' in page.inner_text("#job")  # its times


def test_the_last_hour_is_drawn_per_minute(page, store):
    """Finished and failed jobs appear as bars in their type's row, redrawn by the page."""
    fail_a_job(store, "bar-1")
    jobs.add(store, T, "bar-2")
    jobs.finish(store, jobs.accept(store, T, timeout=0))
    row = page.locator("#types tr", has_text=T)
    row.locator("svg.minutes rect.failed").wait_for()
    row.locator("svg.minutes rect.finished").wait_for()
    assert row.locator("svg.minutes rect.finished title").text_content() == "1 finished"
