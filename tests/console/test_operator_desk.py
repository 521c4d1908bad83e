"""The operator desk settles Unknowns: one left by a receiver outage (nothing written), settled by a
confirmed re-drive once the receiver is back; one left by a lost reply (written, the answer never
arrived), settled by recording the lookup that shows its receipt. One effect each."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from decisionflow.v1 import effect_receiver_pb2
from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest, screenshot
from tests.support.reconciling import LOST_REPLY

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def test_desk_redrives_an_unknown_left_by_a_receiver_outage(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console(receiver_timeout_seconds=1.0)
    stack = console.stack
    console.sign_in(page, "olga")
    operation_id = start_case(page, console, case_id="T-outage")
    console.servers.stop_receiver()
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "UNKNOWN")
    expect(page.locator(".words")).to_contain_text(
        "Recorded; the effect is not confirmed yet — the reconciler will settle it."
    )
    assert stack.effects("T-outage") == 0

    # The receiver is back, on the address the orchestrator dials.
    console.servers.restart_receiver()
    page.goto(console.url("/operations"))
    row = page.locator("#operations-unknown tr", has=page.locator(f'[data-operation-id="{operation_id}"]'))
    # The case first, the operation id shortened beside it (whole in its title).
    expect(row.locator("td").first).to_have_text("T-outage")
    expect(row).to_contain_text(operation_id[:18] + "…")
    expect(page.locator("#last-pass")).to_contain_text("No lookup recorded on these operations yet")
    screenshot(page, "desk")
    row.get_by_role("link").click()
    expect(page.locator("#state")).to_have_attribute("data-state", "UNKNOWN")
    page.click("#redrive")
    expect(page.locator("h1")).to_contain_text("Re-drive")
    page.click("#confirm")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    expect(page.locator("#state")).to_have_attribute("data-state", "COMMITTED")
    assert stack.effects("T-outage") == 1
    page.goto(console.url("/operations"))
    expect(page.locator("#operations-unknown")).to_have_count(0)


def test_a_lookup_recorded_from_the_desk_commits_after_confirmation(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console(receiver_failpoints=LOST_REPLY, receiver_timeout_seconds=1.0)
    stack = console.stack
    console.sign_in(page, "olga")
    operation_id = start_case(page, console, case_id="T-lookup")
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "UNKNOWN")
    request = effect_receiver_pb2.ListEffectsRequest(case_id="T-lookup")
    reader = console.servers.as_static("edna")
    [effect] = stack.receiver().ListEffects(request, timeout=10, metadata=reader).effects
    page.goto(console.url(f"/operations/{operation_id}/settle"))
    page.check("input[name=status][value=applied]")
    page.check("input[name=consistency][value=strong]")
    page.fill("#receipt_id", effect.receipt.receipt_id)
    page.click("#review")
    expect(page.locator("h1")).to_have_text("Record this lookup for case T-lookup?")
    expect(page.locator("#state")).to_have_count(0)  # nothing recorded before the confirmation
    page.click("#confirm")
    expect(page.locator("#outcome")).to_have_text("Settled: Committed")
    expect(page.locator("#receipt")).to_have_text(effect.receipt.receipt_id)
