/*
 * effectfence's fence protocol as src/fence/rules.cc decides it, checked
 * with SPIN. docs/MODEL.md maps every variable and step to the code.
 *
 * Every ledger decision (prepare, commit, abort, heartbeat, clear, the
 * reaper, a server fencing on exit, a withdrawal, the sweep) is one d_step:
 * in the code it runs inside one BEGIN IMMEDIATE transaction. Agents'
 * effects, their messages to the ledger, leases running out, processes
 * dying and the operator interleave freely between those steps.
 *
 * Switches (tools/model-check sets them):
 *   -DRETRIES=n           prepares an agent may send again after a refusal
 *   -DBLIND_COMMIT        negative control: commit writes its outcome without
 *                         comparing the fence token (the reference's blind insert)
 *   -DTAKEOVER_LIVE_LOCAL negative control: an expired lease is taken over
 *                         even though its holder runs on the deciding host
 *   -DPROBE_CLEARED_FAILED a reachability probe: cleared -> failed by a late commit
 *   -DSTRICT_LEASE        the documented limit: no exception for attempts taken
 *                         over from a holder that cannot be seen from the
 *                         deciding host (judged by its lease alone)
 */

#ifndef RETRIES
#define RETRIES 1
#endif

/* Who races: which agents, on which intents (both intents are in one
   domain). SAME_INTENT (the default): two agents on one intent, for
   takeovers, zombies, clears and sweeps. DOMAIN: one agent on each intent,
   for read-sets. LARGE: both at once, three agents. */
#if defined(LARGE)
#define NAGENTS  3
#define INTENT_OF_1 0
#elif defined(DOMAIN)
#define NAGENTS  2
#define INTENT_OF_1 1
#else
#define NAGENTS  2
#define INTENT_OF_1 0
#endif
#define NINTENTS 2
/* Tokens 1..NTOK-1: every admission draws the next (random_token_hex). */
#define NTOK     (NAGENTS * (RETRIES + 1) + 1)
#define NO_READ  255

/* intents.state; NONE is "no row" (never admitted, or swept). */
#define NONE      0
#define IN_FLIGHT 1
#define DONE      2
#define FAILED    3
#define UNKNOWN   4
#define CLEARED   5

/* What a prepare answers (Reason in include/effectfence/types.h). */
#define A_ADMITTED      1
#define A_REPLAYED      2
#define A_IN_FLIGHT     3
#define A_PRIOR_FAILURE 4
#define A_STALE         5
#define A_RACE          6

/* A promise: if cond fails, the trail names what broke before the assertion. */
#define PROMISE(cond, text) if :: (cond) -> skip :: else -> printf(text); assert(cond) fi

inline say_state(x) {
  if
  :: x == NONE -> printf("none (no row)")
  :: x == IN_FLIGHT -> printf("in_flight")
  :: x == DONE -> printf("done")
  :: x == FAILED -> printf("failed")
  :: x == UNKNOWN -> printf("unknown")
  :: x == CLEARED -> printf("cleared")
  fi
}

/* ---- the ledger: intents rows (one per intent) and the one domain ---- */
byte st[NINTENTS];     /* state */
byte gen[NINTENTS];    /* generation: 1 on a fresh row, +1 on every re-admission */
byte tok[NINTENTS];    /* token of the current admission */
byte hold[NINTENTS];   /* holder: the agent whose server admitted it */
bool lease[NINTENTS];  /* lease_expires_at > now */
byte cert[NINTENTS];   /* cert_hash: the token of the attempt whose result it is */
byte seq[NINTENTS];    /* the domain seq reserved at admission */
byte rs[NINTENTS];     /* read_set: the seq the agent read, or NO_READ */
byte dseq;             /* domains.seq: both intents are in one domain */
byte ntok;             /* tokens drawn so far */

/* ---- processes: hosts and holders ---- */
byte host[NAGENTS];       /* the host an agent's server runs on (0 or 1) */
bool srv_alive[NAGENTS];  /* the agent's server (the recorded holder) runs */
byte held[NAGENTS];       /* the token its server holds for it (fast path's held tickets) */

/* ---- ghosts: what happened, for the properties ---- */
byte epoch[NINTENTS];      /* clears and sweeps of the intent so far */
byte committed[NINTENTS];  /* the token whose commit recorded the row's outcome */
byte t_intent[NTOK];       /* per token: its intent */
byte t_epoch[NTOK];        /* the epoch it was admitted in */
bool t_executed[NTOK];     /* its effect ran */
bool t_displaced[NTOK];    /* taken over by a decider on another host */
bool t_certified[NTOK];    /* its certificate is in the ledger (never deleted) */
bool has_read[NAGENTS];    /* read the domain, not yet decided */
bool moved[NAGENTS];       /* the domain moved since that read */
bool acted[NTOK + 1];      /* a domain seq some effect was decided on */

/* Scratch for the inside of one d_step only: hidden, so not part of a state. */
hidden byte j, kk;
hidden byte takeover, unsettled, stale_ticket, refused;
hidden byte s_st, s_gen, s_tok, s_hold, s_cert, s_seq, s_rs, s_dseq;
hidden byte s_lease;

/* A holder is judged by a decider on host h: pid, start time and boot id
   tell on the holder's own host (ledger/holder.cc liveness_of), nothing
   elsewhere (cannot_tell: its lease decides). */
#define GONE(h, a)    (host[a] == (h) && !srv_alive[a])
#define RUNNING(h, a) (host[a] == (h) && srv_alive[a])

/* After every ledger step: a recorded outcome stays, done means certified. */
inline invariants() {
  for (kk : 0 .. NINTENTS - 1) {
    PROMISE(committed[kk] == 0 || (st[kk] == DONE && cert[kk] == committed[kk]),
            "MSC: BROKEN: a committed outcome was overwritten, lost or replaced\n");
    PROMISE(st[kk] != DONE || (cert[kk] != 0 && t_certified[cert[kk]] && t_intent[cert[kk]] == kk),
            "MSC: BROKEN: an intent is done without the certificate of its own effect\n");
    PROMISE(st[kk] != IN_FLIGHT || tok[kk] != 0, "MSC: BROKEN: an attempt in flight has no token\n")
  };
  skip  /* the loop's exit lands inside the d_step */
}

/* rules::prepare. me prepares intent k with read-set r on me's host. */
inline prepare() {
  d_step {
    ans = 0;
    takeover = false;
    if
    :: st[k] == DONE ->
       ans = A_REPLAYED;
       /* every replay returns the committed result, of an effect that ran */
       PROMISE(cert[k] == committed[k] && t_executed[cert[k]],
               "MSC: BROKEN: a replay returned something other than the committed result\n")
    :: st[k] == FAILED || st[k] == UNKNOWN -> ans = A_PRIOR_FAILURE
    :: st[k] == IN_FLIGHT && GONE(host[me], hold[k]) ->
       st[k] = UNKNOWN;  /* mark_unknown: holder_dead */
       ans = A_PRIOR_FAILURE
    :: st[k] == IN_FLIGHT && !GONE(host[me], hold[k]) ->
       if
       :: lease[k] -> ans = A_IN_FLIGHT
#ifndef TAKEOVER_LIVE_LOCAL
       :: !lease[k] && RUNNING(host[me], hold[k]) -> ans = A_IN_FLIGHT
#endif
       :: else -> takeover = true
       fi
    :: else -> skip  /* NONE, CLEARED: fresh */
    fi;
    /* check_read_set(check_in_flight = true) */
    if
    :: ans == 0 && r != NO_READ && dseq != r -> ans = A_STALE
    :: ans == 0 && r != NO_READ && dseq == r ->
       unsettled = false;  /* unsettled_actions */
       for (kk : 0 .. NINTENTS - 1) {
         if
         :: st[kk] == IN_FLIGHT && (lease[kk] || RUNNING(host[me], hold[kk])) -> unsettled = true
         :: else -> skip
         fi
       };
       if
       :: unsettled -> ans = A_RACE
       :: else -> skip
       fi
    :: else -> skip
    fi;
    if
    :: ans == 0 ->  /* admitted: reserve_seq, a new token, the row */
       if
       :: takeover && host[hold[k]] != host[me] -> t_displaced[tok[k]] = true
       :: else -> skip
       fi;
       if
       :: st[k] == NONE -> gen[k] = 1
       :: else -> gen[k] = gen[k] + 1
       fi;
       dseq = dseq + 1;
       ntok = ntok + 1;
       tok[k] = ntok;
       hold[k] = me;
       lease[k] = true;
       seq[k] = dseq;
       rs[k] = r;
       st[k] = IN_FLIGHT;
       cert[k] = 0;
       t_intent[ntok] = k;
       t_epoch[ntok] = epoch[k];
       t = ntok;
       held[me] = t;
       ans = A_ADMITTED;
       admitted_moved = r != NO_READ && moved[me];
       for (j : 0 .. NAGENTS - 1) {
         if
         :: j != me && has_read[j] -> moved[j] = true
         :: else -> skip
         fi
       };
       skip
    :: else -> skip
    fi;
    has_read[me] = false;
    if
    :: ans == A_ADMITTED && takeover ->
       printf("MSC: agent %d (host %d) took intent %d over: token %d, generation %d, seq %d\n",
              me, host[me], k, t, gen[k], seq[k])
    :: ans == A_ADMITTED && !takeover && r == NO_READ ->
       printf("MSC: agent %d (host %d) admitted to intent %d: token %d, generation %d, seq %d\n",
              me, host[me], k, t, gen[k], seq[k])
    :: ans == A_ADMITTED && !takeover && r != NO_READ ->
       printf("MSC: agent %d (host %d) admitted to intent %d: token %d, generation %d, seq %d, read-set seq %d\n",
              me, host[me], k, t, gen[k], seq[k], r)
    :: ans == A_REPLAYED -> printf("MSC: agent %d replayed intent %d: result of token %d\n", me, k, cert[k])
    :: ans == A_IN_FLIGHT -> printf("MSC: agent %d refused in_flight on intent %d\n", me, k)
    :: ans == A_PRIOR_FAILURE -> printf("MSC: agent %d refused prior_failure on intent %d (it is ", me, k);
       say_state(st[k]);
       printf(")\n")
    :: ans == A_STALE -> printf("MSC: agent %d refused stale_read_set (read %d, domain at %d)\n", me, r, dseq)
    :: ans == A_RACE -> printf("MSC: agent %d refused domain_race\n", me)
    fi;
    invariants()
  }
}

/* The row of intent k as it is now, to show a refused call changed nothing. */
inline snapshot() {
  s_st = st[k]; s_gen = gen[k]; s_tok = tok[k]; s_hold = hold[k]; s_lease = lease[k];
  s_cert = cert[k]; s_seq = seq[k]; s_rs = rs[k]; s_dseq = dseq
}
#define UNCHANGED (s_st == st[k] && s_gen == gen[k] && s_tok == tok[k] && s_hold == hold[k] && \
                   s_lease == lease[k] && s_cert == cert[k] && s_seq == seq[k] && s_rs == rs[k] && \
                   s_dseq == dseq)

/* rules::commit with the ticket (k, t) and the result of attempt t. */
inline commit() {
  d_step {
    snapshot();
    stale_ticket = st[k] == NONE || tok[k] != t;
#ifdef BLIND_COMMIT
    /* the one rule changed: no compare-and-swap on the token (row_held_by),
       as a blind insert of the outcome does; the state checks stay */
    refused = st[k] == NONE;
#else
    refused = stale_ticket;  /* row_held_by: lease_lost / token_mismatch, kept in the log */
#endif
    if
    :: refused -> skip
    :: !refused && st[k] == DONE -> skip  /* a retry (same result): the same certificate; else refused */
    :: !refused && st[k] == FAILED -> skip  /* lease_lost, kept in the log */
    :: !refused && st[k] != DONE && st[k] != FAILED && rs[k] != NO_READ && dseq != seq[k] ->
       st[k] = FAILED  /* read-set moved since admission: commit_refused, fenced */
    :: else ->  /* in_flight, unknown or cleared: recorded */
       PROMISE(committed[k] == 0, "MSC: BROKEN: a committed outcome was replaced by another attempt's\n");
       st[k] = DONE; cert[k] = t; committed[k] = t; t_certified[t] = true
    fi;
    held[me] = 0;
    printf("MSC: agent %d commits token %d (the row's token was %d): intent %d is now ", me, t, s_tok, k);
    say_state(st[k]);
    printf("\n");
#ifdef PROBE_CLEARED_FAILED
    /* not a promise: shows that a late commit can fence a cleared intent again */
    PROMISE(!(s_st == CLEARED && st[k] == FAILED), "MSC: REACHED: a late commit moved a cleared intent back to failed\n");
#endif
    /* a commit whose token is not current changes nothing */
    PROMISE(!stale_ticket || UNCHANGED, "MSC: BROKEN: a call with a token that is not current changed the row\n");
    invariants()
  }
}

/* rules::abort */
inline abort() {
  d_step {
    snapshot();
    stale_ticket = st[k] == NONE || tok[k] != t;
    if
    :: !stale_ticket && (st[k] == IN_FLIGHT || st[k] == UNKNOWN) -> st[k] = FAILED
    :: else -> skip  /* refused (lease_lost), or a retried abort of a failed one */
    fi;
    held[me] = 0;
    printf("MSC: agent %d aborts token %d (the row's token was %d): intent %d is now ", me, t, s_tok, k);
    say_state(st[k]);
    printf("\n");
    PROMISE(!stale_ticket || UNCHANGED, "MSC: BROKEN: a call with a token that is not current changed the row\n");
    invariants()
  }
}

/* rules::heartbeat: only ever lengthens the current admission's lease */
inline heartbeat() {
  d_step {
    snapshot();
    stale_ticket = st[k] == NONE || tok[k] != t;
    if
    :: !stale_ticket && st[k] == IN_FLIGHT -> lease[k] = true
    :: else -> skip
    fi;
    printf("MSC: agent %d heartbeats token %d (the row's token was %d)\n", me, t, s_tok);
    PROMISE(!stale_ticket || UNCHANGED, "MSC: BROKEN: a call with a token that is not current changed the row\n");
    invariants()
  }
}

/* The agent runs the tool (wrap: the child; serve: the agent itself). */
inline effect() {
  d_step {
    printf("MSC: agent %d runs the effect of token %d (intent %d)\n", me, t, k);
    t_executed[t] = true;
    /* of the attempts admitted between two clears (or a clear and the sweep
       that ends the result's lifetime), at most one runs its effect */
    for (j : 1 .. NTOK - 1) {
      if
      :: j != t && t_executed[j] && t_intent[j] == k && t_epoch[j] == t_epoch[t] ->
#ifdef STRICT_LEASE
         PROMISE(false, "MSC: BROKEN: two attempts admitted between the same clears both ran the effect\n")
#else
         /* unless one of them was taken over by a decider that could not see
            its holder (lease-only judgement, docs/DESIGN.md) */
         PROMISE(t_displaced[j] || t_displaced[t],
                 "MSC: BROKEN: two attempts admitted between the same clears both ran the effect\n")
#endif
      :: else -> skip
      fi
    };
    /* an agent whose read-set moved never runs; one domain state, one effect */
    PROMISE(!admitted_moved, "MSC: BROKEN: an agent whose read-set moved ran the effect\n");
    if
    :: r != NO_READ ->
       PROMISE(!acted[r], "MSC: BROKEN: two effects were decided on one domain state\n");
       acted[r] = true
    :: else -> skip
    fi
  }
}

/* An agent that wants intent k done once, through its server on host[me]. */
proctype agent(byte me; byte k) {
  byte r, ans, t, tries;
  bool admitted_moved;

decide:
  if
  :: r = NO_READ
  :: d_step { r = dseq; has_read[me] = true; moved[me] = false }  /* fence_status */
  fi;
  prepare();
  if
  :: ans == A_ADMITTED -> skip
  :: ans == A_REPLAYED -> goto finished
  :: else ->
     if
     :: tries < RETRIES -> tries++; goto decide
     :: else -> goto finished
     fi
  fi;

  /* The answer may never reach the agent: its server takes the admission
     back (rules::withdraw: aborted and cleared) and the agent may retry. */
  if
  :: skip
  :: d_step {
       srv_alive[me] ->
       if
       :: st[k] == IN_FLIGHT && tok[k] == t -> st[k] = CLEARED; epoch[k]++
       :: else -> skip
       fi;
       held[me] = 0;
       printf("MSC: agent %d never got token %d: withdrawn\n", me, t);
       invariants()
     };
     if
     :: tries < RETRIES -> tries++; goto decide
     :: else -> goto finished
     fi
  fi;

holding:  /* the ticket, the effect not run */
  do
  :: heartbeat()
  :: effect(); goto ran
  :: abort(); goto finished
  :: goto finished  /* dies, or never reports */
  od;
ran:
  do
  :: heartbeat()
  :: commit(); goto reported
  :: abort(); goto finished
  :: goto finished
  od;
reported:
  if
  :: commit()  /* retried: its first answer was lost */
  :: skip
  fi;
finished:
  skip;
  /* nothing of it matters any more: forget it, so ends compare equal */
  d_step { r = 0; ans = 0; t = 0; tries = 0; admitted_moved = false }
}

/* Time passing, processes dying, operators and the sweep. */
inline expire(kk) {
  d_step {
    st[kk] == IN_FLIGHT && lease[kk] -> lease[kk] = false;
    printf("MSC: the lease of intent %d (token %d) ran out\n", kk, tok[kk])
  }
}

/* kill -9 of an agent's server while it holds an admission */
inline crash(a) {
  d_step {
    held[a] != 0 && srv_alive[a] -> srv_alive[a] = false;
    printf("MSC: server of agent %d (holder of token %d) killed\n", a, held[a])
  }
}

/* serve exiting: Fence::fence_own_in_flight -> rules::fence_held */
inline stop(a) {
  d_step {
    held[a] != 0 && srv_alive[a] ->
    if
    :: st[t_intent[held[a]]] == IN_FLIGHT && tok[t_intent[held[a]]] == held[a] ->
       st[t_intent[held[a]]] = UNKNOWN
    :: else -> skip
    fi;
    srv_alive[a] = false;
    printf("MSC: server of agent %d stopped, fencing token %d\n", a, held[a]);
    held[a] = 0;
    invariants()
  }
}

/* rules::reap_dead_holders, run by a process on host h */
inline reap(h) {
  d_step {
    (st[0] == IN_FLIGHT && GONE(h, hold[0])) || (st[1] == IN_FLIGHT && GONE(h, hold[1])) ->
    for (kk : 0 .. NINTENTS - 1) {
      if
      :: st[kk] == IN_FLIGHT && GONE(h, hold[kk]) -> st[kk] = UNKNOWN
      :: else -> skip
      fi
    };
    printf("MSC: a process on host %d reaped dead holders\n", h);
    invariants()
  }
}

/* INSERT INTO clears: the clears_check and clears_apply triggers */
inline clear(kk) {
  d_step {
    (st[kk] == FAILED || st[kk] == UNKNOWN) -> st[kk] = CLEARED; epoch[kk]++;
    printf("MSC: operator cleared intent %d\n", kk);
    invariants()
  }
}

/* Fence::sweep: done and cleared rows past the result TTL are deleted;
   certificates stay (t_certified is never reset). */
inline sweep(kk) {
  d_step {
    (st[kk] == DONE || st[kk] == CLEARED) ->
    st[kk] = NONE; gen[kk] = 0; tok[kk] = 0; hold[kk] = 0; lease[kk] = false;
    cert[kk] = 0; seq[kk] = 0; rs[kk] = NO_READ;
    committed[kk] = 0;
    epoch[kk]++;
    printf("MSC: swept intent %d\n", kk);
    invariants()
  }
}

active proctype environment() {
end:
  do
  :: expire(0)
  :: expire(1)
  :: crash(0)
  :: crash(1)
  :: stop(0)
  :: stop(1)
#if NAGENTS > 2
  :: crash(2)
  :: stop(2)
#endif
  :: reap(0)
  :: reap(1)
  :: clear(0)
  :: clear(1)
  :: sweep(0)
  :: sweep(1)
  od
}

init {
  atomic {
    rs[0] = NO_READ;
    rs[1] = NO_READ;
    /* agent 0 on host 0 (hosts are symmetric); the others on either */
    srv_alive[0] = true;
    srv_alive[1] = true;
    if
    :: host[1] = 0
    :: host[1] = 1
    fi;
#if NAGENTS > 2
    srv_alive[2] = true;
    if
    :: host[2] = 0
    :: host[2] = 1
    fi;
    run agent(2, 1);
#endif
    run agent(0, 0);
    run agent(1, INTENT_OF_1)
  }
}
