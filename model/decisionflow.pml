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
 *
 * Bounds are #defines, overridable with -D. Seeded faults remove one guard each:
 *   -DNO_UNIQUE_KEY -DNO_CONFLICT_CHECK -DNO_STALE_CHECK -DNO_ATTEMPT_RECORD
 *   -DNO_RETENTION_RULE -DNO_OPEN_CHECK -DNO_RECEIVER_RETENTION
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
#define REVIEWERS 2     /* reviewers deciding (1 or 2; the second may decline) */
#endif
#ifndef PASSES
#define PASSES 2        /* reconciler passes (ignored with LIVENESS: it never stops) */
#endif

#define NONE 0
/* operation states (orchestrator/domain.py State) */
#define PENDING   1
#define APPROVED  2
#define DECLINED  3
#define UNKNOWN   4
#define COMMITTED 5
#define REJECTED  6
/* decisions */
#define APPROVE 1
#define DECLINE 2
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
#define OUTCOME    10
/* receiver answers */
#define A_NONE     0
#define A_OK       1    /* CREATED or REPLAYED, with the receipt */
#define A_REFUSED  2    /* IDEMPOTENCY_KEY_REUSED */
#define A_LOST     3    /* indeterminate */
#define A_RETAINED 4    /* KEY_RETENTION_EXCEEDED: nothing written, the effect may exist (indeterminate) */
/* clients */
#define AUTHOR1   0
#define AUTHOR2   1
#define REVIEWER1 2
#define REVIEWER2 3
#define RECONCILER 4
#define NCLIENTS  4     /* authors and reviewers; the reconciler is not counted */

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

/* ---- the receiver ---- */
bool effect[NOPS + 1];         /* effects row on the primary (unique operation_id) */
byte effect_digest[NOPS + 1];  /* effects.payload_digest */

/* ---- time: the first Apply older than the receiver's key retention ---- */
bool sent[NOPS + 1];           /* an Apply of this key has reached the receiver */
bool old[NOPS + 1];            /* ... longer ago than the key retention */
bool in_pass;                  /* a reconciler pass is running (passes are shorter than the retention) */
byte clients_done;

/* ---- ghosts for the properties ---- */
byte written[NOPS + 1];            /* effects ever inserted under the key (pruning does not undo) */
bool current_at_decision[NOPS + 1];
byte first_decision[NOPS + 1];
byte acked_decision[NOPS + 1];
bool acked_proposal[NOPS + 1];
byte saw[NCLIENTS];                /* the operation id each reviewer read */
bool escalated[NOPS + 1];

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
    assert(decision[o] == APPROVE && current_at_decision[o])
#ifndef NO_RECEIVER_RETENTION
    fi
#endif
  }
}

/* One request on an orchestrator replica. Replicas keep nothing between requests, so the
   replica serving a client's request runs in the client's process: every client's requests
   interleave with every other's over the shared ledger, as on separate replicas. The caller
   declares seen, st and ans. res is the reply the client gets (R_LOST when it got none).
   A crash or a lost reply right after a transaction is folded into that transaction's atomic
   step: nothing else of the request happens in between. */
#define GO 1
#define ATTEMPTED 2   /* GO, the attempt already recorded with the decision */
inline serve(req, who, op, arg, exp, res) {
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
          proposed[op] = 1; state[op] = PENDING;
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
             if :: !proposed[op] -> proposed[op] = 1; state[op] = PENDING :: else -> skip fi;
             replace_current(op, exp);
             res = R_CREATED
          :: else -> res = R_STALE      /* rolled back: nothing inserted */
          fi
        }
     :: else -> skip
     fi
  :: req == DECIDE ->
     /* DecisionService.decide: decision_inputs, one snapshot */
     d_step { st = decision[op]; seen = current };
     if
     :: st == NONE ->
#ifndef NO_STALE_CHECK
        if :: seen != op -> res = R_STALE :: else -> skip fi;
#endif
        if
        :: res == NONE ->
           /* the workflow resumes; its commit step: record_decision (one transaction; an approval's
              first attempt is recorded in it too), then failpoints AFTER_DECISION, AFTER_ATTEMPT */
           atomic {
             if
             :: decision[op] != NONE -> st = decision[op]             /* DecisionAlreadyRecorded */
#ifndef NO_STALE_CHECK
             :: decision[op] == NONE && current != op -> res = R_STALE
             :: decision[op] == NONE && current == op ->
#else
             :: decision[op] == NONE ->
#endif
                write_decision(op, arg, who);
#ifndef NO_ATTEMPT_RECORD
                if
                :: arg == APPROVE ->
                   state[op] = UNKNOWN; attempted[op] = 1; payload[op] = decided_by[op]; take_lease(op, who)
                :: else -> skip
                fi;
#endif
                if
                :: crashes < CRASHES -> crashes++; res = R_LOST
                :: arg == DECLINE -> res = OUTCOME + DECLINED
#ifndef NO_ATTEMPT_RECORD
                :: arg == APPROVE -> ans = ATTEMPTED
#else
                :: arg == APPROVE -> ans = GO
#endif
                fi
             fi
           }
        :: else -> skip
        fi
     :: else -> skip
     fi;
     if
     :: res == NONE && ans != GO && ans != ATTEMPTED ->
        /* DecisionService._replay: st is the recorded decision */
        if
        :: st != arg ->
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
  /* the reply may be lost on its way to the client */
  atomic {
    if :: res != R_LOST && losses < LOSSES -> losses++; res = R_LOST :: true -> skip fi;
    seen = 0; st = 0; ans = 0
  }
}

/* An author: reads the case's current proposal, then starts a review or edits; retries a lost reply. */
proctype Author(byte me) {
  byte n, req, content, exp, res, tries, seen, st, ans;
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
     serve(req, me, content, NONE, exp, res);
     if
     :: res == R_LOST && tries < RETRIES -> tries++; goto again
     :: res == R_CREATED -> acked_proposal[content] = 1
     :: else -> skip
     fi;
     d_step { n++; req = 0; content = 0; exp = 0; res = 0; tries = 0 }
  :: else -> break
  od;
  clients_done++
}

/* A reviewer: reads the current proposal's operation id and decides exactly that one. */
proctype Reviewer(byte me) {
  byte d, op, res, tries, seen, st, ans, req = DECIDE;
  if
  :: me == REVIEWER1 -> d = APPROVE
  :: me != REVIEWER1 -> d = APPROVE
  :: me != REVIEWER1 -> d = DECLINE
  fi;
end_wait:
  d_step { current != NONE -> op = current; saw[me] = op };
again:
  serve(req, me, op, d, NONE, res);
  if
  :: res == R_LOST && tries < RETRIES -> tries++; goto again
  :: res > OUTCOME -> acked_decision[op] = d
  :: else -> skip
  fi;
  clients_done++
}

/* reconciler/service.py run_pass with reconciler/domain.py decide, per operation */
proctype Reconciler() {
  byte pass, op, listed, approved, was_attempted, found, strong, res, seen, st, ans;
  byte req = REDRIVE, who = RECONCILER, arg = NONE, exp = NONE;
#ifdef LIVENESS
  bool calm;   /* this pass started with faults stopped, every client done and no lease held */
  do
  :: true ->
     /* faults may stop at any point (their budgets spent), never to return */
     if :: atomic { losses = LOSSES; crashes = CRASHES } :: skip fi;
     atomic { in_pass = 1; calm = (losses == LOSSES && crashes == CRASHES && clients_done == AUTHORS + REVIEWERS && NO_LEASE) };
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
                 serve(req, who, op, arg, exp, res)
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
  od
}

/* Time passes beyond the key retention (only while no client request or reconciler pass is in
   flight: each is far shorter than the retention), and the receiver's operator may prune old keys. */
#ifndef AGE_ANYTIME
#define QUIET (clients_done == AUTHORS + REVIEWERS && !in_pass)
#else
#define QUIET true   /* -DAGE_ANYTIME drops the assumption: shows the finding in docs/model.md */
#endif
#define AGE(o)   :: d_step { QUIET && sent[o] && !old[o] -> old[o] = 1 }
#define PRUNE(o) :: d_step { QUIET && old[o] && effect[o] -> effect[o] = 0 }
/* An attempt's lease passes: at any moment, since its holder may be slow as well as crashed (its
   Apply ends within the budget, but recording the answer may overrun the margin on a saturated
   machine). -DNO_LEASE_EXPIRY: a lease that never passes while the reconciler keeps trying. */
#ifndef NO_LEASE_EXPIRY
#define EXPIRE(o) :: d_step { leased[o] -> leased[o] = 0; lease_holder[o] = 0 }
#else
#define EXPIRE(o)
#endif
proctype Retention() {
end_age:
  do
  AGE(1) PRUNE(1) EXPIRE(1)
#if NOPS >= 2
  AGE(2) PRUNE(2) EXPIRE(2)
#endif
#if NOPS >= 3
  AGE(3) PRUNE(3) EXPIRE(3)
#endif
  od
}

init {
  atomic {
    run Author(AUTHOR1);
#if AUTHORS >= 2
    run Author(AUTHOR2);
#endif
    run Reviewer(REVIEWER1);
#if REVIEWERS >= 2
    run Reviewer(REVIEWER2);
#endif
    run Reconciler();
    run Retention()
  }
}

#ifdef LIVENESS
/* property 6: an open (APPROVED or UNKNOWN) operation is eventually settled or escalated */
#if NOPS >= 2
ltl settles { [] ((OPEN(state[1]) -> <> SETTLED(1)) && (OPEN(state[2]) -> <> SETTLED(2))) }
#else
ltl settles { [] (OPEN(state[1]) -> <> SETTLED(1)) }
#endif
#endif
