"""The cases ``decisionflow demo --console`` starts so the reviewer's inbox is not empty: T-1042 as the
demo begins it, and T-1043 started and then edited (a new source version), so its proposal page
shows what changed. Both are started by the author with an access token from the trial provider,
so the orchestrator records the author as the provider names them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from decisionflow.channels import insecure_channel
from decisionflow.client import DecisionflowError, ReviewClient
from decisionflow_demo import workspace as ws
from decisionflow_demo.children import DemoError
from decisionflow_demo.stack import Transcript, short
from decisionflow_server.foundation.proposal_json import ProposalContent, proposal_from_json
from decisionflow_server.runtime.auth import bearer_metadata

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider


def _content(workspace: ws.Workspace, name: str, case_id: str) -> ProposalContent:
    document = json.loads(workspace.input(name).read_text(encoding="utf-8"))
    # An edit file holds body, evidence and policy: parsed as the proposal it makes for case_id.
    return proposal_from_json(json.dumps({"case_id": case_id, "action": ws.ACTION, **document}))


def seed_cases(workspace: ws.Workspace, target: str, provider: TrialIdentityProvider, say: Transcript) -> None:
    """Start T-1042 and T-1043 (then edit T-1043) as the author; raise DemoError if the orchestrator refuses."""
    channel = insecure_channel(target)
    try:
        author = ReviewClient(channel, timeout=10.0, metadata=bearer_metadata(provider.access_token(ws.AUTHOR)))
        first = author.start_review(*_content(workspace, f"{ws.CASE_ID}.json", ws.CASE_ID)).proposal
        second = author.start_review(*_content(workspace, f"{ws.STALE_CASE_ID}.json", ws.STALE_CASE_ID)).proposal
        edit = _content(workspace, f"{ws.STALE_CASE_ID}-edit.json", ws.STALE_CASE_ID)
        edited = author.edit_proposal(second.operation_id, edit.body, edit.evidence, edit.policy).proposal
    except DecisionflowError as error:
        raise DemoError(f"seeding the cases failed: {error}") from error
    finally:
        channel.close()
    say.plain(
        f"waiting for review, started by {ws.AUTHOR}: {ws.CASE_ID} ({short(first.operation_id)}), "
        f"{ws.STALE_CASE_ID} ({short(edited.operation_id)}, edited: a source's new version)"
    )
