"""The TypeScript client: its generated code matches the protos, and its example runs under Node
against real services (a retry through a lost reply, a stale tab)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client_examples import ExampleServices, check_story
from tests.support.typescript import TypeScriptPackage

BUF = Path(sys.executable).parent / "buf"


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_the_committed_typescript_code_is_what_buf_generates(
    typescript_package: TypeScriptPackage, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(BUF), "generate", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=typescript_package.folder,
    )

    assert done.returncode == 0, done.stderr
    generated, committed = _files(tmp_path / "src" / "gen"), _files(typescript_package.folder / "src" / "gen")
    assert sorted(generated) == sorted(committed), "run `npm run generate` in clients/typescript"
    assert generated == committed, "run `npm run generate` in clients/typescript"
    assert "decisionflow/v1/review_pb.ts" in generated and "google/rpc/error_details_pb.ts" in generated


@pytest.mark.slow
def test_the_typescript_example_approves_once_through_a_lost_reply_and_meets_a_stale_tab(
    typescript_package: TypeScriptPackage, example_services: ExampleServices
) -> None:
    done = typescript_package.run("dist/examples/approve.js", example_services.target)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    check_story(done.stdout, example_services)
