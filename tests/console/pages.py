"""What the console tests do in the browser, in the console's own words."""

from __future__ import annotations

from playwright.sync_api import BrowserContext, Page

from tests.support.console import ConsoleUnderTest
from tests.support.stack import T1042_BODY


def session_cookie(context: BrowserContext) -> dict[str, str]:
    """The console's session cookie the browser context holds, for a request sent beside the browser."""
    return {c["name"]: c["value"] for c in context.cookies() if c["name"] == "decisionflow_console_session"}


def start_case(page: Page, console: ConsoleUnderTest, case_id: str = "T-1042", body: str = T1042_BODY) -> str:
    """Start a review through the start form; return the operation id the proposal page shows."""
    return start_case_at(page, console.url(""), case_id, body)


def start_case_at(page: Page, base: str, case_id: str = "T-1042", body: str = T1042_BODY) -> str:
    """Start a review through the start form of the console at base; return the proposal page's operation id."""
    page.goto(base + "/start")
    page.fill("#case_id", case_id)
    page.fill("#body", body)
    page.fill("[name=evidence-0-source_id]", "HOLD-7")
    page.fill("[name=evidence-0-version]", "2")
    page.fill("[name=evidence-0-quotation]", "Firmware 4.2.0 may hold.")
    page.fill("[name=evidence-1-source_id]", "KB-12")
    page.fill("[name=evidence-1-version]", "1")
    page.fill("[name=evidence-1-quotation]", "Update to 4.2.1.")
    page.fill("[name=policy_version_label]", "2026-10")
    page.click("#start")
    page.wait_for_url(base + "/proposals/**")
    return page.locator("#operation-id").inner_text()


def edit_body(page: Page, console: ConsoleUnderTest, operation_id: str, body: str) -> str:
    """Edit the proposal's body through its edit form; return the new operation id."""
    page.goto(console.url(f"/proposals/{operation_id}/edit"))
    page.fill("#body", body)
    page.click("#save")
    page.wait_for_url(lambda url: "/proposals/" in url and operation_id not in url)
    return page.locator("#operation-id").inner_text()
