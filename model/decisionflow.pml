/*
 * decisionflow's exactly-once protocol, for spin (docs/model.md maps every step to the code).
 *
 * Orchestrator replicas serve requests over one shared ledger (a replica keeps nothing between
 * requests, so each request runs in its client's process and requests interleave as on separate
 * replicas); every atomic/d_step block over ledger variables is one database transaction of
 * orchestrator/store. One receiver holds the effects table keyed by operation id (with the
 * payload digest) and a read replica that may lag.
 * Two authors propose and edit one case, two reviewers approve or decline the operation id they
 * read, a reconciler settles and re-drives, replies may be lost and replicas may crash, also while
 * their attempt holds the operation's lease (which then stays until it passes).
 * Every review runs under a rule: stages in order, stage k complete at NEED(k) distinct eligible
 * approvals, one eligible decline ends it. By default the rule is today's (one stage, any reviewer,
 * one approval); -DRULES=1 checks a two-stage rule with an author and an escalation reviewer among
 * the approvers, and the deadlines job that escalates stages and expires the review (its review
 * has started in init: StartReview and edits are the other configurations' part).
 *
 * Bounds are #defines, overridable with -D. Seeded faults remove one guard each:
 *   -DNO_UNIQUE_KEY -DNO_CONFLICT_CHECK -DNO_STALE_CHECK -DNO_ATTEMPT_RECORD
 *   -DNO_RETENTION_RULE -DNO_OPEN_CHECK -DNO_RECEIVER_RETENTION
 * and, with -DRULES=1: -DCHECK_THEN_INSERT -DAUTHOR_COUNTS -DNO_EXPIRY_RECHECK
 * -DAGE_ANYTIME drops the assumption that requests and passes are shorter than the key retention
 * (the receiver's own retention check keeps property 1 without it; with -DNO_RECEIVER_RETENTION
 * it fails).
 * -DLIVENESS builds the liveness configuration (a reconciler that never stops, strong lookups)
 * checked with the ltl formula `settles` (spin -a; pan -a -f) and the assertion that one pass
 * settles once faults have stopped and no lease holds; -DEVENTUAL_LOOKUPS and -DNO_LEASE_EXPIRY
 * are its faults.
 */

#ifndef NOPS
#define NOPS 2          /* operation ids 1..NOPS, one per proposal content */
#endif
#ifndef AUTHOR_REQS
#define AUTHOR_REQS 1   /* StartReview/EditProposal requests per author */
#endif
#ifndef RETRIES
#define RETRIES 1       /* retries (same request) per client after a lost reply */
#endif
#ifndef LOSSES
#define LOSSES 1        /* replies lost in the network (orchestrator's or receiver's) */
#endif
#ifndef CRASHES
#define CRASHES 1       /* replica crashes inside a request */
#endif
#ifndef AUTHORS
#define AUTHORS 2       /* authors proposing and editing the case (1 or 2) */
#endif
#ifndef REVIEWERS
#define REVIEWERS 2     /* reviewers deciding (1 to 3; the second may decline) */
#endif
#ifndef PASSES
#define PASSES 2        /* reconciler passes (ignored with LIVENESS: it never stops) */
#endif
#ifndef RULES
#define RULES 0         /* 0: the default rule; 1: the two-stage rule below, with the deadlines job */
#endif
#ifndef AUTHOR_APPROVES
#define AUTHOR_APPROVES RULES   /* with RULES: the proposal's author also sends an Approve of it */
#endif
#ifndef ESCALATION_REQS
#define ESCALATION_REQS RULES   /* Approve requests of the reviewer an escalation adds (0 to 2) */
#endif

#define NONE 0
/* operation states (orchestrator/domain.py State) */
#define PENDING   1
#define APPROVED  2
#define DECLINED  3
#define UNKNOWN   4
#define COMMITTED 5
#define REJECTED  6
#define EXPIRED   7
/* decisions */
#define APPROVE 1
#define DECLINE 2
#define EXPIRE  3       /* the deadlines job ended the review */
/* requests */
#define START   1
#define EDIT    2
#define DECIDE  3
#define REDRIVE 4
/* replies; an outcome is OUTCOME + state */
#define R_LOST      1   /* no reply: UNAVAILABLE / DEADLINE_EXCEEDED (lost or crashed) */
#define R_CREATED   2   /* the proposal is now the case's current one */
#define R_EXISTS    3   /* idempotent replay of a proposal; nothing moved */
#define R_OPEN      4   /* CASE_HAS_OPEN_PROPOSAL */
#define R_STALE     5   /* STALE_PROPOSAL */
#define R_NOTFOUND  6
#define R_CONFLICT  7   /* DECISION_CONFLICT */
#define R_NOTREDRIVABLE 8
#define R_PENDING   9   /* the approval is recorded (or was: a replay); the review goes on */
#define R_NOT_ELIGIBLE 10 /* PERMISSION_DENIED: an author, or not in the current stage's groups */
#define R_EXPIRED  11   /* the review expired before this decision */
#define OUTCOME    20
/* receiver answers */
#define A_NONE     0
#define A_OK       1    /* CREATED or REPLAYED, with the receipt */
#define A_REFUSED  2    /* IDEMPOTENCY_KEY_REUSED */
#define A_LOST     3    /* indeterminate */
#define A_RETAINED 4    /* KEY_RETENTION_EXCEEDED: nothing written, the effect may exist (indeterminate) */
/* principals (each client is one); the reconciler is not one */
#define AUTHOR1    0
#define AUTHOR2    1
#define REVIEWER1  2
#define REVIEWER2  3
#define REVIEWER3  4    /* the second stage's reviewer in the two-stage rule */
#define ESCALATION 5    /* the reviewer an escalation of a stage adds */
#define RECONCILER 6
#define NPRINCIPALS 6
#if !RULES
#define CLIENTS (AUTHORS + REVIEWERS)
#else
#define CLIENTS (REVIEWERS + AUTHOR_APPROVES + (ESCALATION_REQS > 0))
#endif
#define BIT(p) (1 << (p))
#define IN(set, p) ((((set) >> (p)) & 1) == 1)

/* The review rule (captured with the proposal at StartReview; the model checks one rule per run,
   so a rule changed later cannot reach a review in flight). */
#if RULES
#define STAGES 2
#ifndef NEED1
#define NEED1 2         /* 2 of {REVIEWER1, REVIEWER2, AUTHOR1}: the author never counts */
#endif
#ifndef GROUP1
#define GROUP1 (BIT(REVIEWER1) | BIT(REVIEWER2) | BIT(AUTHOR1))
#endif
#ifndef NEED2
#define NEED2 1         /* then 1 of {REVIEWER3} */
#endif
#ifndef GROUP2
#define GROUP2 BIT(REVIEWER3)
#endif
#ifndef DECLINERS
#define DECLINERS (BIT(REVIEWER2) | BIT(ESCALATION))
#endif
#else
/* the default rule: one stage, any reviewer, one approval, one decline ends it */
#define STAGES 1
#define NEED1 1
#define GROUP1 (BIT(NPRINCIPALS) - 1)
#define NEED2 0
#define GROUP2 0
#ifndef DECLINERS
#define DECLINERS BIT(REVIEWER2)
#endif
#endif
#define NEED(k) ((k) == 1 -> NEED1 : NEED2)
#define GROUP(k) ((k) == 1 -> GROUP1 : GROUP2)

#define OPEN(s) ((s) == APPROVED || (s) == UNKNOWN)
#define SETTLED(o) (state[o] == COMMITTED || state[o] == REJECTED || escalated[o])
#if NOPS >= 3
#define NO_LEASE (!leased[1] && !leased[2] && !leased[3])
#define ALL_SETTLED ((!OPEN(state[1]) || SETTLED(1)) && (!OPEN(state[2]) || SETTLED(2)) && (!OPEN(state[3]) || SETTLED(3)))
#elif NOPS >= 2
#define NO_LEASE (!leased[1] && !leased[2])
#define ALL_SETTLED ((!OPEN(state[1]) || SETTLED(1)) && (!OPEN(state[2]) || SETTLED(2)))
#else
#define NO_LEASE (!leased[1])
#define ALL_SETTLED (!OPEN(state[1]) || SETTLED(1))
#endif

/* ---- the orchestrator's ledger (shared by every replica) ---- */
byte current;                  /* cases.current_operation_id */
bool proposed[NOPS + 1];       /* proposals row exists */
byte state[NOPS + 1];          /* operations.state */
byte decision[NOPS + 1];       /* decisions row (primary key operation_id) */
byte decided_by[NOPS + 1];     /* decisions.reviewer */
bool attempted[NOPS + 1];      /* operations.first_attempt_at is set */
byte payload[NOPS + 1];        /* operations.payload_digest, stored with the first attempt */
bool leased[NOPS + 1];         /* operations.attempt_lease_until: an attempt holds it, not yet passed */
byte lease_holder[NOPS + 1];   /* operations.attempt_lease_holder: the client whose attempt took it, + 1 */
byte created_by[NOPS + 1];     /* proposals.created_by, + 1 */
/* The review: one approvals row per (operation_id, principal), holding the stage it counted in (or
   DECLINED_VOTE); the stages completed; the stages escalated (bit k: its groups now include ESCALATION). */
byte vote[(NOPS + 1) * NPRINCIPALS];
byte stages_done[NOPS + 1];
byte stage_escalated[NOPS + 1];

/* ---- the receiver ---- */
bool effect[NOPS + 1];         /* effects row on the primary (unique operation_id) */
byte effect_digest[NOPS + 1];  /* effects.payload_digest */

/* ---- time: the first Apply older than the receiver's key retention ---- */
bool sent[NOPS + 1];           /* an Apply of this key has reached the receiver */
bool old[NOPS + 1];            /* ... longer ago than the key retention */
bool in_pass;                  /* a reconciler pass is running (passes are shorter than the retention) */
byte clients_done;
bool passes_done, deadlines_done;

/* ---- ghosts for the properties ---- */
byte written[NOPS + 1];            /* effects ever inserted under the key (pruning does not undo) */
bool current_at_decision[NOPS + 1];
byte first_decision[NOPS + 1];
byte acked_decision[NOPS + 1];
bool acked_proposal[NOPS + 1];
byte saw[NPRINCIPALS];              /* the operation id each reviewer read */
bool escalated[NOPS + 1];
/* the rule as a specification: approvals counted one at a time, in order, each by a principal
   eligible for the stage then open who has not counted before */
byte spec_stages_done[NOPS + 1];
byte spec_given[NOPS + 1];       /* approvals counted in the stage now open */
byte spec_counted[NOPS + 1];     /* principals counted so far, in any stage */

byte losses, crashes;

/* The attempt lease (orchestrator/service/_attempts.py): taken with the attempt record, in the same
   transaction; ended by a receipt, a rejection or a settling lookup; given up by its holder after an
   indeterminate answer (only its own: a lease that passed and was taken again is not). A holder that
   crashes leaves it until it passes. */
inline take_lease(o, w) { leased[o] = 1; lease_holder[o] = w + 1 }
inline end_lease(o) { leased[o] = 0; lease_holder[o] = 0 }
inline release_lease(o, w) { if :: lease_holder[o] == w + 1 -> end_lease(o) :: else -> skip fi }


/* property 3 and 4 (decisions): a recorded or acknowledged decision never changes */
inline write_decision(o, d, r) {
  assert(first_decision[o] == NONE || first_decision[o] == d);
  assert(acked_decision[o] == NONE || acked_decision[o] == d);
  /* property 5: the reviewer decides the operation id it read */
  assert(saw[r] == o);
  if :: first_decision[o] == NONE -> first_decision[o] = d :: else -> skip fi;
  decision[o] = d;
  decided_by[o] = r + 1;
  state[o] = (d == APPROVE -> APPROVED : DECLINED);
  current_at_decision[o] = (current == o)
}

#define GO 1
#define ATTEMPTED 2   /* GO, the attempt already recorded with the decision */
#define REPLIED 9     /* the request has ended and its reply has arrived (or was lost) */

/* The reply may be lost on its way to the client; a client that gets it knows the answer. done:
   the client has finished (it will not retry). */
inline reply_arrives(req, op, arg, res, done) {
  if :: res != R_LOST && losses < LOSSES -> losses++; res = R_LOST :: true -> skip fi;
  if
  :: res == R_CREATED -> acked_proposal[op] = 1
  :: res > OUTCOME && req == DECIDE -> acked_decision[op] = arg
  :: else -> skip
  fi;
  if :: done -> clients_done++ :: else -> skip fi
}

/* The deadlines job's expiry (one transaction): the review ends EXPIRED only if no decision is
   recorded by then; it races the approval that completes the last stage. */
inline expire_open(o) {
#ifndef NO_EXPIRY_RECHECK
  if
  :: decision[o] == NONE ->
#endif
     /* properties 3 and 4: the review's end is recorded once, and no acknowledged decision is lost */
     assert(first_decision[o] == NONE && acked_decision[o] == NONE);
     /* property 9: never both an effect and an end other than APPROVED */
     assert(written[o] == 0);
     first_decision[o] = EXPIRE;
     decision[o] = EXPIRE;
     state[o] = EXPIRED
#ifndef NO_EXPIRY_RECHECK
  :: else -> skip
  fi
#endif
}

/* The review rule's approvals rows, keyed (operation_id, principal). */
#define DECLINED_VOTE 9
#define VOTE(o, p) vote[(o) * NPRINCIPALS + (p)]
#define GIVEN(o, k) ((VOTE(o, 0) == (k)) + (VOTE(o, 1) == (k)) + (VOTE(o, 2) == (k)) + (VOTE(o, 3) == (k)) + (VOTE(o, 4) == (k)) + (VOTE(o, 5) == (k)))
#define AUTHORED(p, o) (created_by[o] == (p) + 1)
#define IN_STAGE(p, o, k) (IN(GROUP(k), p) || ((p) == ESCALATION && IN(stage_escalated[o], k)))
#define SPEC_ELIGIBLE(p, o, k) (!AUTHORED(p, o) && IN_STAGE(p, o, k))
#ifndef AUTHOR_COUNTS
#define ELIGIBLE(p, o, k) SPEC_ELIGIBLE(p, o, k)
#else
#define ELIGIBLE(p, o, k) IN_STAGE(p, o, k)   /* seeded fault: four-eyes forgotten */
#endif

/* The rule as a specification, at every approvals insert: property 10, no approval is counted
   once the review has ended; it counts towards the stage now open if its principal is eligible
   there and has not counted before (in any stage). */
inline spec_count(o, p) {
  assert(decision[o] == NONE);
  if
  :: spec_stages_done[o] < STAGES && SPEC_ELIGIBLE(p, o, spec_stages_done[o] + 1) && !IN(spec_counted[o], p) ->
     spec_counted[o] = spec_counted[o] | BIT(p);
     spec_given[o]++;
     if
     :: spec_given[o] == NEED(spec_stages_done[o] + 1) -> spec_stages_done[o]++; spec_given[o] = 0
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* An Approve or Decline with no decision recorded and the proposal current (checked by the caller's
   transaction): one transaction inserts the principal's approvals row and re-reads the approvals of
   the stage now open; the insert that completes the last stage records the decision APPROVED and
   the first attempt (the commit step); a decline ends the review. A principal's row exists once
   per operation, so a principal counts once in all stages, and its retry is a replay.
   -DCHECK_THEN_INSERT: the stage and its approvals are read before this transaction (k, given). */
inline record_vote(o, d, p, k, given, res, ans) {
#ifndef CHECK_THEN_INSERT
  k = stages_done[o] + 1;
  given = GIVEN(o, k);
#endif
  if
  :: VOTE(o, p) != NONE ->
     if
     :: (VOTE(o, p) == DECLINED_VOTE) != (d == DECLINE) -> res = R_CONFLICT
     :: else -> res = R_PENDING
     fi
  :: VOTE(o, p) == NONE && !ELIGIBLE(p, o, k) -> res = R_NOT_ELIGIBLE
  :: VOTE(o, p) == NONE && ELIGIBLE(p, o, k) ->
     if
     :: d == DECLINE ->
        VOTE(o, p) = DECLINED_VOTE;
        /* property 9: only an eligible decline ends a review, never after an effect */
        assert(SPEC_ELIGIBLE(p, o, spec_stages_done[o] + 1) && written[o] == 0);
        write_decision(o, d, p)
     :: d == APPROVE ->
        VOTE(o, p) = k;
        spec_count(o, p);
        if :: given + 1 >= NEED(k) -> stages_done[o]++ :: else -> skip fi;
        if
        :: stages_done[o] >= STAGES ->
           write_decision(o, d, p)
#ifndef NO_ATTEMPT_RECORD
           ; state[o] = UNKNOWN; attempted[o] = 1; payload[o] = decided_by[o]; take_lease(o, p)
#endif
        :: else -> skip
        fi
     fi;
     if
     :: crashes < CRASHES -> crashes++; res = R_LOST
     :: decision[o] == DECLINE -> res = OUTCOME + DECLINED
#ifndef NO_ATTEMPT_RECORD
     :: decision[o] == APPROVE -> ans = ATTEMPTED
#else
     :: decision[o] == APPROVE -> ans = GO
#endif
     :: decision[o] == NONE -> res = R_PENDING
     fi
  fi
}

/* property 4 (proposals): an acknowledged undecided current proposal is replaced only by a
   compare-and-set naming it */
inline replace_current(c, e) {
  assert(current == NONE || !acked_proposal[current] || decision[current] != NONE || e == current);
  current = c
}

/* EffectReceiver.Apply: one transaction on the unique key (effect_receiver/store.py apply).
   The request carries the operation's first attempt when one is recorded (attempted[o]); a first
   Apply older than the retention (old[o]) means that first attempt is older still, so the receiver
   (effect_receiver/service.py apply, store.py replay) may only replay: an absent key is refused. */
inline receiver_apply(o, digest, ans) {
  {
#ifndef NO_RECEIVER_RETENTION
    if
    :: attempted[o] && old[o] && !effect[o] -> ans = A_RETAINED      /* KEY_RETENTION_EXCEEDED */
    :: else ->
#endif
    sent[o] = 1;
#ifndef NO_UNIQUE_KEY
    if
    :: effect[o] && effect_digest[o] == digest -> ans = A_OK          /* REPLAYED */
    :: effect[o] && effect_digest[o] != digest -> ans = A_REFUSED     /* IDEMPOTENCY_KEY_REUSED */
    :: else ->
#endif
       effect[o] = 1; effect_digest[o] = digest; written[o]++; ans = A_OK
#ifndef NO_UNIQUE_KEY
    fi
#endif
    ;
    /* property 1: at most one effect per operation id */
    assert(written[o] <= 1);
    /* property 2: an effect only for an approved operation that was current at decision time */
    assert(decision[o] == APPROVE && current_at_decision[o]);
    /* property 8: an effect only once every stage has its approvals, in order, by distinct
       eligible principals who are not the proposal's authors */
    assert(spec_stages_done[o] == STAGES)
#ifndef NO_RECEIVER_RETENTION
    fi
#endif
  }
}

/* One request on an orchestrator replica. Replicas keep nothing between requests, so the
   replica serving a client's request runs in the client's process: every client's requests
   interleave with every other's over the shared ledger, as on separate replicas. The caller
   declares seen, st, ans, k and given. res is the reply the client gets (R_LOST when it got none);
   done, evaluated as the reply arrives, says whether the client has finished (counted in
   clients_done in the same step).
   A crash or a lost reply right after a transaction is folded into that transaction's atomic
   step: nothing else of the request happens in between. */
inline serve(req, who, op, arg, exp, res, done) {
  res = NONE;
  if
  :: req == START ->
     /* ProposalService.start_review: find_proposal, then create_proposal (one transaction; its
        insert on the primary key repeats the existence check, so the earlier read is folded in) */
     d_step {
       if
       :: proposed[op] -> res = R_EXISTS
#ifndef NO_OPEN_CHECK
       :: !proposed[op] && current != NONE && decision[current] == NONE && exp != current -> res = R_OPEN
       :: !proposed[op] && !(current != NONE && decision[current] == NONE && exp != current) ->
#else
       :: !proposed[op] ->
#endif
          proposed[op] = 1; state[op] = PENDING; created_by[op] = who + 1;
          replace_current(op, exp);
          res = R_CREATED
       fi
     }
  :: req == EDIT ->
     /* ProposalService.edit_proposal: get_proposal and current_operation_id (reads) */
     d_step {
       if
       :: !proposed[exp] -> res = R_NOTFOUND
       :: proposed[exp] && current != exp -> res = R_STALE
       :: proposed[exp] && current == exp && op == exp -> res = R_EXISTS
       :: else -> skip
       fi
     };
     if
     :: res == NONE ->
        /* create_edit: insert (or reuse) the proposal, move current by compare-and-set */
        d_step {
          if
          :: current == exp ->
             if :: !proposed[op] -> proposed[op] = 1; state[op] = PENDING; created_by[op] = who + 1 :: else -> skip fi;
             replace_current(op, exp);
             res = R_CREATED
          :: else -> res = R_STALE      /* rolled back: nothing inserted */
          fi
        }
     :: else -> skip
     fi
  :: req == DECIDE ->
     /* DecisionService.decide: decision_inputs, one snapshot */
#ifndef CHECK_THEN_INSERT
     d_step { st = decision[op]; seen = current };
#else
     /* seeded fault: the stage and its approvals read here, outside the insert's transaction */
     d_step { st = decision[op]; seen = current; k = stages_done[op] + 1; given = GIVEN(op, k) };
#endif
     if
     :: st == NONE ->
#ifndef NO_STALE_CHECK
        if :: seen != op -> res = R_STALE :: else -> skip fi;
#endif
        if
        :: res == NONE ->
           /* the workflow resumes; its commit step: the approvals insert (one transaction; the one
              that completes the rule records the decision and the first attempt in it too), then
              failpoints AFTER_DECISION, AFTER_ATTEMPT */
           atomic {
             if
             :: decision[op] != NONE -> st = decision[op]             /* DecisionAlreadyRecorded */
#ifndef NO_STALE_CHECK
             :: decision[op] == NONE && current != op -> res = R_STALE
             :: decision[op] == NONE && current == op ->
#else
             :: decision[op] == NONE ->
#endif
                record_vote(op, arg, who, k, given, res, ans)
             fi;
             /* a request that ends here gets its reply in this step */
             if :: res != NONE -> reply_arrives(req, op, arg, res, done); ans = REPLIED :: else -> skip fi
           }
        :: else -> skip
        fi
     :: else -> skip
     fi;
     if
     :: res == NONE && ans != GO && ans != ATTEMPTED ->
        /* DecisionService._replay: st is the recorded decision; after an end, nothing is counted */
        if
        :: st == EXPIRE -> res = R_EXPIRED
        :: st != EXPIRE && st != arg ->
#ifndef NO_CONFLICT_CHECK
           res = R_CONFLICT
#else
           /* seeded fault: the later decision overwrites the recorded one */
           d_step { write_decision(op, arg, who) }
#endif
        :: else -> skip
        fi;
        if
        :: res == NONE ->
           d_step { if :: arg == APPROVE && OPEN(state[op]) -> ans = GO :: else -> res = OUTCOME + state[op] fi }
        :: else -> skip
        fi
     :: else -> skip
     fi
  :: req == REDRIVE ->
     /* OperationService.redrive */
     d_step { if :: OPEN(state[op]) && decision[op] != NONE -> ans = GO :: else -> res = R_NOTREDRIVABLE fi }
  fi;
  if
  :: res == NONE && (ans == GO || ans == ATTEMPTED) ->
     /* DecisionService.drive (a replay or re-drive), or the commit step's Apply */
#ifndef NO_ATTEMPT_RECORD
     /* record_attempt (one transaction, before Apply) under the lease, then failpoint
        AFTER_ATTEMPT; the commit step recorded its attempt and lease with the decision */
     if
     :: ans == ATTEMPTED -> ans = GO
     :: else ->
        atomic {
          if
          :: OPEN(state[op]) && !leased[op] ->
             state[op] = UNKNOWN; attempted[op] = 1; take_lease(op, who);
             if :: payload[op] == NONE -> payload[op] = decided_by[op] :: else -> skip fi;
             if :: crashes < CRASHES -> crashes++; res = R_LOST :: true -> skip fi
          /* AttemptInFlight: another attempt holds the lease; this caller's deadline passes first
             (waiting for the lease is a later request: a retry or the next pass) */
          :: OPEN(state[op]) && leased[op] -> res = OUTCOME + state[op]
          :: !OPEN(state[op]) -> res = OUTCOME + state[op]          /* NotRedrivable */
          fi
        }
     fi;
     if
     :: res == NONE ->
        /* Apply: the request may be lost before the receiver, or its answer after it */
        atomic {
          if
          :: losses < LOSSES -> losses++; ans = A_LOST
          :: true -> receiver_apply(op, payload[op], ans);
             if :: losses < LOSSES -> losses++; ans = A_LOST :: true -> skip fi
          fi
        }
     :: else -> skip
     fi;
#else
     /* seeded fault: Apply is sent first; the attempt is recorded only when it answers */
     atomic {
       if
       :: losses < LOSSES -> losses++; ans = A_LOST
       :: true -> receiver_apply(op, decided_by[op], ans);
          if :: losses < LOSSES -> losses++; ans = A_LOST :: true -> skip fi
       fi
     };
     atomic {
       if
       :: crashes < CRASHES -> crashes++; res = R_LOST
       :: true ->
          if
          :: OPEN(state[op]) -> state[op] = UNKNOWN; attempted[op] = 1;
             if :: payload[op] == NONE -> payload[op] = decided_by[op] :: else -> skip fi
          :: else -> skip
          fi
       fi
     };
#endif
     if
     :: res == NONE ->
        /* failpoint AFTER_RECEIVER_OK, then record_receipt / record_rejection (each ends the
           lease); a lost answer leaves the operation UNKNOWN and its holder gives the lease up */
        atomic {
          if
          :: ans == A_OK && crashes < CRASHES -> crashes++; res = R_LOST   /* the lease stays */
          :: ans == A_OK -> if :: OPEN(state[op]) -> state[op] = COMMITTED; end_lease(op) :: else -> skip fi
          :: ans == A_REFUSED -> if :: OPEN(state[op]) -> state[op] = REJECTED; end_lease(op) :: else -> skip fi
          :: ans == A_LOST || ans == A_RETAINED -> release_lease(op, who)  /* stays UNKNOWN */
          fi;
          if :: res == NONE -> res = OUTCOME + state[op] :: else -> skip fi
        }
     :: else -> skip
     fi
  :: else -> skip
  fi;
  if
  :: ans == REPLIED -> d_step { seen = 0; st = 0; ans = 0; k = 0; given = 0 }
  :: else -> atomic { reply_arrives(req, op, arg, res, done); seen = 0; st = 0; ans = 0; k = 0; given = 0 }
  fi
}

/* An author: reads the case's current proposal, then starts a review or edits; retries a lost reply. */
proctype Author(byte me) {
  byte n, req, content, exp, res, tries, seen, st, ans, k, given;
  do
  :: n < AUTHOR_REQS ->
     d_step { exp = current };
     if
     :: me == AUTHOR1 && n == 0 ->
        /* contents are interchangeable, so the first author's first request is fixed */
        req = START; exp = NONE; content = 1
     :: else ->
        if
        :: req = START; exp = NONE          /* StartReview naming no proposal */
        :: req = START                      /* StartReview naming the proposal it saw */
        :: exp != NONE -> req = EDIT        /* EditProposal of the proposal it saw */
        fi;
        atomic { select(content : 1 .. NOPS) }
     fi;
     tries = 0;
again:
     serve(req, me, content, NONE, exp, res,
           n + 1 == AUTHOR_REQS && !(res == R_LOST && tries < RETRIES));
     if :: res == R_LOST && tries < RETRIES -> tries++; goto again :: else -> skip fi;
     d_step { n++; req = 0; content = 0; exp = 0; res = 0; tries = 0 }
  :: else -> break
  od
}

/* A reviewer: reads the current proposal's operation id and decides exactly that one (approves, or
   declines if it is one of DECLINERS), requests times, retrying a lost reply. */
proctype Reviewer(byte me; byte requests) {
  byte n, d, op, res, tries, seen, st, ans, k, given;
  do
  :: n < requests ->
     if
     :: d = APPROVE
     :: IN(DECLINERS, me) -> d = DECLINE
     fi;
#if !RULES
end_wait:
     d_step { current != NONE -> op = current; saw[me] = op };
#else
     op = 1;   /* the one proposal, current from the start (init) */
#endif
again:
     serve(DECIDE, me, op, d, NONE, res, n + 1 == requests && !(res == R_LOST && tries < RETRIES));
     if :: res == R_LOST && tries < RETRIES -> tries++; goto again :: else -> skip fi;
     d_step { n++; d = 0; res = 0; tries = 0 }
  :: else -> break
  od
}

/* reconciler/service.py run_pass with reconciler/domain.py decide, per operation */
proctype Reconciler() {
  byte pass, op, listed, approved, was_attempted, found, strong, res, seen, st, ans, k, given;
  byte req = REDRIVE, who = RECONCILER, arg = NONE, exp = NONE;
#ifdef LIVENESS
  bool calm;   /* this pass started with faults stopped, every client done and no lease held */
  do
  :: true ->
     /* faults may stop at any point (their budgets spent), never to return */
     if :: atomic { losses = LOSSES; crashes = CRASHES } :: skip fi;
     atomic { in_pass = 1; calm = (losses == LOSSES && crashes == CRASHES && clients_done == CLIENTS && NO_LEASE) };
#else
  do
  :: pass < PASSES ->
     in_pass = 1;
#endif
     op = 1;
     do
     :: op <= NOPS ->
        /* ListOperations: APPROVED and UNKNOWN */
        d_step { listed = state[op]; approved = (decision[op] == APPROVE); was_attempted = attempted[op] };
        if
        :: OPEN(listed) ->
           /* BatchLookup: from the primary (strong) or from the lagging replica (eventual) */
#if defined(LIVENESS) && !defined(EVENTUAL_LOOKUPS)
           d_step { found = effect[op]; strong = 1 };
#elif defined(LIVENESS)
           /* seeded fault for property 6: a receiver that answers only from a lagging replica */
           if
           :: d_step { found = effect[op]; strong = 0 }
           :: d_step { written[op] > 0; found = !effect[op]; strong = 0 }
           fi;
#else
           if
           :: d_step { found = effect[op]; strong = 1 }
           /* the replica lags: it shows the primary, or the key as it was before its last change */
           :: d_step { found = effect[op]; strong = 0 }
           :: d_step { written[op] > 0; found = !effect[op]; strong = 0 }
           fi;
#endif
           if
           :: found ->   /* BatchSettleOperations: APPLIED commits an open operation */
              d_step { if :: OPEN(state[op]) -> state[op] = COMMITTED; end_lease(op) :: else -> skip fi }
           :: !found && !approved -> skip                         /* note */
#ifndef NO_RETENTION_RULE
           :: !found && approved && was_attempted && old[op] -> escalated[op] = 1
           :: !found && approved && !(was_attempted && old[op]) ->
#else
           :: !found && approved ->
#endif
              if
              :: strong || listed == APPROVED ->                  /* RedriveOperation */
                 serve(req, who, op, arg, exp, res, false)
              :: else -> skip                                     /* eventual NOT_FOUND of UNKNOWN: note */
              fi
           fi
        :: else -> skip
        fi;
        atomic { op++; listed = 0; approved = 0; was_attempted = 0; found = 0; strong = 0; res = 0 }
     :: else -> break
     od;
#ifdef LIVENESS
#ifndef EVENTUAL_LOOKUPS
     /* property 7: once faults have stopped and no lease holds (a crashed holder's has passed),
        one pass settles every open operation or escalates it */
     assert(!calm || ALL_SETTLED);
#endif
     atomic { in_pass = 0; op = 0; calm = 0 }
#else
     atomic { in_pass = 0; op = 0; pass++ }
#endif
#ifndef LIVENESS
  :: else -> break
#endif
  od;
  passes_done = 1
}

/* Time passes beyond the key retention (only while no client request or reconciler pass is in
   flight: each is far shorter than the retention), and the receiver's operator may prune old keys. */
#ifndef AGE_ANYTIME
#define QUIET (clients_done == CLIENTS && !in_pass)
#else
#define QUIET true   /* -DAGE_ANYTIME drops the assumption: shows the finding in docs/model.md */
#endif
#define AGE(o)   :: d_step { QUIET && sent[o] && !old[o] -> old[o] = 1 }
#define PRUNE(o) :: d_step { QUIET && old[o] && effect[o] -> effect[o] = 0 }
/* An attempt's lease passes: at any moment, since its holder may be slow as well as crashed (its
   Apply ends within the budget, but recording the answer may overrun the margin on a saturated
   machine). -DNO_LEASE_EXPIRY: a lease that never passes while the reconciler keeps trying. */
#ifndef NO_LEASE_EXPIRY
#define LEASE_PASSES(o) :: d_step { leased[o] -> leased[o] = 0; lease_holder[o] = 0 }
#else
#define LEASE_PASSES(o)
#endif
proctype Retention() {
end_age:
  do
  AGE(1) PRUNE(1) LEASE_PASSES(1)
#if NOPS >= 2
  AGE(2) PRUNE(2) LEASE_PASSES(2)
#endif
#if NOPS >= 3
  AGE(3) PRUNE(3) LEASE_PASSES(3)
#endif
  od
}

#if RULES
#if NOPS != 1
#error "the two-stage rule is checked on one proposal: -DRULES=1 needs NOPS=1"
#endif
/* The deadlines job (one runner across replicas). At any moment it may escalate a stage not yet
   complete (its groups then include ESCALATION); once the deadline has passed it lists the open
   reviews and expires each in its own transaction, only if no decision is recorded by then. It may
   also stop first (the run ends before the deadline). */
#define ESCALATE(o, k) :: d_step { proposed[o] && decision[o] == NONE && stages_done[o] < (k) && !IN(stage_escalated[o], k) -> stage_escalated[o] = stage_escalated[o] | BIT(k) }
proctype Deadlines() {
  bool due;
  do
  ESCALATE(1, 1)
  ESCALATE(1, 2)
  :: d_step { due = (proposed[1] && decision[1] == NONE) };
     if
     :: due -> atomic { expire_open(1) }
     :: else -> skip
     fi;
     break
  :: break
  od;
  deadlines_done = 1
}

/* property 11: once every client, the job and the reconciler have finished, the review has ended
   (or waits) in a state the rule allows, and a quorum the approvals reached has been acted on */
inline final_state(o) {
  assert(decision[o] != NONE || (state[o] == PENDING && written[o] == 0));
  assert(decision[o] != DECLINE || (state[o] == DECLINED && written[o] == 0));
  assert(decision[o] != EXPIRE || (state[o] == EXPIRED && written[o] == 0));
  assert(decision[o] != APPROVE || OPEN(state[o]) || state[o] == COMMITTED || state[o] == REJECTED);
  assert(state[o] != COMMITTED || written[o] == 1);
  assert(spec_stages_done[o] < STAGES || decision[o] == APPROVE)
}
#endif

init {
  atomic {
#if !RULES
    run Author(AUTHOR1);
#if AUTHORS >= 2
    run Author(AUTHOR2);
#endif
#else
    /* The review has started: AUTHOR1's StartReview (checked by the other configurations) recorded
       the proposal, current from now on, and every reviewer has read its operation id. */
    proposed[1] = 1; state[1] = PENDING; created_by[1] = AUTHOR1 + 1; current = 1; acked_proposal[1] = 1;
    saw[AUTHOR1] = 1; saw[REVIEWER1] = 1; saw[REVIEWER2] = 1; saw[REVIEWER3] = 1; saw[ESCALATION] = 1;
#endif
    run Reviewer(REVIEWER1, 1);
#if REVIEWERS >= 2
    run Reviewer(REVIEWER2, 1);
#endif
#if REVIEWERS >= 3
    run Reviewer(REVIEWER3, 1);
#endif
#if RULES && AUTHOR_APPROVES
    run Reviewer(AUTHOR1, 1);
#endif
#if ESCALATION_REQS > 0
    run Reviewer(ESCALATION, ESCALATION_REQS);
#endif
#if RULES
    run Deadlines();
#endif
    run Reconciler();
    run Retention()
  };
#if RULES && !defined(LIVENESS)
end_final:
  d_step { clients_done == CLIENTS && deadlines_done && passes_done -> final_state(1) }
#endif
}

#ifdef LIVENESS
/* property 6: an open (APPROVED or UNKNOWN) operation is eventually settled or escalated */
#if NOPS >= 2
ltl settles { [] ((OPEN(state[1]) -> <> SETTLED(1)) && (OPEN(state[2]) -> <> SETTLED(2))) }
#else
ltl settles { [] (OPEN(state[1]) -> <> SETTLED(1)) }
#endif
#endif
