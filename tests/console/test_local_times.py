"""Times in the browser's time zone: a page serves each time as ``<time datetime="…Z">`` with its UTC
text, and the console's one script (static/local-times.js, under the Content-Security-Policy)
rewrites it to the browser's own zone, the UTC text kept in its title. The same proposal opened in
two time zones shows two local times of one instant; with script off, the UTC text."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from playwright.sync_api import Browser, BrowserContext, expect

from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest


def _opened(browser: Browser, **options: object) -> BrowserContext:
    context = browser.new_context(viewport={"width": 1200, "height": 900}, **options)  # type: ignore[arg-type]
    context.set_default_timeout(10_000)
    return context


def test_one_instant_reads_in_each_browsers_zone_and_in_utc_without_script(
    make_console: Callable[..., ConsoleUnderTest], browser: Browser
) -> None:
    console = make_console()
    shown: dict[str, tuple[str, str, str | None]] = {}
    errors: list[str] = []
    operation_id = ""
    for zone, script in (("Europe/Berlin", True), ("America/New_York", True), ("Asia/Kolkata", False)):
        context = _opened(browser, timezone_id=zone, java_script_enabled=script)
        try:
            page = context.new_page()
            console.sign_in(page, "rita")
            page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            if not operation_id:
                operation_id = start_case(page, console, case_id="T-zones")
            page.goto(console.url(f"/proposals/{operation_id}"))
            created = page.locator("#main dd time").first
            if script:
                expect(created).to_have_attribute("title", re.compile(r" UTC$"))  # the script has run
            shown[zone] = (
                created.get_attribute("datetime") or "",
                created.inner_text(),
                created.get_attribute("title"),
            )
        finally:
            context.close()

    instant = {moment for moment, _, _ in shown.values()}
    assert len(instant) == 1, shown  # one instant, served the same to every browser
    (moment,) = instant
    assert moment.endswith("Z")
    at = datetime.fromisoformat(moment)
    utc_text = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    for zone in ("Europe/Berlin", "America/New_York"):
        local = at.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S")
        _, text, title = shown[zone]
        assert text.startswith(local + " "), (zone, text)
        assert title == utc_text
    assert shown["Europe/Berlin"][1] != shown["America/New_York"][1]
    # Without script: the UTC text as served, and no title.
    assert shown["Asia/Kolkata"][1:] == (utc_text, None)
    assert errors == []  # no Content-Security-Policy refusal of the script, no failure in it
