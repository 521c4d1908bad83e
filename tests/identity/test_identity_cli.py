"""``decisionflow identity`` in process (main) and through the installed console script."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow_cli import main
from tests.identity.identity_reference import evidence_identity, operation_identity, policy_identity

GOOD: dict[str, Any] = {
    "case_id": "T-1042",
    "action": "record_support_review",
    "body": "Known firmware issue 4.2.1.\r\nPlease update to 4.2.2.",
    "evidence": [
        {"source_id": "kb-771", "version": 3, "quotation": "Drops the connection after sleep."},
        {"source_id": "release-notes", "version": 0, "quotation": "Fixes reconnect 👍."},
    ],
    "policy": {
        "name": "support-replies",
        "version_label": "2026-03",
        "allowance_units": 9,
        "rules": {"tone": "plain", "max_links": "2"},
    },
}


def _expected_ids(document: dict[str, Any]) -> dict[str, str]:
    policy = document["policy"]
    product = identities(
        document["case_id"],
        document["action"],
        document["body"],
        [EvidenceItem(**source) for source in document["evidence"]],
        PolicyRef(**policy),
    )
    reference_evidence = evidence_identity(
        [(s["source_id"], s["version"], s["quotation"]) for s in document["evidence"]]
    )
    reference_policy = policy_identity(
        policy["name"], policy["version_label"], policy["allowance_units"], policy["rules"]
    )
    reference_operation = operation_identity(
        document["case_id"], document["action"], document["body"], reference_evidence, reference_policy
    )
    assert (product.operation_id, product.evidence_id, product.policy_id) == (
        reference_operation,
        reference_evidence,
        reference_policy,
    )
    return {
        "operation_id": product.operation_id,
        "evidence_id": product.evidence_id,
        "policy_id": product.policy_id,
    }


def _edited(changes: dict[str, Any]) -> str:
    """GOOD as JSON with the value at each dotted path (list indexes as digits) replaced."""
    document = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return json.dumps(document)


def _changed(path: str, value: Any) -> str:
    return _edited({path: value})


def _raw(path: str, literal: str) -> str:
    """GOOD as JSON with the value at path written as the given JSON literal text."""
    return _changed(path, "@literal@").replace('"@literal@"', literal)


def _without(path: str) -> str:
    document = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    target: Any = document
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    del target[last]
    return json.dumps(document)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _run_file(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "proposal.json"
    path.write_bytes(text.encode("utf-8"))
    return _run(["identity", "operation", str(path)], capsys)


def _assert_refused(code: int, out: str, err: str, fragment: str) -> None:
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("decisionflow identity: "), err
    assert fragment in err, err


# --- frame ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected_hex"),
    [
        (["ab", "c"], "0000000261620000000163"),
        (["a", "bc"], "0000000161000000026263"),
        (["line one\r\nline two"], "000000116c696e65206f6e650a6c696e652074776f"),
        (["line one\nline two"], "000000116c696e65206f6e650a6c696e652074776f"),
        ([""], "00000000"),
    ],
)
def test_frame_prints_lowercase_hex_and_a_newline(
    fields: list[str], expected_hex: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["identity", "frame", *fields], capsys) == (0, expected_hex + "\n", "")


def test_frame_of_the_polish_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["identity", "frame", "Proszę zebrać eksport diagnostyczny."], capsys)
    assert code == 0
    assert out.startswith("0000002650726f737ac499") and out.endswith("6e792e\n")


def test_frame_takes_a_field_that_looks_like_an_option_after_double_dash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run(["identity", "frame", "--", "-x"], capsys) == (0, "000000022d78\n", "")


def test_frame_refuses_an_argument_that_is_not_text(capsys: pytest.CaptureFixture[str]) -> None:
    # An undecodable byte in argv arrives as a lone surrogate (surrogateescape).
    code, out, err = _run(["identity", "frame", "ok", "\udcff"], capsys)
    _assert_refused(code, out, err, "lone surrogate")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["identity"],
        ["identity", "frame"],
        ["identity", "operation"],
        ["identity", "operation", "a.json", "b.json"],
        ["identity", "frame", "--bogus", "x"],
    ],
)
def test_bad_usage_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("decisionflow"), err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["identity", "operation", "--help"], capsys)
    assert code == 0
    assert "FILE" in out


# --- operation: good input -----------------------------------------------------------------------


def test_operation_prints_the_product_ids_as_one_line_of_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run_file(json.dumps(GOOD), tmp_path, capsys)
    assert (code, err) == (0, "")
    assert out.endswith("\n") and out.count("\n") == 1
    assert json.loads(out) == _expected_ids(GOOD)
    assert list(json.loads(out)) == ["operation_id", "evidence_id", "policy_id"]


def test_operation_reads_standard_input_with_dash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(GOOD).encode("utf-8"))))
    code, out, err = _run(["identity", "operation", "-"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out) == _expected_ids(GOOD)


def test_operation_id_only_prints_the_operation_id_as_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "proposal.json"
    path.write_text(json.dumps(GOOD), encoding="utf-8")
    code, out, err = _run(["identity", "operation", "--id-only", str(path)], capsys)
    assert (code, err) == (0, "")
    assert out == _expected_ids(GOOD)["operation_id"] + "\n"


def test_operation_accepts_surrogate_pair_escapes_and_empty_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(json.dumps(GOOD))
    document["evidence"] = []
    document["body"] = "🎉 done"
    code, out, _ = _run_file(json.dumps(document, ensure_ascii=True), tmp_path, capsys)
    assert "\\ud83c\\udf89" in json.dumps(document, ensure_ascii=True)
    assert code == 0
    assert json.loads(out) == _expected_ids(document)


def test_operation_takes_large_integers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(json.dumps(GOOD))
    document["policy"]["allowance_units"] = 10**40
    document["evidence"][0]["version"] = 0
    code, out, _ = _run_file(json.dumps(document), tmp_path, capsys)
    assert code == 0
    assert json.loads(out) == _expected_ids(document)


# --- operation: bad input ------------------------------------------------------------------------

BAD_INPUTS: list[tuple[str, str, str]] = [
    ("not JSON", "{", "not JSON"),
    ("empty file", "", "not JSON"),
    ("trailing garbage", json.dumps(GOOD) + " x", "not JSON"),
    ("NaN", _raw("policy.allowance_units", "NaN"), "NaN"),
    ("Infinity", _raw("evidence.0.version", "Infinity"), "Infinity"),
    ("too deep", "[" * 100_000 + "]" * 100_000, "not JSON"),
    ("integer too long", _raw("policy.allowance_units", "9" * 5000), "too long"),
    ("top level array", "[]", "proposal: must be an object"),
    ("top level string", '"x"', "proposal: must be an object"),
    ("unknown top field", json.dumps({**GOOD, "extra": 1}), "unknown field 'extra'"),
    ("missing case_id", _without("case_id"), "missing field 'case_id'"),
    ("missing body", _without("body"), "missing field 'body'"),
    ("missing evidence", _without("evidence"), "missing field 'evidence'"),
    ("missing policy", _without("policy"), "missing field 'policy'"),
    ("unknown source field", _changed("evidence.0.url", "x"), "evidence[0]: unknown field 'url'"),
    ("missing quotation", _without("evidence.1.quotation"), "evidence[1]: missing field 'quotation'"),
    ("unknown policy field", _changed("policy.owner", "x"), "policy: unknown field 'owner'"),
    ("missing rules", _without("policy.rules"), "policy: missing field 'rules'"),
    ("missing allowance", _without("policy.allowance_units"), "missing field 'allowance_units'"),
    ("case_id number", _changed("case_id", 1042), "case_id: must be a string"),
    ("action null", _changed("action", None), "action: must be a string"),
    ("body array", _changed("body", ["x"]), "body: must be a string"),
    ("evidence object", _changed("evidence", {}), "evidence: must be an array"),
    ("source not object", _changed("evidence.0", "kb-771"), "evidence[0]: must be an object"),
    ("source_id number", _changed("evidence.0.source_id", 7), "evidence[0].source_id: must be a string"),
    ("quotation bool", _changed("evidence.0.quotation", True), "evidence[0].quotation: must be a string"),
    ("policy string", _changed("policy", "p"), "policy: must be an object"),
    ("name number", _changed("policy.name", 1), "policy.name: must be a string"),
    ("label number", _changed("policy.version_label", 3), "policy.version_label: must be a string"),
    ("rules array", _changed("policy.rules", [["a", "b"]]), "policy.rules: must be an object"),
    ("rule value number", _changed("policy.rules.tone", 1), "policy.rules['tone']: must be a string"),
    ("rule value object", _changed("policy.rules.tone", {}), "policy.rules['tone']: must be a string"),
    ("duplicate source", _changed("evidence.1.source_id", "kb-771"), "duplicate source id 'kb-771'"),
    (
        "duplicate source after CRLF",
        _edited({"evidence.0.source_id": "kb\r\n", "evidence.1.source_id": "kb\n"}),
        "evidence[1].source_id: duplicate source id",
    ),
    ("duplicate key", json.dumps(GOOD)[:-1] + ', "case_id": "T-1"}', "duplicate JSON key 'case_id'"),
    ("duplicate rule key", _raw("policy.rules.tone", '"plain", "tone": "x"'), "duplicate JSON key 'tone'"),
    ("rule keys equal after CRLF", _changed("policy.rules", {"k\r\n": "1", "k\n": "2"}), "duplicate key"),
    ("negative version", _changed("evidence.0.version", -1), "evidence[0].version: must be a non-negative"),
    ("float version", _changed("evidence.0.version", 2.0), "evidence[0].version: must be a non-negative"),
    ("exponent version", _raw("evidence.0.version", "1e0"), "evidence[0].version: must be a non-negative"),
    ("bool version", _changed("evidence.0.version", True), "evidence[0].version: must be a non-negative"),
    ("string version", _changed("evidence.0.version", "3"), "evidence[0].version: must be a non-negative"),
    ("negative allowance", _changed("policy.allowance_units", -9), "policy.allowance_units: must be"),
    ("float allowance", _changed("policy.allowance_units", 9.5), "policy.allowance_units: must be"),
    ("bool allowance", _changed("policy.allowance_units", False), "policy.allowance_units: must be"),
    ("null allowance", _changed("policy.allowance_units", None), "policy.allowance_units: must be"),
    ("lone surrogate body", _changed("body", "x\ud800y"), "body: lone surrogate at index 1"),
    ("lone low surrogate case", _changed("case_id", "\udc00"), "case_id: lone surrogate"),
    ("lone surrogate quotation", _changed("evidence.1.quotation", "\ud83d"), "evidence[1].quotation: lone"),
    ("lone surrogate rule key", _changed("policy.rules", {"\ud800": "x"}), "policy.rules key: lone"),
    ("lone surrogate rule value", _changed("policy.rules.tone", "\udfff"), "policy.rules['tone']: lone"),
    ("lone surrogate source id", _changed("evidence.0.source_id", "\ud800"), "source_id: lone"),
    ("reversed surrogate pair", _changed("body", "\ude00\ud83d"), "body: lone surrogate"),
]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [pytest.param(text, fragment, id=name) for name, text, fragment in BAD_INPUTS],
)
def test_bad_input_exits_2_with_one_line_on_stderr(
    text: str, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_refused(*_run_file(text, tmp_path, capsys), fragment)


def test_lone_surrogate_escapes_are_really_in_the_input() -> None:
    # json.dumps writes lone surrogates as \\udXXX escapes, which is what the refusal cases rely on.
    assert "\\ud800" in _changed("body", "x\ud800y")


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["identity", "operation", str(tmp_path / "absent.json")], capsys)
    _assert_refused(code, out, err, "No such file")


def test_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _assert_refused(*_run(["identity", "operation", str(tmp_path)], capsys), "cannot read")


def test_invalid_utf8_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(_changed("body", "@").replace("@", "caf\xe9").encode("latin-1"))
    _assert_refused(*_run(["identity", "operation", str(path)], capsys), "not UTF-8")


def test_encoded_surrogate_bytes_are_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cesu.json"
    path.write_bytes(json.dumps(GOOD).replace("T-1042", "\ud800").encode("utf-8", "surrogatepass"))
    _assert_refused(*_run(["identity", "operation", str(path)], capsys), "not UTF-8")


# --- the installed console script ----------------------------------------------------------------


def _console_script() -> str:
    script = shutil.which("decisionflow", path=os.path.dirname(sys.executable))
    assert script is not None, "decisionflow console script not installed next to the interpreter"
    return script


def test_console_script_reads_stdin_and_prints_the_product_ids() -> None:
    result = subprocess.run(
        [_console_script(), "identity", "operation", "-"],
        input=json.dumps(GOOD).encode("utf-8"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, b"")
    assert json.loads(result.stdout) == _expected_ids(GOOD)


def test_console_script_refuses_bad_input_with_one_line_and_no_traceback() -> None:
    result = subprocess.run(
        [_console_script(), "identity", "operation", "-"],
        input=_changed("body", "x\ud800").encode("ascii"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == b"decisionflow identity: body: lone surrogate at index 1 is not text\n"


def test_console_script_frames_fields() -> None:
    result = subprocess.run(
        [_console_script(), "identity", "frame", "ab", "c"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"0000000261620000000163\n", b"")
