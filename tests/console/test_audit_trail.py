"""The auditor's page against a real orchestrator and its real audit log: the leaves its store wrote for
an operation run through the console, sequenced and signed as the orchestrator's sequencer does
(``orchestrator.audit.sequencer.publish``). With the log's verifier key the page says which checkpoint
the leaves were verified against; without it, that they were not; against a checkpoint signed by
another key, or a leaf edited in the database, that verification failed and where. The bundle it
offers is the one ``decisionflow audit verify`` accepts."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, Page, expect

from decisionflow.audit_bundle import load_bundle, verify_bundle
from decisionflow.transparency import NoteSigner, NoteVerifier
from decisionflow_cli import main
from decisionflow_console.config import load
from decisionflow_server.storage import db
from orchestrator.audit_log.signing import CheckpointSigner
from tests.console.pages import start_case
from tests.support.audit import ORIGIN, SIGNER, publish_log
from tests.support.console import ConsoleUnderTest, screenshot

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

LOG_KEY = NoteVerifier.from_vkey(SIGNER.vkey)
# The log's name, another key: what a log rebuilt and signed by someone else would carry.
OTHER_SIGNER = CheckpointSigner(ORIGIN, NoteSigner.from_seed(ORIGIN, bytes(range(100, 132))))
KEY_SHOWN = f"{LOG_KEY.name}+{LOG_KEY.key_id:08x}"


def _publish(console: ConsoleUnderTest, signer: CheckpointSigner = SIGNER) -> int:
    """Sequence the log's backlog and sign its size with signer, as the sequencer does; the signed size."""
    return publish_log(console.stack.orchestrator_url, signer)


def _edit_leaf(console: ConsoleUnderTest, index: int, old: bytes, new: bytes) -> None:
    """Replace old with new in the stored bytes of the leaf at index, as someone with the database might."""
    engine = db.create_engine(console.stack.orchestrator_url, pool_size=1)
    try:
        with engine.begin() as conn:
            where = {"index": index}
            leaf = bytes(
                conn.execute(sa.text("SELECT leaf FROM audit_entries WHERE leaf_index = :index"), where).scalar_one()
            )
            assert old in leaf
            edited = {"leaf": leaf.replace(old, new), **where}
            conn.execute(sa.text("UPDATE audit_entries SET leaf = :leaf WHERE leaf_index = :index"), edited)
    finally:
        engine.dispose()


def _approved_and_another(console: ConsoleUnderTest, page: Page) -> str:
    """Run T-audit to COMMITTED through the console (leaves 0, 1, 2), start T-other (leaf 3); T-audit's id."""
    console.sign_in(page, "olga")
    operation_id = start_case(page, console, case_id="T-audit")
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    start_case(page, console, case_id="T-other")
    return operation_id


def _as_auditor(console: ConsoleUnderTest, browser: Browser) -> Page:
    page = browser.new_context().new_page()
    console.sign_in(page, "audrey", groups=["auditors"])
    return page


def _verdict_and_page(page: Page) -> tuple[str, str]:
    verdict = page.locator("#verdict")
    return str(verdict.get_attribute("data-verdict")), page.locator("main").inner_text()


def test_an_auditor_sees_each_leaf_verified_against_the_latest_checkpoint_and_takes_the_bundle_away(
    make_console: Callable[..., ConsoleUnderTest],
    page: Page,
    browser: Browser,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    console = make_console(audit_signer=SIGNER, console={"audit_log_key": LOG_KEY})
    operation_id = _approved_and_another(console, page)
    assert _publish(console) == 4
    # The operator who ran it is offered the trail on the operation's page.
    page.goto(console.url(f"/operations/{operation_id}"))
    expect(page.locator("#audit-trail")).to_have_attribute("href", f"/audit/{operation_id}")

    auditor = _as_auditor(console, browser)
    assert auditor.locator("nav[aria-label=main] a").all_inner_texts() == ["Audit log"]
    auditor.click("#nav-audit")
    auditor.fill("#operation_id", operation_id)
    auditor.click("#open")
    auditor.wait_for_url(console.url(f"/audit/{operation_id}"))

    expect(auditor.locator("#verdict")).to_have_attribute("data-verdict", "verified")
    expect(auditor.locator("#verdict")).to_contain_text(f"Verified against checkpoint 4 of {ORIGIN}")
    expect(auditor.locator("#origin")).to_have_text(ORIGIN)
    expect(auditor.locator("#key")).to_have_text(KEY_SHOWN)
    expect(auditor.locator("#record-finding")).to_contain_text("agrees with these leaves")
    rows = auditor.locator("#leaves tbody tr")
    assert [rows.nth(i).get_attribute("data-index") for i in range(rows.count())] == ["0", "1", "2"]
    assert [rows.nth(i).get_attribute("data-kind") for i in range(rows.count())] == ["proposal", "decision", "effect"]
    expect(auditor.locator("#leaf-0")).to_contain_text("started: case T-audit, record_support_review")
    expect(auditor.locator("#leaf-1")).to_contain_text("olga")
    expect(auditor.locator("#leaf-1")).to_contain_text("approved")
    expect(auditor.locator("#leaf-2")).to_contain_text("receipt ")
    screenshot(auditor, "audit-trail")

    answer = auditor.request.get(console.url(f"/audit/{operation_id}/bundle"))
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["content-disposition"] == f'attachment; filename="{operation_id}.bundle.json"'
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    bundle = tmp_path / "downloaded.bundle.json"
    bundle.write_bytes(answer.body())
    proof = verify_bundle(load_bundle(bundle.read_text()), LOG_KEY)
    assert (proof.tree_size, proof.leaves, proof.records, proof.origin) == (4, 3, 1, ORIGIN)
    key_file = tmp_path / "log.vkey"
    key_file.write_text(SIGNER.vkey + "\n")
    capsys.readouterr()
    assert main(["audit", "verify", str(bundle), "--public-key", str(key_file)]) == 0
    assert capsys.readouterr().out.startswith(f"verified checkpoint 4 of {ORIGIN}")
    auditor.context.close()


def test_only_auditors_and_operators_read_the_trail_and_unknown_or_malformed_ids_are_told(
    make_console: Callable[..., ConsoleUnderTest], page: Page, browser: Browser
) -> None:
    console = make_console(audit_signer=SIGNER, console={"audit_log_key": LOG_KEY})
    operation_id = _approved_and_another(console, page)
    _publish(console)
    for subject, groups in (("rita", ["reviewers"]), ("arthur", ["authors"])):
        context = browser.new_context()
        try:
            other = context.new_page()
            console.sign_in(other, subject, groups=groups)
            for path in (f"/audit/{operation_id}", f"/audit/{operation_id}/bundle"):
                response = other.goto(console.url(path))
                assert response is not None and response.status == 403, (subject, path)
                expect(other.locator("h1")).to_have_text("You need the auditor or operator role")
            assert "Audit log" not in other.locator("nav[aria-label=main] a").all_inner_texts()
        finally:
            context.close()

    auditor = _as_auditor(console, browser)
    unknown = auditor.goto(console.url("/audit/op-v1-" + "0" * 64))
    assert unknown is not None and unknown.status == 404
    expect(auditor.locator("h1")).to_have_text("Not in the audit log")
    malformed = auditor.goto(console.url("/audit/op-v1-NOT-AN-ID"))
    assert malformed is not None and malformed.status == 400
    expect(auditor.locator("h1")).to_have_text("Not an operation id")
    typed = auditor.goto(console.url("/audit?operation_id=T-audit"))
    assert typed is not None and typed.status == 400
    expect(auditor.locator("#problem")).to_contain_text("op-v1-")
    auditor.context.close()


def test_without_the_logs_key_the_page_says_the_leaves_are_not_verified(
    make_console: Callable[..., ConsoleUnderTest], page: Page, browser: Browser
) -> None:
    console = make_console(audit_signer=SIGNER)
    operation_id = _approved_and_another(console, page)
    _publish(console)

    auditor = _as_auditor(console, browser)
    auditor.goto(console.url(f"/audit/{operation_id}"))

    verdict, shown = _verdict_and_page(auditor)
    assert verdict == "unverified"
    expect(auditor.locator("#verdict")).to_contain_text("NOT verified")
    expect(auditor.locator("#verdict")).to_contain_text("--audit-log-key-file")
    assert "Verified against" not in shown
    expect(auditor.locator("#leaves tbody tr")).to_have_count(3)
    auditor.context.close()


def test_a_checkpoint_signed_by_another_key_fails_verification_at_the_checkpoint(
    make_console: Callable[..., ConsoleUnderTest], page: Page, browser: Browser
) -> None:
    console = make_console(audit_signer=SIGNER, console={"audit_log_key": LOG_KEY})
    operation_id = _approved_and_another(console, page)
    _publish(console)
    start_case(page, console, case_id="T-later")
    # The log's latest checkpoint is now one the console's key did not sign.
    assert _publish(console, OTHER_SIGNER) == 5

    auditor = _as_auditor(console, browser)
    auditor.goto(console.url(f"/audit/{operation_id}"))

    verdict, shown = _verdict_and_page(auditor)
    assert verdict == "failed"
    expect(auditor.locator("#verdict")).to_contain_text(
        "Verification FAILED at checkpoint: the note has no signature by a trusted key"
    )
    assert "verified" not in shown.lower()
    auditor.context.close()


def test_a_leaf_edited_in_the_database_fails_verification_naming_the_leaf(
    make_console: Callable[..., ConsoleUnderTest], page: Page, browser: Browser
) -> None:
    console = make_console(audit_signer=SIGNER, console={"audit_log_key": LOG_KEY})
    operation_id = _approved_and_another(console, page)
    _publish(console)
    # The decision leaf now names another reviewer (as many bytes: it still decodes).
    _edit_leaf(console, 1, b"olga", b"eve_")

    auditor = _as_auditor(console, browser)
    auditor.goto(console.url(f"/audit/{operation_id}"))

    verdict, shown = _verdict_and_page(auditor)
    assert verdict == "failed"
    expect(auditor.locator("#verdict")).to_contain_text(
        "Verification FAILED at leaf 1: its inclusion proof does not hold"
    )
    expect(auditor.locator("#leaf-1")).to_have_class(re.compile(r"\bfailed\b"))
    expect(auditor.locator("#leaf-1")).to_contain_text("eve_")
    assert "verified" not in shown.lower()
    auditor.context.close()


def test_the_setting_reads_the_logs_verifier_key_from_a_file(tmp_path: Path) -> None:
    key_file, not_a_key = tmp_path / "log.vkey", tmp_path / "bad.vkey"
    key_file.write_text(SIGNER.vkey + "\n")
    not_a_key.write_text("not a key\n")
    required = ["--oidc-issuer", "https://id.example", "--oidc-client-id", "c"]
    session_key = tmp_path / "session.key"
    session_key.write_text("s" * 32)
    required += ["--session-key-file", str(session_key)]

    configured = load([*required, "--audit-log-key-file", str(key_file)], {})
    from_environment = load(required, {"DECISIONFLOW_CONSOLE_AUDIT_LOG_KEY_FILE": str(key_file)})

    assert configured.audit_log_key == from_environment.audit_log_key == LOG_KEY
    assert load(required, {}).audit_log_key is None
    with pytest.raises(SystemExit) as refused:
        load([*required, "--audit-log-key-file", str(not_a_key)], {})
    assert refused.value.code == 2
