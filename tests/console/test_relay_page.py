"""The relay's page: an operator sees where a real decisionflow-relay process stands (started as the relay's own
tests start it, between the orchestrator and a real nats-server), its cursor the number of events the stream
holds, through a broker outage and back, and in words when the relay is gone; a console without the setting
says how to configure it; only operators are shown it, and no one while their roles are not known."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Page, expect

from decisionflow.v1 import common_pb2
from decisionflow_console.web import CONTENT_SECURITY_POLICY
from decisionflow_server.foundation.processes import free_port
from tests.support.console import ConsoleStack, ConsoleUnderTest, screenshot
from tests.support.console_process import console_process
from tests.support.nats import NatsCluster, start_nats, stream_messages
from tests.support.relay import RelayProcess, spawn_relay, wait_for_cursor
from tests.support.stack import approve, decline, start_request

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

STREAM = "DECISIONFLOW_EVENTS"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = start_nats(tmp_path / "nats")
    try:
        yield cluster
    finally:
        cluster.close()


def review(servers: ConsoleStack, cases: range, *, declined: frozenset[int] = frozenset()) -> None:
    """Start a review of each case as the author and decide it as the reviewer (declined: these decline)."""
    stub = servers.stack.review()
    for number in cases:
        request = start_request(case_id=f"R-{number}")
        started = stub.StartReview(request, metadata=servers.as_static("arthur"), timeout=30)
        decide = decline if number in declined else approve
        answer = stub.Approve(decide(started.proposal.operation_id), metadata=servers.as_static("rita"), timeout=30)
        assert answer.outcome in (common_pb2.OUTCOME_COMMITTED, common_pb2.OUTCOME_DECLINED)


def in_stream(nats_server: NatsCluster) -> int:
    """The messages the stream holds, asked from a thread of its own: Playwright's synchronous API keeps an
    asyncio loop running in this one."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(stream_messages, nats_server.servers, STREAM).result()


def wait_for_samples(relay: RelayProcess, expected: dict[str, float], timeout: float = 60) -> None:
    """Wait until the relay's own metrics show each expected sample's value."""
    deadline = time.monotonic() + timeout
    while {name: relay.metrics()[name] for name in expected} != expected:
        assert time.monotonic() < deadline, f"{relay.metrics()} after {timeout:.0f} s:\n{relay.service.log()}"
        time.sleep(0.2)


def shown(page: Page, element: str) -> str:
    """The value the relay page shows in element (its data-value)."""
    value = page.locator(f"#relay-{element}").get_attribute("data-value")
    assert value is not None, element
    return value


def test_an_operator_follows_a_real_relay_through_an_outage_and_its_end(
    make_console: Callable[..., ConsoleUnderTest], page: Page, tmp_path: Path, nats_server: NatsCluster
) -> None:
    cursor_file = tmp_path / "relay.cursor"
    relays: list[RelayProcess] = []

    def with_relay(servers: ConsoleStack) -> dict[str, Any]:
        # The relay watches this console's orchestrator with an auditor's token, as decisionflow-relay runs.
        token = tmp_path / "audrey.token"
        token.write_text(servers.tokens["audrey"] + "\n", encoding="utf-8")
        token.chmod(0o600)
        target = f"127.0.0.1:{servers.stack.orchestrator_port}"
        extra = ["--publish-timeout-seconds", "1"]
        relay = spawn_relay(tmp_path, target, nats_server.servers, cursor_file, token_file=token, extra=extra)
        relays.append(relay)
        return {"relay_metrics_url": f"http://127.0.0.1:{relay.metrics_port}/metrics"}

    try:
        console = make_console(console=with_relay)
        [relay] = relays
        url = f"http://127.0.0.1:{relay.metrics_port}/metrics"
        review(console.servers, range(3), declined=frozenset({2}))
        leaves = wait_for_cursor(cursor_file, console.stack.orchestrator_url, relay)
        # Proposal, decision and effect of each approved case; no effect after the decline.
        assert len(leaves) == 8
        assert in_stream(nats_server) == len(leaves)

        console.sign_in(page, "olga", groups=["operators"])
        page.click("#nav-relay")
        expect(page.locator("h1")).to_have_text("Relay")
        expect(page.locator("#relay")).to_have_attribute("data-status", "read")
        expect(page.locator("#relay-url")).to_have_text(url)
        # The cursor is the number of events in the stream: every event below it is there.
        assert shown(page, "cursor") == str(len(leaves))
        expect(page.locator("#relay-cursor")).to_contain_text(
            "every event below index 8 (indices 0 to 7) is in JetStream"
        )
        assert [shown(page, name) for name in ("published", "duplicates", "publish-errors")] == ["8", "0", "0"]
        assert (shown(page, "lag-events"), float(shown(page, "lag-seconds"))) == ("0", 0.0)
        expect(page.locator("#relay-lag-events")).to_have_text("none: caught up with the feed")
        expect(page.locator("#relay-broker")).to_have_attribute("data-value", "up")
        expect(page.locator("#relay-counted-since")).to_contain_text("since it started")
        screenshot(page, "relay")

        # NATS goes away; reviews still commit; the relay cannot publish them and holds its cursor.
        node = nats_server.nodes[0]
        node.kill()
        review(console.servers, range(3, 4))
        # Until a publish has failed and the relay has seen the new case's three events on the feed.
        wait_for_samples(relay, {"decisionflow_relay_broker_up": 0, "decisionflow_relay_lag_events": 3})
        page.reload()
        expect(page.locator("#relay-broker")).to_have_attribute("data-value", "down")
        expect(page.locator("#relay-broker")).to_contain_text("JetStream is not acknowledging publishes")
        assert shown(page, "cursor") == str(len(leaves))
        assert int(shown(page, "lag-events")) == 3  # the new case's proposal, decision and effect
        assert float(shown(page, "lag-seconds")) > 0
        assert int(shown(page, "publish-errors")) >= 1

        # NATS is back: the relay publishes what waited, and the page's cursor is the stream's size again.
        node.start()
        node.wait_healthy()
        leaves = wait_for_cursor(cursor_file, console.stack.orchestrator_url, relay)
        page.reload()
        expect(page.locator("#relay-broker")).to_have_attribute("data-value", "up")
        assert shown(page, "cursor") == str(len(leaves)) == str(in_stream(nats_server)) == "11"
        assert shown(page, "lag-events") == "0"

        # The relay stops: the page says so, with the address it tried, and no traceback.
        assert relay.service.stop() == 0, relay.service.log()
        response = page.reload()
        assert response is not None and response.status == 503
        expect(page.locator("#relay")).to_have_attribute("data-status", "unreadable")
        expect(page.locator("#relay-status")).to_contain_text("The relay cannot be reached")
        expect(page.locator("#relay-problem")).to_contain_text(f"Tried {url} at ")
        expect(page.locator("#relay-problem")).to_contain_text("the console could not connect (Connection refused).")
        assert "Traceback" not in page.content()
        screenshot(page, "relay-unreachable")
    finally:
        for each in relays:
            each.service.stop()


def test_unset_it_says_how_to_configure_it_and_only_an_operator_sees_it(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    with console_process(tmp_path, trial_identity) as console:
        operator = console.signed_in("olga", ["operators"])
        inbox = operator.get("/inbox")
        assert '<a href="/relay" id="nav-relay">Relay</a>' in inbox.text
        answer = operator.get("/relay")
        assert answer.status_code == 200
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert 'data-status="not-configured"' in answer.text
        assert "<strong>The relay is not configured</strong>" in answer.text
        assert "--relay-metrics-url http://RELAY-HOST:PORT/metrics" in answer.text
        assert "DECISIONFLOW_CONSOLE_RELAY_METRICS_URL" in answer.text

        # Every other role gets the console's refusal, and no link to it.
        for subject, groups in [("rita", ["reviewers"]), ("arthur", ["authors"]), ("audrey", ["auditors"])]:
            person = console.signed_in(subject, groups)
            refused = person.get("/relay")
            assert refused.status_code == 403, subject
            assert "You need the operator role" in refused.text
            assert "You cannot see the relay&#39;s position here" in refused.text
            assert "nav-relay" not in person.get("/").text + person.get("/audit").text
        # Signed out: to the sign-in, which comes back here.
        signed_out = console.client().get("/relay")
        assert (signed_out.status_code, signed_out.headers["location"]) == (303, "/login?next=/relay")

        # While the orchestrator does not say someone's roles, the page (which asks it nothing) is shown to no one.
        console.servers.stack.stop_orchestrator()
        unknown = console.signed_in("opal", ["operators"])
        answer = unknown.get("/relay")
        assert answer.status_code == 503
        assert "The orchestrator is not answering" in answer.text
        assert (
            "could not ask the orchestrator which roles your account has, and shows this page only to those who "
            "may see the relay&#39;s position (operator)"
        ) in answer.text
        assert 'id="relay"' not in answer.text and "nav-relay" not in answer.text


def test_a_relay_that_is_not_there_is_said_plainly_with_the_address_tried(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with console_process(tmp_path, trial_identity, "--relay-metrics-url", url) as console:
        answer = console.signed_in("olga", ["operators"]).get("/relay")
    assert answer.status_code == 503
    assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert 'data-status="unreadable"' in answer.text
    assert "<strong>The relay cannot be reached</strong>" in answer.text
    assert f'Tried <code id="relay-url">{url}</code>' in answer.text
    assert "the console could not connect (Connection refused)." in answer.text
    assert "Traceback" not in answer.text and "httpx" not in answer.text


def test_an_answer_that_is_not_the_relays_is_said_as_such(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    # The console's own metrics port: an endpoint that answers, with another service's metrics.
    second = tmp_path / "second"
    second.mkdir()
    with console_process(tmp_path, trial_identity) as first:
        wrong = f"http://127.0.0.1:{first.metrics_port}/metrics"
        with console_process(second, trial_identity, "--relay-metrics-url", wrong) as console:
            answer = console.signed_in("olga", ["operators"]).get("/relay")
    assert answer.status_code == 502
    assert "<strong>The relay's metrics could not be read</strong>" in answer.text
    assert f'Tried <code id="relay-url">{wrong}</code>' in answer.text
    assert "the answer has no decisionflow_relay_cursor_index" in answer.text
    assert "it is not decisionflow-relay&#39;s metrics endpoint." in answer.text
