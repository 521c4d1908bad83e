"""The credentials file: what it accepts, what it refuses and how a token is matched."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from decisionflow_server.runtime.auth import (
    CertificateEntry,
    CredentialsError,
    Principal,
    Role,
    issue_token,
    load_credentials,
    parse_credentials,
    token_sha256,
)
from tests.support.auth import TOKENS, credentials_document, known_credentials, token_principal

SHA = hashlib.sha256(b"some token").hexdigest()


def test_token_hash_is_lowercase_hex_sha256_of_the_utf8_token() -> None:
    assert token_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert token_sha256("zażółć") == hashlib.sha256("zażółć".encode()).hexdigest()


def test_a_valid_file_gives_token_and_certificate_principals(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(credentials_document()))
    credentials = load_credentials(path)
    assert credentials == known_credentials()
    for name, token in TOKENS.items():
        assert credentials.principal_for_token(token) == token_principal(name)
    assert credentials.principal_for_token("") is None
    assert credentials.principal_for_token(TOKENS["rita"] + " ") is None
    assert credentials.principal_for_token(token_sha256(TOKENS["rita"])) is None  # the hash is not the token
    assert credentials.certificates == (CertificateEntry("review-console", frozenset({Role.REVIEWER})),)
    assert credentials.principal_for_certificate(["unknown", "review-console"]) == Principal(
        "review-console", frozenset({Role.REVIEWER}), "certificate"
    )
    assert credentials.principal_for_certificate(["unknown"]) is None


def test_both_sections_are_optional() -> None:
    assert parse_credentials({}).tokens == ()
    assert parse_credentials({"certificates": []}).certificates == ()


def _token(**fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"principal": "alice", "sha256": SHA, "roles": ["reviewer"]}
    entry.update(fields)
    return {k: v for k, v in entry.items() if v is not None}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "must be a JSON object"),
        ({"token": []}, "unknown key 'token'"),
        ({"tokens": {}}, "'tokens' must be a list"),
        ({"tokens": ["x"]}, "tokens[0]: must be an object"),
        ({"tokens": [_token(principal=None)]}, "tokens[0]: missing field 'principal'"),
        ({"tokens": [_token(sha256=None)]}, "tokens[0]: missing field 'sha256'"),
        ({"tokens": [_token(roles=None)]}, "tokens[0]: missing field 'roles'"),
        ({"tokens": [_token(token="plain")]}, "tokens[0]: unknown field 'token'"),
        ({"tokens": [_token(roles=["admin"])]}, "tokens[0].roles[0]: unknown role 'admin'"),
        ({"tokens": [_token(roles=["Reviewer"])]}, "unknown role 'Reviewer'"),
        ({"tokens": [_token(roles=[])]}, "tokens[0].roles: must be a non-empty list"),
        ({"tokens": [_token(roles="reviewer")]}, "tokens[0].roles: must be a non-empty list"),
        ({"tokens": [_token(roles=[1])]}, "tokens[0].roles[0]: must be a string"),
        ({"tokens": [_token(sha256=SHA.upper())]}, "64 lowercase hex"),
        ({"tokens": [_token(sha256=SHA[:-1])]}, "64 lowercase hex"),
        ({"tokens": [_token(sha256=7)]}, "64 lowercase hex"),
        ({"tokens": [_token(principal="")]}, "tokens[0].principal: must be a non-empty string"),
        ({"tokens": [_token(principal=" alice")]}, "surrounding spaces"),
        ({"tokens": [_token(principal="a\nb")]}, "control characters"),
        ({"tokens": [_token(), _token(principal="bob")]}, "tokens[1].sha256: duplicate of tokens[0]"),
        ({"certificates": [{"principal": "orchestrator"}]}, "certificates[0]: missing field 'roles'"),
        (
            {"certificates": [{"principal": "o", "roles": ["operator"]}, {"principal": "o", "roles": ["author"]}]},
            "certificates[1].principal: 'o' is listed twice",
        ),
    ],
)
def test_malformed_documents_are_refused_with_the_entry_named(document: Any, message: str) -> None:
    with pytest.raises(CredentialsError) as refused:
        parse_credentials(document, "creds.json")
    assert message in str(refused.value)
    assert str(refused.value).startswith("creds.json")


def test_groups_are_optional_and_carried_to_the_principal() -> None:
    document = {
        "tokens": [
            _token(groups=["payments-leads", "emea", "team.eu_2", "0f1e"]),
            _token(principal="bob", sha256=token_sha256("bob's token"), groups=[]),
            _token(principal="carl", sha256=token_sha256("carl's token")),  # written before groups existed
        ],
        "certificates": [
            {"principal": "console", "roles": ["reviewer"], "groups": ["reviewers"]},
            {"principal": "orchestrator", "roles": ["effect_writer"]},
        ],
    }
    credentials = parse_credentials(document)

    alice = credentials.principal_for_token("some token")
    assert alice == Principal(
        "alice", frozenset({Role.REVIEWER}), "token", frozenset({"payments-leads", "emea", "team.eu_2", "0f1e"})
    )
    assert credentials.principal_for_token("bob's token") == Principal("bob", frozenset({Role.REVIEWER}), "token")
    assert credentials.principal_for_token("carl's token") == Principal("carl", frozenset({Role.REVIEWER}), "token")
    assert credentials.principal_for_certificate(["console"]) == Principal(
        "console", frozenset({Role.REVIEWER}), "certificate", frozenset({"reviewers"})
    )
    orchestrator = credentials.principal_for_certificate(["orchestrator"])
    assert orchestrator is not None and orchestrator.groups == frozenset()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"groups": "reviewers"}, "tokens[1].groups: must be a list of group names"),
        ({"groups": None}, "tokens[1].groups: must be a list of group names"),
        ({"groups": ["ok", 3]}, "tokens[1].groups[1]: must be a string"),
        ({"groups": [""]}, "tokens[1].groups[0]: invalid group name ''"),
        ({"groups": ["Reviewers"]}, "tokens[1].groups[0]: invalid group name 'Reviewers'"),
        ({"groups": ["/support/leads"]}, "invalid group name '/support/leads'"),
        ({"groups": ["-leads"]}, "invalid group name '-leads'"),
        ({"groups": ["night shift"]}, "invalid group name 'night shift'"),
        ({"groups": ["x" * 65]}, "tokens[1].groups[0]: invalid group name"),
        ({"groups": ["emea", "leads", "emea"]}, "tokens[1].groups[2]: group 'emea' is listed twice (also at [0])"),
        ({"group": ["emea"]}, "tokens[1]: unknown field 'group'"),
    ],
)
def test_bad_groups_are_refused_with_the_entry_named(entry: dict[str, Any], message: str) -> None:
    second = {**_token(principal="bob", sha256=token_sha256("bob's token")), **entry}
    with pytest.raises(CredentialsError) as refused:
        parse_credentials({"tokens": [_token(), second]}, "creds.json")
    assert str(refused.value).startswith("creds.json: ")
    assert message in str(refused.value)


def test_bad_certificate_groups_are_refused_with_the_entry_named() -> None:
    certificate = {"principal": "console", "roles": ["reviewer"], "groups": ["reviewers", "Leads"]}
    with pytest.raises(
        CredentialsError, match=r"creds\.json: certificates\[0\]\.groups\[1\]: invalid group name 'Leads'"
    ):
        parse_credentials({"certificates": [certificate]}, "creds.json")


def test_a_64_character_group_name_is_the_longest_accepted() -> None:
    longest = "a" + "b" * 63
    credentials = parse_credentials({"tokens": [_token(groups=[longest])]})
    assert credentials.tokens[0].groups == frozenset({longest})


def test_unreadable_or_non_json_files_are_refused_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="cannot read credentials file"):
        load_credentials(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"tokens": [')
    with pytest.raises(CredentialsError, match=r"broken\.json: not valid JSON"):
        load_credentials(broken)
    twice = tmp_path / "twice.json"
    twice.write_text('{"tokens": [], "tokens": []}')
    with pytest.raises(CredentialsError, match=r"twice\.json: duplicate JSON key 'tokens'"):
        load_credentials(twice)


def test_issue_token_creates_a_private_file_holding_only_the_hash(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    token = issue_token(path, "carol", [Role.AUTHOR, Role.REVIEWER, Role.AUTHOR])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token not in path.read_text()
    assert json.loads(path.read_text()) == {
        "tokens": [{"principal": "carol", "sha256": token_sha256(token), "roles": ["reviewer", "author"]}],
        "certificates": [],
    }
    assert load_credentials(path).principal_for_token(token) == Principal(
        "carol", frozenset({Role.REVIEWER, Role.AUTHOR}), "token"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["credentials.json"]  # no temporary file left behind


def test_issue_token_appends_and_keeps_existing_entries(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    document = credentials_document()
    path.write_text(json.dumps(document))
    os.chmod(path, 0o666)
    first = issue_token(path, "carol", [Role.OPERATOR])
    second = issue_token(path, "carol", [Role.EFFECT_READER])
    assert first != second
    credentials = load_credentials(path)
    assert credentials.tokens[: len(document["tokens"])] == known_credentials().tokens
    assert credentials.certificates == known_credentials().certificates
    assert credentials.principal_for_token(first) == Principal("carol", frozenset({Role.OPERATOR}), "token")
    assert credentials.principal_for_token(second) == Principal("carol", frozenset({Role.EFFECT_READER}), "token")
    # Others lose every access and the group its write access; the group keeps reading.
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    os.chmod(path, 0o604)
    issue_token(path, "dora", [Role.AUTHOR])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_issue_token_records_the_groups_and_a_token_without_groups_keeps_the_old_shape(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    pia = issue_token(path, "pia", [Role.REVIEWER], ["payments-leads", "emea"])
    rita = issue_token(path, "rita", [Role.REVIEWER])
    entries = json.loads(path.read_text())["tokens"]
    assert entries[0]["groups"] == ["payments-leads", "emea"]
    assert "groups" not in entries[1]
    credentials = load_credentials(path)
    assert credentials.principal_for_token(pia) == Principal(
        "pia", frozenset({Role.REVIEWER}), "token", frozenset({"payments-leads", "emea"})
    )
    assert credentials.principal_for_token(rita) == Principal("rita", frozenset({Role.REVIEWER}), "token")


@pytest.mark.parametrize(
    ("groups", "message"),
    [(["Emea"], "groups[0]: invalid group name 'Emea'"), (["emea", "emea"], "groups[1]: group 'emea' is listed twice")],
)
def test_issue_token_refuses_bad_groups_and_leaves_the_file_as_it_was(
    tmp_path: Path, groups: list[str], message: str
) -> None:
    path = tmp_path / "credentials.json"
    issue_token(path, "rita", [Role.REVIEWER])
    before = path.read_bytes()
    with pytest.raises(CredentialsError) as refused:
        issue_token(path, "pia", [Role.REVIEWER], groups)
    assert message in str(refused.value)
    assert path.read_bytes() == before


def test_issue_token_refuses_bad_input_and_never_rewrites_a_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    with pytest.raises(CredentialsError, match="at least one role"):
        issue_token(path, "carol", [])
    with pytest.raises(CredentialsError, match="non-empty"):
        issue_token(path, "", [Role.REVIEWER])
    assert not path.exists()
    malformed = copy.deepcopy(credentials_document())
    malformed["tokens"][0]["roles"] = ["root"]
    text = json.dumps(malformed)
    path.write_text(text)
    with pytest.raises(CredentialsError, match="unknown role 'root'"):
        issue_token(path, "carol", [Role.REVIEWER])
    assert path.read_text() == text
