"""A start form with a problem comes back as it was typed, each problem beside its field and listed above
the form: a field the console cannot read (a version that is not a number) and a field the orchestrator
refuses (a source named twice) alike. Nothing is started until the form is right."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from decisionflow.v1 import review_pb2
from tests.support.console import ConsoleUnderTest
from tests.support.stack import T1042_BODY


def _pending(console: ConsoleUnderTest) -> list[str]:
    answer = console.stack.review().ListPendingReviews(
        review_pb2.ListPendingReviewsRequest(page_size=10), timeout=10, metadata=console.servers.as_static("rita")
    )
    return [entry.proposal.case_id for entry in answer.entries]


def test_start_form_problems_are_said_at_their_fields(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    console.sign_in(page, "arthur", groups=["authors"])
    page.goto(console.url("/start"))
    page.fill("#case_id", "T-fields")
    page.fill("#body", T1042_BODY)
    page.fill("[name=evidence-0-source_id]", "HOLD-7")
    page.fill("[name=evidence-0-version]", "two")
    page.fill("[name=evidence-0-quotation]", "Firmware 4.2.0 may hold.")
    page.fill("[name=policy_version_label]", "2026-10")
    with page.expect_response(console.url("/start")) as posted:
        page.click("#start")
    assert posted.value.status == 400
    expect(page.locator("#problem-evidence-0-version")).to_have_text(
        "evidence row 1: version: expected a whole number, not 'two'"
    )
    expect(page.locator("#evidence-0-version")).to_have_attribute("aria-describedby", "problem-evidence-0-version")
    expect(page.locator("#problem")).to_contain_text("Nothing was sent")
    expect(page.locator("#case_id")).to_have_value("T-fields")
    expect(page.locator("[name=evidence-0-version]")).to_have_value("two")

    # Read by the console, refused by the orchestrator: a source named twice, said at the second.
    page.fill("[name=evidence-0-version]", "2")
    page.fill("[name=evidence-1-source_id]", "HOLD-7")
    page.fill("[name=evidence-1-version]", "1")
    page.fill("[name=evidence-1-quotation]", "Update to 4.2.1.")
    page.click("#start")
    expect(page.locator("#problem-evidence-1-source_id")).to_have_text("evidence row 2: source id: duplicate source_id")
    expect(page.locator("#problem-evidence-0-version")).to_have_count(0)
    assert _pending(console) == []

    page.fill("[name=evidence-1-source_id]", "KB-12")
    page.click("#start")
    page.wait_for_url(console.url("/proposals/**"))
    assert _pending(console) == ["T-fields"]
