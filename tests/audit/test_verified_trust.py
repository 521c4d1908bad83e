"""What ``decisionflow audit verify`` trusts and says it proved, on a real log signed by
``decisionflow-orchestrator audit-checkpoint``: the old and the new key across a rotation (repeated
``--public-key`` or one key file of two lines), the origin pinned with ``--origin``, and the scope and,
for a whole-log bundle, a consistency proven by the leaves alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decisionflow.transparency import NoteVerifier
from orchestrator.audit_log.signing import DEFAULT_ORIGIN
from tests.support.audit_history import History, keygen

pytestmark = pytest.mark.slow


def _short(vkey_file: Path) -> str:
    key = NoteVerifier.from_vkey(vkey_file.read_text().strip())
    return f"{key.name}+{key.key_id:08x}"


def test_after_a_key_rotation_a_bundle_of_the_new_key_verifies_since_a_checkpoint_of_the_old(history: History) -> None:
    new_key, new_vkey = history.directory / "new.key", history.directory / "new.vkey"
    new_vkey.write_text(keygen(new_key) + "\n")
    history.start("T-5")
    assert history.checkpoint(new_key)["signed"] is True  # the orchestrators restarted with the new key
    both = history.directory / "both.vkeys"
    both.write_text(history.vkey_file.read_text() + "\n" + new_vkey.read_text())
    whole, case = history.export(), history.export("--case", "T-1")

    exits = {
        "old and new": history.verify(whole, keys=[history.vkey_file, new_vkey]),
        "one file of both": history.verify(whole, keys=[both]),
        "the case, both": history.verify(case, keys=[new_vkey, history.vkey_file]),
        "new only": history.verify(whole, keys=[new_vkey]),
        "old only": history.verify(whole, keys=[history.vkey_file]),
    }

    assert {name: run[0] for name, run in exits.items()} == {
        "old and new": 0,
        "one file of both": 0,
        "the case, both": 0,
        "new only": 4,
        "old only": 4,
    }
    out = exits["old and new"][1]
    assert f"signed by key {_short(new_vkey)}" in out
    assert f"consistent with checkpoint {int(history.older.read_text().splitlines()[1])} (signed by key " in out
    assert f"(signed by key {_short(history.vkey_file)}), proven by the consistency proof" in out
    assert "since checkpoint does not hold: the note has no signature by a trusted key" in exits["new only"][2]
    assert "checkpoint does not hold: the note has no signature by a trusted key" in exits["old only"][2]
    proof = json.loads(history.verify(whole, "--json", keys=[both])[1])
    assert (proof["key"], proof["since_key"]) == (new_vkey.read_text().strip(), history.vkey_file.read_text().strip())


def test_a_key_file_with_a_line_that_is_no_key_is_bad_input(history: History) -> None:
    bad = history.directory / "bad.vkeys"
    bad.write_text(history.vkey_file.read_text() + "not a key\n")
    exit_code, _, err = history.verify(history.export(), keys=[bad])
    assert exit_code == 2 and "line 2, is not a verifier key" in err


def test_a_pinned_origin_refuses_a_checkpoint_of_another_origin_signed_with_the_right_key(history: History) -> None:
    pinned = history.verify(history.export(), "--origin", DEFAULT_ORIGIN, "--json")
    assert pinned[0] == 0, pinned[2]
    assert (json.loads(pinned[1])["origin"], json.loads(pinned[1])["origin_pinned"]) == (DEFAULT_ORIGIN, True)
    history.start("T-5")
    assert history.checkpoint(None, "--audit-origin", "other.example/log")["signed"] is True  # the same key
    bundle = history.export(since=False)

    unpinned = history.verify(bundle, since=False)
    refused = history.verify(bundle, "--origin", DEFAULT_ORIGIN, since=False)
    relabelled = history.directory / "relabelled.bundle.json"
    relabelled.write_text(json.dumps({**json.loads(bundle.read_text()), "origin": DEFAULT_ORIGIN}))
    inner = history.verify(relabelled, "--origin", DEFAULT_ORIGIN, since=False)

    assert unpinned[0] == 0
    assert "trusted origin other.example/log: taken from the bundle, not pinned (pin it with --origin)" in unpinned[1]
    assert refused[0] == inner[0] == 4
    assert f"the bundle is of origin 'other.example/log', not of '{DEFAULT_ORIGIN}' (--origin)" in refused[2]
    assert f"the checkpoint is of log 'other.example/log', not '{DEFAULT_ORIGIN}'" in inner[2]


def test_verify_names_the_scope_it_proved(history: History) -> None:
    said = {}
    for scope, words in (
        (("--operation", history.approved), f"operation {history.approved}"),
        (("--case", "T-2"), "case T-2"),
        (("--all",), "the whole log"),
    ):
        bundle = history.export(*scope)
        exit_code, out, err = history.verify(bundle)
        assert exit_code == 0, err
        assert f"scope: {words}\n" in out
        said[scope[0]] = json.loads(history.verify(bundle, "--json")[1])["scope"]
    assert said == {
        "--operation": {"operation_id": history.approved},
        "--case": {"case_id": "T-2"},
        "--all": {"all": True},
    }


def test_a_whole_log_bundle_proves_consistency_with_a_kept_checkpoint_by_its_leaves(history: History) -> None:
    bundle = history.export(since=False)  # carries no consistency proof
    kept = int(history.older.read_text().splitlines()[1])

    exit_code, out, err = history.verify(bundle)

    assert (exit_code, err) == (0, "")
    assert f"consistent with checkpoint {kept} (signed by key {_short(history.vkey_file)}), proven by the leaves" in out
    proof = json.loads(history.verify(bundle, "--json")[1])
    assert (proof["since_size"], proof["since_proven_by"]) == (kept, "leaves")
    partial = history.export("--case", "T-1", since=False)
    exit_code, _, err = history.verify(partial)
    assert exit_code == 4 and f"carries no consistency proof from size {kept}" in err
