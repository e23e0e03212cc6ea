/*
 * AwoooP's lease protocol: one run, NW workers, the reaper, an operator, a person and the
 * timer sweep, with crashes, partitions (a worker cut from the database), lost replies and
 * clocks whose rate differs from real time within a bound. docs/protocol.md explains every
 * variable and action, the code each action stands for, and the bounds.
 *
 * Variants (spin -D...):
 *   (none)     the rule: the worker's belief ends B + (D - M) after the start of its latest
 *              beat known to have committed; the reaper judges a worker dead by a liveness
 *              token it saw unchanged for D on its own clock, and takes its run only if the
 *              token is still the same (compare-and-set).
 *   OLD_RULE   the rule this replaces: the reaper judges by the age of the liveness row on
 *              the database's clock; the worker's belief ends only when a renewal matches
 *              no row or none succeeded for TTL - INTERVAL.
 *   NO_PAUSE, NO_CANCEL   the operator does not pause, or does not cancel (smaller searches).
 *   NO_APPROVAL  the run has no approval step: it completes after its effectful step.
 *   NO_LATCH   the rule, but a belief that expired comes back when a later beat is
 *              acknowledged (what ctx.lease_held must not do).
 * Time is in ticks; constants can be overridden with -D (docs/protocol.md, "Bounds").
 */

#ifndef NW
#define NW 2            /* worker processes */
#endif
#ifndef D
#define D 8             /* dead_after: 20 s at 2.5 s a tick */
#endif
#ifndef M
#define M 2             /* margin: 5 s */
#endif
#ifndef E
#define E 1             /* a clock's error over any interval it measures, in ticks */
#endif
#ifndef TTL
#define TTL 16          /* lease TTL */
#endif
#ifndef INTERVAL
#define INTERVAL 4      /* lease renewal interval */
#endif
#ifndef MAXATT
#define MAXATT 2        /* max_attempts: claims per segment before the reaper fails the run */
#endif
#ifndef CRASHES
#define CRASHES 1       /* worker processes that die */
#endif
#ifndef PARTITIONS
#define PARTITIONS 1    /* times a worker is cut from the database (each heals) */
#endif
#ifndef LOSSES
#define LOSSES 1        /* statements whose request or reply is lost (transient errors) */
#endif
#ifndef REAPER_FAULTS
#define REAPER_FAULTS 1 /* reaper passes that fail, or reaper restarts: its memory is cleared */
#endif

/* Judgements, with each clock at the worst end of its error (docs/protocol.md, "Clocks"):
 * a worker's clock runs slow (its belief lasts longest), the reaper's runs fast. */
#define LIM_B  (D - M + E)          /* worker: beat basis B + (D - M), on its clock */
#define LIM_R  (TTL - INTERVAL + E) /* worker: last renewal's start + (TTL - INTERVAL) */
#define R_DEAD (D - E)              /* reaper: token unchanged for D, on its clock */

#define NONE NW

/* awooop_run_state.status */
#define PENDING 0
#define RUNNING 1
#define WAITING_APPROVAL 2
#define RESUMED 3
#define COMPLETED 4
#define FAILED 5
#define CANCELLED 6
/* saga_status (CANCELLING: an intent recorded by the operator) */
#define S_RUN 0
#define S_CANCELLING 1
#define S_COMPENSATING 2
#define S_DONE 3
/* the journal's entry for the one effectful step */
#define J_NONE 0
#define J_OK 1      /* it happened */
#define J_UNK 2     /* outcome unknown */
#define J_NOT 3     /* resolved: it did not happen */
#define J_COMPD 4   /* compensated */
/* the journal's entry for the approval step */
#define A_NONE 0
#define A_WAIT 1
#define A_YES 2
#define A_NO 3      /* rejected, or expired (timer) */
/* a worker's fenced writes (awooop/store/segments.py, awooop/store/approvals.py) */
#define W_REC 0       /* record_step */
#define W_TURNBACK 1  /* turn_back */
#define W_PAUSE 2     /* pause_release        (ends the segment) */
#define W_WAITAPPR 3  /* wait_for_approval    (ends the segment) */
#define W_COMPLETE 4  /* finish COMPLETED     (ends the segment) */
#define W_FINISH 5    /* finish compensated   (ends the segment) */
#define ENDS(x) ((x) >= W_PAUSE)
/* what a handler does */
#define K_STEP 0
#define K_RESOLVE 1
#define K_COMP 2

/* ---- the run's row ---- */
byte status = PENDING;
byte saga = S_RUN;
byte sj = J_NONE;
byte aj = A_NONE;
bit paused;                 /* control_state = 'PAUSED' */
bit fcancel;                /* failure_code E-SAGA-002 */
byte holder = NONE;         /* worker_id */
byte attempts;              /* attempt_count (saturates at MAXATT) */
byte lease_left;            /* lease_until - now() on the database's clock; 0: expired or NULL */
bit wcur[NW];               /* worker i's lease_epoch is the run's lease_epoch */
bit vcur[NW];               /* worker i's Claim saw the saga status and journal as they are */
bit nonce[NW];              /* the identity of worker i's write in progress is in the journal */

/* ---- each worker process ---- */
bit alive[NW];
bit part[NW];               /* cut from the database */
bit started[NW];            /* its liveness thread runs (from its first lease) */
bit inseg[NW];              /* drives a segment (between claim and the segment's end) */
bit inh[NW];                /* a handler of it runs (between its first side effect and return) */
bit kept[NW];               /* its keeper renews the lease */
bit lost[NW];               /* lease_lost is set (latched) */
byte rage[NW];              /* real ticks since its last acknowledged renewal (or claim) */
bit row[NW];                /* its awooop_worker row exists */
#ifdef OLD_RULE
byte row_age[NW];           /* now() - seen_at, database clock */
#else
byte bage[NW];              /* real ticks since its belief basis B */
bit rchg[NW];               /* seen_at differs from the token the reaper holds */
bit mem[NW];                /* the reaper holds a token for worker i */
byte r_age[NW];             /* real ticks since the reaper's first_seen for worker i */
#endif

/* ---- ghosts: the world outside the database ---- */
bit eff;                    /* the step's effect happened */
bit comp;                   /* its compensation happened */
bit cancel_acked;           /* an operator's cancel was acknowledged */

/* ---- fault budgets ---- */
byte crashes = CRASHES;
byte partitions = PARTITIONS;
byte losses = LOSSES;
byte rfaults = REAPER_FAULTS;

#define TERMINAL (status >= COMPLETED)

/* ctx.lease_held of worker w's handler */
#ifdef NO_LATCH
#ifdef OLD_RULE
#define HELD(w) (!lost[w] && rage[w] < LIM_R)
#else
#define HELD(w) (!lost[w] && bage[w] < LIM_B && rage[w] < LIM_R)
#endif
#else
#define HELD(w) (!lost[w])
#endif
/* the basis of worker w's belief has run out */
#ifdef OLD_RULE
#define EXPIRED(w) (rage[w] >= LIM_R)
#else
#define EXPIRED(w) (bage[w] >= LIM_B || rage[w] >= LIM_R)
#endif

#define BEL(w) (inh[w] && HELD(w))
#if NW == 2
#define NBEL ((BEL(0) -> 1 : 0) + (BEL(1) -> 1 : 0))
#else
#define NBEL ((BEL(0) -> 1 : 0) + (BEL(1) -> 1 : 0) + (BEL(2) -> 1 : 0))
#endif

/* (a) at most one handler runs while believing it holds the run */
#define ONE_BELIEVER (NBEL <= 1)
/* (c) an acknowledged cancel is never lost: the saga never goes on forward, never completes */
#define CANCEL_KEPT (!cancel_acked || (saga != S_RUN && status != COMPLETED))

active proctype InvariantA() { atomic { !ONE_BELIEVER -> assert(ONE_BELIEVER) } }
active proctype InvariantC() { atomic { !CANCEL_KEPT -> assert(CANCEL_KEPT) } }

/* (e) every run ends */
ltl terminates { <> (status >= COMPLETED) }

/* ---- time: one tick of real time; every clock-based age moves ---- */
active proctype Clock() {
  byte i;
  do
  :: atomic {
       for (i : 0 .. NW - 1) {
         if
         :: inseg[i] && rage[i] < LIM_R -> rage[i]++
         :: else
         fi;
#ifdef OLD_RULE
         if :: row_age[i] < D -> row_age[i]++ :: else fi;
#else
         if :: inseg[i] && bage[i] < LIM_B -> bage[i]++ :: else fi;
         if :: mem[i] && r_age[i] < R_DEAD -> r_age[i]++ :: else fi;
#endif
#ifndef NO_LATCH
         /* Lease keeper / ctx.lease_held: the belief ends when its basis runs out */
         if :: inseg[i] && EXPIRED(i) -> lost[i] = 1 :: else fi;
#endif
         skip
       };
       if :: lease_left > 0 -> lease_left-- :: else fi;
       i = 0
     }
  od
}

inline refresh() {
  vsaga = saga; vsj = sj; vaj = aj; vpaused = paused
}

/* the worker leaves the segment; what only a segment uses goes back to its initial value */
inline leave() {
  inseg[w] = 0; kept[w] = 0; inh[w] = 0; lost[w] = 0; rage[w] = 0; vcur[w] = 0; nonce[w] = 0;
#ifndef OLD_RULE
  bage[w] = 0;
#endif
  vsaga = 0; vsj = 0; vaj = 0; vpaused = 0; wr = 0; res = 0; kind = 0; retried = 0
}

/* ---- a worker process's runner (awooop/engine/runner.py) ---- */
proctype Worker(byte w) {
  byte vsaga, vsj, vaj, wr, res, kind, i;
  bit vpaused, retried;
  {
  skip;
idle:
  /* leases.claim: CAS on status/lease_until/control_state, lease_epoch + 1 */
  atomic {
    !part[w] && (status == PENDING || status == RESUMED) && !paused && lease_left == 0 ->
    status = RUNNING; holder = w; lease_left = TTL;
    if :: attempts < MAXATT -> attempts++ :: else fi;
    for (i : 0 .. NW - 1) { wcur[i] = 0 };
    wcur[w] = 1; i = 0;
    if
    :: losses > 0 -> losses--; goto idle        /* committed, reply lost: the worker never knows */
    :: true
    fi;
    /* Lease(...) and keeper.hold: renewed_at = now; the liveness thread's first beat starts */
    inseg[w] = 1; kept[w] = 1; vcur[w] = 1; rage[w] = 0; lost[w] = 0;
#ifndef OLD_RULE
    /* B, as late as it can be: no later than the first_seen of a token the reaper holds
     * for this worker (B <= that beat's start <= first_seen), else now (the first beat) */
    bage[w] = (mem[w] -> r_age[w] : 0);
#endif
    started[w] = 1;
#ifndef NO_LATCH
    if :: EXPIRED(w) -> lost[w] = 1 :: else fi;
#endif
    refresh()
  };

decide:
  /* _run_steps: cancel first, then pause, then the next step of the saga */
  atomic {
  if
  :: vsaga == S_CANCELLING -> wr = W_TURNBACK; goto write
  :: vsaga != S_CANCELLING && vpaused -> wr = W_PAUSE; goto write
  :: vsaga == S_RUN && !vpaused ->
       if
       :: vsj == J_NONE -> kind = K_STEP; goto act
       :: vsj == J_UNK -> kind = K_RESOLVE; goto act
       :: vsj == J_NOT -> wr = W_TURNBACK; goto write
#ifdef NO_APPROVAL
       :: vsj == J_OK && vaj == A_NONE -> wr = W_COMPLETE; goto write
#else
       :: vsj == J_OK && vaj == A_NONE -> wr = W_WAITAPPR; goto write
#endif
       :: vsj == J_OK && vaj == A_YES -> wr = W_COMPLETE; goto write
       :: vsj == J_OK && vaj == A_NO -> wr = W_TURNBACK; goto write
       :: else -> assert(false)
       fi
  :: vsaga == S_COMPENSATING && !vpaused ->
       if
       :: vsj == J_UNK -> kind = K_RESOLVE; goto act      /* settle the unknown first */
       :: vsj == J_OK -> kind = K_COMP; goto act
       :: else -> wr = W_FINISH; goto write
       fi
  :: else -> assert(false)
  fi
  };

act:
  /* _attempt: the handler reads ctx.lease_held right before each side effect */
  atomic {
    if
    :: HELD(w) ->
         inh[w] = 1;
         if
         :: kind == K_STEP ->
              if
              :: eff = 1; res = J_OK
              :: res = J_UNK                    /* raised Unknown; it may have happened */
              :: eff = 1; res = J_UNK
              fi
         :: kind == K_RESOLVE -> res = (eff -> J_OK : J_NOT)
         :: kind == K_COMP -> assert(eff); comp = 1; res = J_COMPD     /* (d) */
         fi
    :: else -> leave(); goto idle                   /* LEASE_LOST before acting */
    fi
  };
  /* the handler may run long (ticks pass); it returns */
  atomic {
    inh[w] = 0;
    if
    :: !HELD(w) -> leave(); goto idle              /* "lease lost during step" */
    :: else -> wr = W_REC
    fi
  };

write:
  /* fenced.write: one compare-and-set, retried after a transient error */
  atomic {
    retried = 0; nonce[w] = 0;
    if :: ENDS(wr) -> kept[w] = 0 :: else fi       /* keeper.drop before the last write */
  };
try:
  if
  :: atomic {
       !part[w] ->
       if
       :: holder == w && wcur[w] && status == RUNNING && vcur[w] && (wr != W_PAUSE || paused) ->
            assert(holder == w && wcur[w]);        /* (b) */
            if
            :: wr == W_REC -> sj = res
            :: wr == W_TURNBACK -> saga = S_COMPENSATING
            :: wr == W_PAUSE ->
                 status = PENDING; holder = NONE; lease_left = 0; attempts = 0
            :: wr == W_WAITAPPR ->
                 status = WAITING_APPROVAL; aj = A_WAIT; holder = NONE; lease_left = 0;
                 attempts = 0
            :: wr == W_COMPLETE ->
                 status = COMPLETED; saga = S_DONE; holder = NONE; lease_left = 0
            :: wr == W_FINISH ->
                 assert(sj != J_UNK && sj != J_OK);                      /* (d) */
                 status = (fcancel -> CANCELLED : FAILED); saga = S_DONE; holder = NONE;
                 lease_left = 0
            fi;
            nonce[w] = 1;
            for (i : 0 .. NW - 1) { vcur[i] = 0 };
            i = 0;
            if
            :: vcur[w] = 1; refresh(); goto written
            :: losses > 0 -> losses--; retried = 1; goto try     /* committed, reply lost */
            fi
       :: else -> goto nomatch
       fi
     }
  :: atomic { losses > 0 && !part[w] -> losses--; retried = 1 }; goto try   /* request lost */
  :: atomic { part[w] -> retried = 1 };
     if
     :: goto try                                     /* back off, try again */
     :: goto giveback                                /* GaveUp */
     fi
  fi;

nomatch:
  if
  :: retried ->
       /* leases.landed: is this write's identity in the run? */
       if
       :: atomic { !part[w] -> if :: nonce[w] -> vcur[w] = 1; refresh(); goto written :: else fi }
       :: atomic { part[w] }; goto giveback
       fi
  :: else
  fi;
  /* _moved_meanwhile: leases.position */
  if
  :: atomic {
       !part[w] ->
       if
       :: holder == w && wcur[w] && status == RUNNING && sj == vsj && aj == vaj &&
          (saga != vsaga || paused != vpaused) ->
            refresh(); vcur[w] = 1;
            if
            :: wr == W_REC -> goto write             /* _keep_outcome, then the intent */
            :: else -> kept[w] = 1; goto decide      /* keeper.hold again */
            fi
       :: else -> lost[w] = 1; leave(); goto idle    /* _lost_on_write: LEASE_LOST */
       fi
     }
  :: atomic { part[w] }; goto giveback
  fi;

giveback:
  /* runner._give_back: leases.release, fenced (not when the lease is known lost) */
  atomic {
    if
    :: !part[w] && !lost[w] && holder == w && wcur[w] && status == RUNNING ->
         status = PENDING; holder = NONE; lease_left = 0
    :: else
    fi;
    leave();
    goto idle
  };

written:
  if
  :: ENDS(wr) -> atomic { leave(); goto idle }
  :: else -> goto decide
  fi
  } unless { !alive[w] }
}

/* ---- a worker process's lease keeper and liveness thread (awooop/engine/lease.py) ---- */
proctype Keeper(byte w) {
  do
  :: atomic {
       /* workers.beat: seen_at = now() */
       alive[w] && started[w] && (inseg[w] || holder == w) && !part[w] ->
       row[w] = 1;
#ifdef OLD_RULE
       row_age[w] = 0
#else
       rchg[w] = 1;
       if
       :: bage[w] = 0                           /* acknowledged: B = this beat's start */
       :: losses > 0 -> losses--                /* committed, reply lost */
       fi
#endif
     }
  :: atomic {
       /* Lease.renew_now: leases.renew, CAS on worker_id, lease_epoch, RUNNING */
       alive[w] && kept[w] && !lost[w] && !part[w] ->
       if
       :: holder == w && wcur[w] && status == RUNNING ->
            lease_left = TTL;
            if
            :: rage[w] = 0                      /* acknowledged */
            :: losses > 0 -> losses--           /* committed, reply lost */
            fi
       :: else -> lost[w] = 1                   /* matched no row */
       fi
     }
  od
}

/* ---- the reaper (awooop/store/reaper.py: reap; awooop/engine/sweeps.py: reap_once) ---- */
active proctype Reaper() {
  byte i, cand = NONE;
  do
  :: atomic {
#ifndef OLD_RULE
       /* read the liveness tokens of the workers that hold RUNNING runs */
       cand = NONE;
       for (i : 0 .. NW - 1) {
         if
         :: status == RUNNING && holder == i && row[i] ->
              if
              :: !mem[i] || rchg[i] -> mem[i] = 1; rchg[i] = 0; r_age[i] = 0
              :: else -> cand = i
              fi
         :: else -> mem[i] = 0; r_age[i] = 0
         fi
       };
       i = 0;
#endif
       skip
     };
     atomic {
       /* the reap statement */
       if
       :: status == RUNNING &&
          (lease_left == 0 ||
#ifdef OLD_RULE
           (holder != NONE && row[holder] && row_age[holder] >= D)
#else
           (cand != NONE && holder == cand && mem[cand] && r_age[cand] >= R_DEAD && !rchg[cand])
#endif
          ) ->
            holder = NONE; lease_left = 0;
            status = (attempts < MAXATT -> PENDING : FAILED)
       :: else
       fi;
       cand = NONE
     }
  :: atomic {
       /* a pass that fails (database unreachable), or the reaper's process restarts */
       rfaults > 0 -> rfaults--;
#ifndef OLD_RULE
       for (i : 0 .. NW - 1) { mem[i] = 0; r_age[i] = 0 };
       i = 0;
#endif
       skip
     }
  od
}

/* ---- the operator (awooop/store/operations.py: apply) ---- */
active proctype Operator() {
  bit paused_once, cancelled_once;
  do
#ifndef NO_PAUSE
  :: atomic { !paused_once && !paused && !TERMINAL -> paused = 1; paused_once = 1 }
#endif
  :: atomic { paused -> paused = 0 }
#ifndef NO_CANCEL
  :: atomic {
       !cancelled_once && !TERMINAL && saga == S_RUN ->
       saga = S_CANCELLING; fcancel = 1; cancelled_once = 1; cancel_acked = 1;
       if
       :: status == WAITING_APPROVAL -> status = RESUMED; attempts = 0
       :: else
       fi;
       vcur[0] = 0; vcur[1] = 0;
#if NW > 2
       vcur[2] = 0;
#endif
       skip
     }
#endif
  od
}

/* ---- a person deciding, and the approval's expiry timer (awooop/store/approvals.py) ---- */
active proctype Approver() {
  do
  :: atomic {
       status == WAITING_APPROVAL && saga == S_RUN && aj == A_WAIT ->
       if
       :: aj = A_YES                            /* decide: approve */
       :: aj = A_NO                             /* decide: reject */
       :: !paused -> aj = A_NO                  /* timers.fire_due + approvals.expire */
       fi;
       status = RESUMED; attempts = 0
     }
  od
}

/* ---- faults: crashes and partitions, within their budgets ---- */
active proctype Faults() {
  byte i;
  do
  :: atomic { partitions > 0 -> partitions--; select (i : 0 .. NW - 1); part[i] = 1; i = 0 }
  :: atomic {
       crashes > 0 -> crashes--; select (i : 0 .. NW - 1);
       alive[i] = 0; inseg[i] = 0; inh[i] = 0; kept[i] = 0; i = 0
     }
  :: atomic {
       part[0] || part[1]
#if NW > 2
       || part[2]
#endif
       -> for (i : 0 .. NW - 1) { part[i] = 0 }; i = 0
     }
  od
}

init {
  byte i;
  atomic {
    for (i : 0 .. NW - 1) { alive[i] = 1 };
    for (i : 0 .. NW - 1) { run Worker(i); run Keeper(i) };
    i = 0
  }
}
