"""An attempt that takes over the lease of a holder known to have ended (``orchestrator.holders``):
as RECORD_ATTEMPT, with the lease also counted free while that holder's name is on it.

Kept beside RECORD_ATTEMPT (``orchestrator.store._statements``) rather than in it: the same values
and the same answer, one more way for the lease to be free. The holder's name decides the race
between two takers: the first writes its own name, so the second no longer finds the ended one.
"""

from __future__ import annotations

import sqlalchemy as sa

from decisionflow.vocabulary import OperationState
from orchestrator.schema import operations
from orchestrator.store._columns import state_text
from orchestrator.store._statements import _ATTEMPT, _LEASE_FREE, _NOW, _OPEN_ONLY, OPERATION_RETURNING

RECORD_ATTEMPT_OVER_ENDED = (
    operations.update()
    .where(*_OPEN_ONLY, sa.or_(_LEASE_FREE, operations.c.attempt_lease_holder == sa.bindparam("b_ended_holder")))
    .values(
        state_changed_at=sa.case(
            (operations.c.state == state_text(OperationState.UNKNOWN), operations.c.state_changed_at), else_=_NOW
        ),
        **_ATTEMPT,
    )
    .returning(*OPERATION_RETURNING)
)
