"""Act only on events the audit log proves: watch the event feed, and for each event wait until a signed
checkpoint covers it, then check its inclusion proof against that checkpoint, opened with the log's
verifier key. An event the server forged, altered or left out of the log fails here and is not acted on.

    python examples/watch_and_prove.py ORCHESTRATOR_TARGET --public-key FILE [--token-file FILE]
        [--from-index 0] [--count N] [--case-id CASE]

One line per proven event: its index, kind, operation and state, and the checkpoint size it is proven in.
It needs only the light client (``pip install ./clients/python``) and a token whose principal holds the
auditor or operator role (an author may watch only a case they proposed in: give ``--case-id``; the
proofs then need the auditor role). The public key file holds the log's verifier key, one line
(``decisionflow-orchestrator audit-keygen`` printed it beside the signing key).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from decisionflow.channels import open_channel
from decisionflow.client import AuditClient, EventsClient, EventView
from decisionflow.client.errors import BeyondCheckpoint
from decisionflow.client.event_proofs import verify_event
from decisionflow.transparency import NoteVerifier, open_checkpoint

# How long to wait between asks while no signed checkpoint covers an event yet (the orchestrator signs one
# every --audit-interval-seconds).
RETRY_SECONDS = 0.5


def prove(audit: AuditClient, verifier: NoteVerifier, event: EventView) -> int:
    """The size of the checkpoint the event is proven in; raises a TransparencyError when it is not."""
    while True:
        try:
            proofs = audit.inclusion_proofs(leaf_index=event.index)
        except BeyondCheckpoint:
            time.sleep(RETRY_SECONDS)
            continue
        if proofs.checkpoint is None:
            raise RuntimeError(f"no checkpoint came with the proof of leaf {event.index}")
        # Trust comes from the key, never from the server: the checkpoint is opened here, with it.
        checkpoint = open_checkpoint(proofs.checkpoint.signed_note, [verifier])
        verify_event(event, proofs, checkpoint)
        return checkpoint.size


def main() -> None:
    """Watch, prove, then act (here: print)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("target")
    parser.add_argument("--public-key", required=True, type=Path, help="the log's verifier key file")
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--from-index", type=int, default=0)
    parser.add_argument("--count", type=int, default=0, help="stop after N events (0: never)")
    parser.add_argument("--case-id")
    args = parser.parse_args()
    verifier = NoteVerifier.from_vkey(args.public_key.read_text().strip())
    token = args.token_file.read_text().strip() if args.token_file else None
    channel = open_channel(args.target, token=token)
    try:
        events = EventsClient(channel)
        audit = AuditClient(channel)
        stream = events.watch(start_index=args.from_index, case_id=args.case_id)
        for proven, event in enumerate(stream, start=1):
            assert isinstance(event, EventView)
            size = prove(audit, verifier, event)
            print(f"proven #{event.index} {event.kind} {event.operation_id} {event.state.value} in tree {size}")
            if args.count and proven >= args.count:
                return
    finally:
        channel.close()


if __name__ == "__main__":
    main()
