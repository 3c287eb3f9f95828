/*
 * sched.pml: a model of the scheduler's protocol (lock-scheduler over lock-core) for one job,
 * for spin.
 *
 * README.md (next to this file) says which script or function each step stands for, the
 * bounds, what is abstracted away, the properties, and how to run it
 * (scripts/check-sched-model.sh).
 *
 * Processes: `world` (the clock, Redis expiring the lock, a command left in the network
 * reaching Redis, the operator's pause, run-now and backfill requests, the final check), one
 * `replica` per replica (its timer firing slots, its taker taking retries, backfill slots and
 * run-now requests, its resync, its background clean-up, kill -9 and shutdown) and one `task`
 * per run a replica can have in flight (T per replica). Every action is one atomic step: a Lua
 * script or a pipeline in Redis, or a client's code between two awaits; each ends with check(),
 * the invariants.
 *
 * The default is the fixed logic. Each old behaviour is switched on by a -D flag:
 *   OLD_B1    a retry (attempt n) claims tick slot+n-1 through acquire.lua: "tick done" once the
 *             next slot has claimed its own, and the retry is dropped
 *   OLD_A1    a claim that failed without running counts as a failed attempt: retried, while
 *             the resync's catch-up runs the slot too
 *   OLD_S1    a resent batched claim answered Held disarms the first send's clean-up
 *   OLD_S2    a resent batched claim answered with an error reply disarms it too
 *   OLD_R1    a due retry's take (ZREM) whose reply is lost fails the poll: the retry is gone
 *   OLD_M1    an attempt max_runs could not count (INCR failed) fails and is retried; retries
 *             are never counted
 *   OLD_U1    only a slot's run takes the BufferOne buffer at its end, a run-now does not
 *   OLD_SHUT  a run ending after SIGTERM starts the slot buffered behind it
 *   OLD_F     F1/F2: a backfill request queues every slot without a history entry, and its
 *             run checks nothing under the lock
 * and two designs this model found wanting (issue 54's new findings, see README.md):
 *   F3_UNCLAIMED_BACKFILL  a backfill run claims no tick: the slot's own claim, still to come,
 *             runs it again
 *   HANDOVER_AS_BACKFILL   a stopping replica hands its buffered slot over as a backfill entry,
 *             while the slot's run started before the stop still claims it
 * CFG picks the replicas, the job's options, the operator's actions and the fault budgets.
 */

/* ================================================================== configuration */

#ifndef CFG
#define CFG 10
#endif

/* defaults, overridden per CFG below */
#define SKIP 0
#define BUFFER_ONE 1

#if CFG == 1
/* B1: attempt 1 of a slot fails, its retry comes due after the next slot claimed its tick. */
#define C_R 2
#define C_NS 2
#define C_ATT 2
#endif

#if CFG == 2
/* A1: a claim answered by an error reply (it did nothing); the resync catches the slot up. */
#define C_R 1
#define C_NS 1
#define C_ATT 2
#define C_B_ERR 1
#endif

#if CFG == 3
/* S1: a batched claim's first send left in the network, its resend answered Held. */
#define C_R 2
#define C_NS 2
#define C_B_LATE 1
#define C_B_LOST 1
#endif

#if CFG == 4
/* S2: a batched claim's reply lost, its resend answered by an error reply. */
#define C_R 2
#define C_NS 2
#define C_B_LOST 1
#define C_B_ERR 1
#endif

#if CFG == 5
/* R1: a due retry's take loses its reply. */
#define C_R 2
#define C_NS 1
#define C_ATT 2
#define C_B_TAKELOST 1
#endif

#if CFG == 6
/* M1: max_runs(1), the count's command answered by an error reply. */
#define C_R 1
#define C_NS 2
#define C_ATT 2
#define C_MAXR 1
#define C_B_ERR 1
#endif

#if CFG == 7
/* U1: BufferOne, a run-now holds the lock when a slot fires. */
#define C_R 2
#define C_NS 1
#define C_OVERLAP BUFFER_ONE
#define C_RUN_NOW 1
#endif

#if CFG == 8
/* Shutdown: BufferOne, a replica told to stop while its run has a slot buffered behind it. */
#define C_R 2
#define C_NS 2
#define C_OVERLAP BUFFER_ONE
#define C_B_SHUT 1
#endif

#if CFG == 9
/* F1/F2: backfill requests while the slot's run is in flight. */
#define C_R 2
#define C_NS 1
#define C_BACKFILLS 2
#endif

#if CFG == 10
/* General, Skip: retries, max_runs, pause, backfill; any 1 fault (2 in the long run). */
#define C_R 2
#define C_NS 2
#define C_ATT 2
#define C_MAXR 2
#define C_PAUSE 1
#define C_BACKFILLS 1
#define C_B_FAULTS 1
#define C_B_STALL 1
#define C_B_LOST 1
#define C_B_LATE 1
#define C_B_ERR 1
#define C_B_TAKELOST 1
#define C_B_KILL 1
#define C_B_SHUT 1
#endif

#if CFG == 11
/* General, BufferOne: run-now, retries; any 1 fault (2 in the long run). */
#define C_R 2
#define C_NS 2
#define C_ATT 2
#define C_OVERLAP BUFFER_ONE
#define C_RUN_NOW 1
#define C_B_FAULTS 1
#define C_B_STALL 1
#define C_B_LATE 1
#define C_B_LOST 1
#define C_B_ERR 1
#define C_B_KILL 1
#define C_B_SHUT 1
#endif

#if CFG == 12
/* General, 3 replicas, Skip, retries; any 1 fault (2 in the long run). */
#define C_R 3
#define C_NS 2
#define C_ATT 2
#define C_B_FAULTS 1
#define C_B_STALL 1
#define C_B_TAKELOST 1
#define C_B_SHUT 1
#define C_B_LOST 1
#define C_B_LATE 1
#define C_B_ERR 1
#define C_B_KILL 1
#endif

#if CFG == 13
/* General, small (CI): Skip, one slot, retries, pause, backfill; any 1 fault of kill -9, a
 * stall, an error reply. */
#define C_R 2
#define C_NS 1
#define C_ATT 2
#define C_PAUSE 1
#define C_BACKFILLS 1
#define C_B_FAULTS 1
#define C_B_KILL 1
#define C_B_STALL 1
#define C_B_ERR 1
#endif

/* -D overrides, then the defaults */
#ifndef R
#ifdef C_R
#define R C_R
#else
#define R 2
#endif
#endif
#ifndef NS                      /* slots: slot s is due at tick s */
#ifdef C_NS
#define NS C_NS
#else
#define NS 2
#endif
#endif
#ifndef ATT                     /* attempts per slot (Job::retry's attempts); 1: no retry */
#ifdef C_ATT
#define ATT C_ATT
#else
#define ATT 1
#endif
#endif
#ifndef MAXR                    /* Job::max_runs; 0: none */
#ifdef C_MAXR
#define MAXR C_MAXR
#else
#define MAXR 0
#endif
#endif
#ifndef OVERLAP
#ifdef C_OVERLAP
#define OVERLAP C_OVERLAP
#else
#define OVERLAP SKIP
#endif
#endif
#ifndef RUN_NOW                 /* run-now requests the operator makes */
#ifdef C_RUN_NOW
#define RUN_NOW C_RUN_NOW
#else
#define RUN_NOW 0
#endif
#endif
#ifndef BACKFILLS               /* backfill requests the operator makes */
#ifdef C_BACKFILLS
#define BACKFILLS C_BACKFILLS
#else
#define BACKFILLS 0
#endif
#endif
#ifndef PAUSE                   /* whether the operator may pause the job */
#ifdef C_PAUSE
#define PAUSE C_PAUSE
#else
#define PAUSE 0
#endif
#endif
#define BUDGET(name, c) c
#ifndef B_LOST                  /* a lost reply of a claim (it ran) */
#ifdef C_B_LOST
#define B_LOST C_B_LOST
#else
#define B_LOST 0
#endif
#endif
#ifndef B_LATE                  /* a claim left in the network, run later (before its lease) */
#ifdef C_B_LATE
#define B_LATE C_B_LATE
#else
#define B_LATE 0
#endif
#endif
#ifndef B_ERR                   /* an error reply (READONLY, OOM...): the command did nothing */
#ifdef C_B_ERR
#define B_ERR C_B_ERR
#else
#define B_ERR 0
#endif
#endif
#ifndef B_TAKELOST              /* a lost reply of a retry's take (it ran) */
#ifdef C_B_TAKELOST
#define B_TAKELOST C_B_TAKELOST
#else
#define B_TAKELOST 0
#endif
#endif
#ifndef B_KILL                  /* kill -9 of a replica */
#ifdef C_B_KILL
#define B_KILL C_B_KILL
#else
#define B_KILL 0
#endif
#endif
#ifndef B_SHUT                  /* SIGTERM of a replica */
#ifdef C_B_SHUT
#define B_SHUT C_B_SHUT
#else
#define B_SHUT 0
#endif
#endif
#ifndef B_STALL                 /* a stall: the clock moves on while a step is due */
#ifdef C_B_STALL
#define B_STALL C_B_STALL
#else
#define B_STALL 0
#endif
#endif
#ifndef B_FAULTS                /* faults in one run, all kinds together */
#ifdef C_B_FAULTS
#define B_FAULTS C_B_FAULTS
#else
#define B_FAULTS 2
#endif
#endif
#ifndef T                       /* runs in flight per replica */
#define T 2
#endif
#ifndef L                       /* the job's lock lease, ticks */
#define L 2
#endif
#ifndef TMAX
#define TMAX (NS + L)
#endif

#define NT (R * T)
#define NONE 255
#define BIT(n) (1 << (n))
#define HAS(set, n) (((set) >> (n)) & 1)
/* the tick value attempt n of slot s claims under OLD_B1 (RunContext::claim_tick); attempt 1's
 * is the slot's tick */
#define TV(s, n) ((s) * ATT + (n) - 1)
/* a token names its replica: client_of */
#define OWNER(tk) (((tk) - 1) % 4)

/* ================================================================== state */

/* Redis */
byte now;
byte key;                     /* the job's lock: the token holding it, 0 free */
byte kexp;                    /* the tick it expires at */
byte last = NONE;             /* {key}:tick, the last claimed tick (TV) */
byte pend[3];                /* the group's pending retries zset: bit n-1 attempt n, bit 0 backfill */
#define HANDED 3               /* pend bit: a buffered slot handed over by a stopping replica */
byte pwait[3];                /* entries put back after a held lock: due after the next tick */
byte taker[3];               /* fixed R1: who took slot s's last entry (replica + 1) */
byte hist;                    /* slots with a ran/failed/... history entry */
byte ownhist;                 /* slots with an entry of their own run (not backfill, not run-now) */
byte bfq;                     /* fixed F2: scheduler:{group}:backfilled, slots queued by a request */
byte runcount;                     /* OLD_M1: the run count (INCR) */
bool paused;
byte buf;                     /* BufferOne's buffer: slot + 1, 0 empty */
byte req;                     /* run-now requests waiting */

/* the network: one command left late (a claim's first send) */
byte late_tok, late_s, late_sent;
bool late_on;

/* replicas */
bool alive[R], shut[R], seenp[R], mrdone[R], rsync[R];
byte nf[R];                   /* the next slot its timer fires */
byte cl_tok[R * 2], cl_dl[R * 2]; /* its background clean-ups (Releaser::abandon): token, deadline */

/* tasks: task i is run i % T of replica i / T */
#define K_IDLE 0
#define K_SLOT 1              /* a slot's run (batched claim): timer, catch-up, buffered */
#define K_RETRY 2             /* attempt n >= 2 taken from the pending retries */
#define K_BACKFILL 3          /* a backfill slot taken from the pending retries */
#define K_MANUAL 4            /* a run-now request taken */
byte kind[NT], pc[NT], ts[NT], tn[NT], tok[NT], sent[NT], res[NT];
bool body[NT];

#define P_CLAIM 1             /* about to check the pause flag and send its claim */
#define P_LOST 2              /* its claim's reply was lost: resend or give up */
#define P_BUFFER 3            /* BufferOne: found held, buffering */
#define P_COUNT 4             /* lock taken: max_runs count, then the body */
#define P_BODY 5              /* the body runs */
#define P_RELEASE 6           /* body ended (res): release the lock */
#define P_RETRY 7             /* write the next attempt (before the history entry) */
#define P_HIST 8              /* write the history entry */
#define P_TAKEBUF 9           /* BufferOne: take the buffer */

#define RES_OK 1
#define RES_FAIL 2            /* the body failed, or Uncounted */
#define RES_LOCKFAIL 3        /* the claim failed without running (error reply / lost) */
#define RES_SKIP 4            /* nothing ran here (held, tick done, max runs, paused) */

/* ghosts */
byte ntok;
byte nfault, fk;              /* faults so far; kinds used (one each) */
byte started[3];             /* attempts whose body started, bit n-1 (a backfill counts as 1) */
byte okd;                     /* slots that succeeded */
byte failpend[3];            /* attempt n failed and its retry is owed */
byte excused;                 /* slots a kill -9 or a pause may have lost */
byte fate;                    /* slots something happened to (ran, skipped for a reason, reported) */
byte bodies;                  /* slots whose body started (max runs) */
byte backfills, runnows, pauses;
byte i_, j_, r_, rep;         /* scratch */
byte twice, after_success, overlap, orphan, lost_retry, over_max, buffer_left,
  start_after_stop, start_after_pause, slot_missed;

#ifdef PROBES
c_decl { int probe_seen[32]; }
#define PROBE(n, name) c_code { if (!probe_seen[n]) { probe_seen[n] = 1; printf("probe reached: %s\n", name); } }
#else
#define PROBE(n, name) skip
#endif

#define FK_LOST 1
#define FK_LATE 2
#define FK_ERR 4
#define FK_TAKELOST 8
#define FK_KILL 16
#define FK_SHUT 32
#define FK_STALL 64
#define CAN(kind, budget) (budget > 0 && nfault < B_FAULTS && (fk & kind) == 0)
#define USE(kind) nfault++; fk = fk | kind

/* ================================================================== invariants */

inline check() {
  /* orphan: the lock holds a live replica's token that nothing of it will release or give up */
  if
  :: (key != 0 && alive[OWNER(key)] && cl_tok[OWNER(key) * 2] != key && cl_tok[OWNER(key) * 2 + 1] != key && !(late_on && late_tok == key)) ->
     r_ = OWNER(key); j_ = 0;
     i_ = r_ * T;
     do
     :: i_ < r_ * T + T -> if :: kind[i_] != K_IDLE && tok[i_] == key -> j_ = 1 :: else -> skip fi; i_++
     :: else -> break
     od;
     orphan = (j_ == 0); i_ = 0; j_ = 0; r_ = 0
  :: else -> skip
  fi;
  assert(!orphan);
  assert(!twice); assert(!after_success); assert(!overlap); assert(!over_max);
  assert(!start_after_stop); assert(!start_after_pause)
}

/* ================================================================== Redis scripts */

/* claim_ticks.lua (lock-core schema/claim_ticks), one item: SET NX PX GET the lock; free: the
 * tick claimed unless already (then the lock is deleted again). rep: 1 claimed, 0 held by
 * another token, 3 held by this token (an earlier send of it), 2 tick done. */
inline claim_ticks(tk, s) {
  if
  :: key != 0 && key == tk -> rep = 3
  :: key != 0 && key != tk -> rep = 0
  :: key == 0 && last != NONE && last >= TV(s, 1) -> rep = 2
  :: key == 0 && !(last != NONE && last >= TV(s, 1)) -> key = tk; kexp = now + L; last = TV(s, 1); rep = 1
  fi
}

/* acquire.lua with a tick (OLD_B1's retry): held by another: 0; the tick claimed by someone
 * else: 2; else the lock taken and the tick claimed: 1. */
inline acquire_tick(tk, tv) {
  if
  :: key != 0 && key != tk -> rep = 0
  :: else ->
     if
     :: last != NONE && last >= tv -> rep = 2
     :: else -> key = tk; kexp = now + L; last = tv; rep = 1
     fi
  fi
}

/* acquire.lua / SET NX without a tick (a retry, backfill or run-now: tick::unslotted). */
inline acquire_plain(tk) {
  if
  :: key == 0 -> key = tk; kexp = now + L; rep = 1
  :: else -> rep = 0
  fi
}

/* ================================================================== tasks */

inline new_token(i) {
  ntok++; tok[i] = (ntok * 4) + (i / T) + 1
}

inline idle(i) {
  kind[i] = K_IDLE; pc[i] = 0; ts[i] = 0; tn[i] = 0; tok[i] = 0; sent[i] = 0; res[i] = 0
}

/* a task starts work: never after its replica was told to stop */
inline spawn(i, k, s, n) {
  if :: shut[i / T] -> start_after_stop = 1 :: else -> skip fi;
  kind[i] = k; ts[i] = s; tn[i] = n; pc[i] = P_CLAIM
}

#define FREE(r) (kind[(r) * T] == K_IDLE || kind[(r) * T + 1] == K_IDLE)
#define DUE(s) (pend[s] & ~pwait[s])
#define ANY_PEND (DUE(0) != 0 || DUE(1) != 0 || DUE(2) != 0)
/* a free task of replica r, in i_ (NONE if none) */
inline free_task(r) {
  i_ = r * T;
  do
  :: i_ < r * T + T && kind[i_] == K_IDLE -> break
  :: i_ < r * T + T && kind[i_] != K_IDLE -> i_++
  :: i_ == r * T + T -> i_ = NONE; break
  od
}

/* the body starts: every start property */
inline start_body(i) {
  if
  :: kind[i] != K_MANUAL ->
     if :: HAS(started[ts[i]], tn[i] - 1) -> twice = 1 :: else -> skip fi;
     if :: HAS(okd, ts[i]) -> after_success = 1 :: else -> skip fi;
     started[ts[i]] = started[ts[i]] | BIT(tn[i] - 1);
     fate = fate | BIT(ts[i]);
     if :: failpend[ts[i]] == tn[i] - 1 -> failpend[ts[i]] = 0 :: else -> skip fi;
     bodies = bodies | BIT(ts[i])
  :: else -> skip
  fi;
  /* at most one body at a time, against each holder's lease as it believes it */
  j_ = 0;
  do
  :: j_ < NT -> if :: j_ != i && body[j_] && now < sent[j_] + L -> overlap = 1 :: else -> skip fi; j_++
  :: else -> break
  od;
  j_ = 0;
#if MAXR > 0
  i_ = 0; j_ = 0;
  do
  :: i_ < NS -> j_ = j_ + HAS(bodies, i_); i_++
  :: else -> break
  od;
  if :: j_ > MAXR -> over_max = 1 :: else -> skip fi;
  i_ = 0; j_ = 0;
#endif
  printf("t=%d r%d: body of slot %d attempt %d starts (kind %d)\n", now, i / T, ts[i], tn[i], kind[i]);
  body[i] = 1; pc[i] = P_BODY
}

/* a slot whose run did not happen here for a reason (held elsewhere, paused, max runs) */
inline skipped(i) {
  fate = fate | BIT(ts[i]); res[i] = RES_SKIP
}

/* a claim's reply `rep` for task i */
inline claim_reply(i) {
  printf("t=%d r%d: claim of slot %d answered %d (1 claimed, 0 held, 3 ours, 2 tick done)\n", now, i / T, ts[i], rep);
  if
  :: rep == 1 || rep == 3 ->
     pc[i] = P_COUNT;
     PROBE(1, "slot_claimed")
  :: rep == 0 ->
#if OVERLAP == BUFFER_ONE
     pc[i] = P_BUFFER
#else
     skipped(i); pc[i] = P_HIST; PROBE(2, "slot_held")
#endif
  :: rep == 2 -> res[i] = RES_SKIP; pc[i] = P_HIST
  fi
}

/* the background clean-up of a token whose claim's outcome is unknown */
inline arm_cleanup(r, tk, deadline) {
  if
  :: cl_tok[r * 2] == 0 -> cl_tok[r * 2] = tk; cl_dl[r * 2] = deadline
  :: cl_tok[r * 2] != 0 -> assert(cl_tok[r * 2 + 1] == 0);   /* a model bound: two per replica */
     cl_tok[r * 2 + 1] = tk; cl_dl[r * 2 + 1] = deadline
  fi
}

proctype task(byte i) {
  byte r = i / T;
end:
  do
  /* ---- the claim (and the pause check before it) */
  :: atomic { alive[r] && pc[i] == P_CLAIM && paused ->
       seenp[r] = 1; skipped(i); PROBE(3, "paused_seen"); idle(i); check() }
  :: atomic { alive[r] && pc[i] == P_CLAIM && !paused && kind[i] == K_SLOT ->
       /* ClaimBatch: claim_ticks.lua in the wake's pipeline (LockClient::claim_ticks) */
       new_token(i); sent[i] = now;
       if
       :: claim_ticks(tok[i], ts[i]); claim_reply(i)
       :: CAN(FK_LOST, B_LOST) -> USE(FK_LOST); claim_ticks(tok[i], ts[i]); pc[i] = P_LOST;
          printf("t=%d r%d: claim of slot %d ran (%d), its reply lost\n", now, r, ts[i], rep)
       :: CAN(FK_LATE, B_LATE) && !late_on -> USE(FK_LATE);
          late_on = 1; late_tok = tok[i]; late_s = ts[i]; late_sent = now; pc[i] = P_LOST;
          printf("t=%d r%d: claim of slot %d left in the network (late)\n", now, r, ts[i])
       :: CAN(FK_ERR, B_ERR) -> USE(FK_ERR); res[i] = RES_LOCKFAIL; pc[i] = P_RETRY;
          printf("t=%d r%d: claim of slot %d answered by an error reply\n", now, r, ts[i])
       fi;
       check() }
  :: atomic { alive[r] && pc[i] == P_LOST && now == sent[i] ->
       /* an unknown outcome may take the slot's tick for nobody: the slot may be lost (not
        * reported), a known limit the properties excuse */
       excused = excused | BIT(ts[i]);
       /* claims.rs send_claims: a lost reply, sent again at once with the same tokens */
       PROBE(4, "claim_resent");
       printf("t=%d r%d: claim of slot %d sent again\n", now, r, ts[i]);
       if
       :: claim_ticks(tok[i], ts[i]);
          if
          :: rep == 1 || rep == 3 || rep == 2 -> skip   /* guarded, or the tick record drops a late send's lock */
          :: rep == 0 ->
#ifndef OLD_S1
             arm_cleanup(r, tok[i], sent[i] + L); PROBE(5, "resend_held_cleanup_armed");
             printf("t=%d r%d: the first send's clean-up stays armed\n", now, r)
#else
             skip
#endif
          fi;
          claim_reply(i)
       :: CAN(FK_ERR, B_ERR) -> USE(FK_ERR);
          printf("t=%d r%d: the resend answered by an error reply\n", now, r);
#ifndef OLD_S2
          arm_cleanup(r, tok[i], sent[i] + L); PROBE(6, "resend_error_cleanup_armed");
          printf("t=%d r%d: the first send's clean-up stays armed\n", now, r);
#endif
          res[i] = RES_LOCKFAIL; pc[i] = P_RETRY
       fi;
       check() }
  :: atomic { alive[r] && pc[i] == P_LOST && now != sent[i] ->
       excused = excused | BIT(ts[i]);
       /* too late to resend: the clean-up gives the token up (CleanupOnDrop) */
       arm_cleanup(r, tok[i], sent[i] + L); res[i] = RES_LOCKFAIL; pc[i] = P_RETRY;
       printf("t=%d r%d: claim of slot %d unknown, clean-up armed\n", now, r, ts[i]); check() }
  :: atomic { alive[r] && pc[i] == P_CLAIM && !paused && kind[i] == K_RETRY ->
       new_token(i); sent[i] = now;
#ifdef OLD_B1
       /* RunContext::claim_tick: attempt n claims tick slot + n - 1 */
       acquire_tick(tok[i], TV(ts[i], tn[i]));
#else
       /* a retry runs once because one replica took it: its lock without a tick */
       acquire_plain(tok[i]);
#endif
       printf("t=%d r%d: retry of slot %d attempt %d: lock answered %d\n", now, r, ts[i], tn[i], rep);
       if
       :: rep == 1 -> pc[i] = P_COUNT; PROBE(7, "retry_locked")
       :: rep == 0 ->       /* held: after_attempt puts the same attempt back */
          pend[ts[i]] = pend[ts[i]] | BIT(tn[i] - 1); pwait[ts[i]] = pwait[ts[i]] | BIT(tn[i] - 1);
          tok[i] = 0; idle(i); PROBE(8, "retry_held_put_back")
       :: rep == 2 -> res[i] = RES_SKIP; pc[i] = P_HIST        /* "tick done": dropped */
       fi;
       check() }
  :: atomic { alive[r] && pc[i] == P_CLAIM && !paused && kind[i] == K_BACKFILL ->
       new_token(i); sent[i] = now;
       acquire_plain(tok[i]);
       printf("t=%d r%d: backfill of slot %d: lock answered %d\n", now, r, ts[i], rep);
       if
       :: rep == 1 ->
#ifndef OLD_F
          if
          /* control::backfill::ran_since_request, under the lock: the slot's own run has a
           * history entry (written after the request, which found none), or the slot is the
           * last claimed tick (its run ended a moment ago, its entry not written yet) */
          :: HAS(ownhist, ts[i]) || last == TV(ts[i], 1) ->
             res[i] = RES_SKIP; pc[i] = P_RELEASE; PROBE(9, "backfill_found_ran")
          :: else ->
#ifndef F3_UNCLAIMED_BACKFILL
             /* F3 (found by this model): a slot after the last claimed tick is claimed by its
              * backfill run, so that its own claim, still to come (a stall, the claim grace, a
              * catch-up), finds it done */
             if
             :: last == NONE || last < TV(ts[i], 1) -> last = TV(ts[i], 1); PROBE(33, "backfill_claimed_tick")
             :: else -> skip
             fi;
#endif
             pc[i] = P_COUNT
          fi
#else
          pc[i] = P_COUNT
#endif
       :: else -> pend[ts[i]] = pend[ts[i]] | 1; pwait[ts[i]] = pwait[ts[i]] | 1;
          tok[i] = 0; idle(i); PROBE(10, "backfill_held_put_back")
       fi;
       check() }
  :: atomic { alive[r] && pc[i] == P_CLAIM && kind[i] == K_MANUAL ->
       /* run-now: whether or not paused; skipped when a run is in flight here */
       j_ = r * T; rep = 0;
       do
       :: j_ < r * T + T -> if :: j_ != i && body[j_] -> rep = 1 :: else -> skip fi; j_++
       :: else -> break
       od;
       j_ = 0;
       if
       :: rep == 1 -> idle(i)
       :: else ->
          new_token(i); sent[i] = now; acquire_plain(tok[i]);
          printf("t=%d r%d: run-now: lock answered %d\n", now, r, rep);
          if :: rep == 1 -> pc[i] = P_COUNT :: else -> tok[i] = 0; idle(i) fi
       fi;
       rep = 0; check() }
  /* ---- BufferOne: buffer.rs buffer_slot (SET buffered GET, EXISTS lock) */
  :: atomic { alive[r] && pc[i] == P_BUFFER ->
       buf = ts[i] + 1; fate = fate | BIT(ts[i]); PROBE(11, "slot_buffered");
       printf("t=%d r%d: slot %d buffered, lock held by %d (0: free, starts it)\n", now, r, ts[i], key);
       if
       :: key == 0 -> pc[i] = P_CLAIM; PROBE(12, "buffered_found_free")   /* starts it here */
       :: else -> res[i] = RES_SKIP; pc[i] = P_HIST
       fi;
       check() }
  /* ---- the lock is ours: max_runs, then the body */
  :: atomic { alive[r] && pc[i] == P_COUNT && now >= sent[i] + L ->
       /* the lease ran out before the body (a stall): the lock is lost, the run failed */
       res[i] = RES_FAIL; pc[i] = P_RELEASE; check() }
  :: atomic { alive[r] && pc[i] == P_COUNT && now < sent[i] + L ->
#if MAXR > 0
       if
       :: kind[i] == K_MANUAL || kind[i] == K_BACKFILL || tn[i] > 1 -> start_body(i)
       :: kind[i] != K_MANUAL && kind[i] != K_BACKFILL && tn[i] == 1 ->
          /* max_runs::count: INCR, attempt 1 only (its retries belong to the counted slot) */
          if
          :: runcount++;
             if
             :: runcount >= MAXR -> mrdone[r] = 1
             :: else -> skip
             fi;
             if
             :: runcount > MAXR -> skipped(i); pc[i] = P_RELEASE; PROBE(13, "max_runs_reached")
             :: else -> start_body(i)
             fi
          :: CAN(FK_ERR, B_ERR) -> USE(FK_ERR); PROBE(14, "count_failed");
             printf("t=%d r%d: max_runs count of slot %d answered by an error reply\n", now, r, ts[i]);
#ifdef OLD_M1
             res[i] = RES_FAIL; pc[i] = P_RELEASE        /* Failure::Uncounted: failed, retried */
#else
             res[i] = RES_SKIP; pc[i] = P_RELEASE        /* NotStarted::Uncounted: not run, not retried */
#endif
          fi
       fi;
#else
       start_body(i);
#endif
       check() }
  :: atomic { alive[r] && pc[i] == P_BODY ->
       body[i] = 0;
       if
       :: res[i] = RES_OK; if :: kind[i] != K_MANUAL -> okd = okd | BIT(ts[i]) :: else -> skip fi
       :: res[i] = RES_FAIL; PROBE(15, "body_failed")
       fi;
       printf("t=%d r%d: body of slot %d attempt %d ends: %d (1 ok, 2 failed)\n", now, r, ts[i], tn[i], res[i]);
       pc[i] = P_RELEASE; check() }
  /* ---- after the run: release, the next attempt, the history, the buffer */
  :: atomic { alive[r] && pc[i] == P_RELEASE ->
       if :: key == tok[i] -> key = 0 :: else -> skip fi;
       printf("t=%d r%d: released\n", now, r);
       pc[i] = P_RETRY; check() }
  :: atomic { alive[r] && pc[i] == P_RETRY ->
       /* run/mod.rs after_attempt: written before the attempt's history entry */
       if
       :: res[i] == RES_LOCKFAIL && kind[i] == K_SLOT ->
          rsync[r] = 1;             /* request_resync: the catch-up decides */
#ifdef OLD_A1
          if
          :: tn[i] < ATT -> pend[ts[i]] = pend[ts[i]] | BIT(tn[i]); failpend[ts[i]] = tn[i];
             printf("t=%d r%d: retry of slot %d attempt %d written\n", now, r, ts[i], tn[i] + 1)
          :: else -> skip
          fi
#endif
       :: res[i] == RES_FAIL && kind[i] == K_RETRY && tn[i] == ATT ->
          failpend[ts[i]] = 0       /* its last attempt failed: failed for good */
       :: res[i] == RES_FAIL && (kind[i] == K_SLOT || kind[i] == K_RETRY) && tn[i] < ATT ->
          pend[ts[i]] = pend[ts[i]] | BIT(tn[i]); failpend[ts[i]] = tn[i]; PROBE(16, "retry_written");
          printf("t=%d r%d: retry of slot %d attempt %d written\n", now, r, ts[i], tn[i] + 1)
       :: else -> skip
       fi;
       pc[i] = P_HIST; check() }
  :: atomic { alive[r] && pc[i] == P_HIST ->
       /* record_attempt (a claim that failed is recorded too) */
       if
       :: res[i] == RES_OK || res[i] == RES_FAIL || res[i] == RES_LOCKFAIL ->
          hist = hist | BIT(ts[i]);
          if :: kind[i] == K_SLOT || kind[i] == K_RETRY -> ownhist = ownhist | BIT(ts[i]) :: else -> skip fi
       :: else -> skip
       fi;
#if OVERLAP == BUFFER_ONE
       if
#ifdef OLD_U1
       :: (res[i] == RES_OK || res[i] == RES_FAIL) && kind[i] != K_MANUAL -> pc[i] = P_TAKEBUF
#else
       :: res[i] == RES_OK || res[i] == RES_FAIL -> pc[i] = P_TAKEBUF
#endif
       :: else -> idle(i)
       fi;
#else
       idle(i);
#endif
       check() }
  :: atomic { alive[r] && pc[i] == P_TAKEBUF ->
       /* buffer.rs run_buffered: GETDEL, a later slot started here */
       if
       :: buf != 0 && (kind[i] == K_MANUAL || buf - 1 > ts[i]) ->
          j_ = buf - 1; buf = 0;
#ifndef OLD_SHUT
          if
          :: shut[r] ->     /* buffer::hand_over: an entry due now, for another replica */
#ifdef HANDOVER_AS_BACKFILL
             pend[j_] = pend[j_] | 1;           /* as written in edges-sched's notes: a backfill entry */
#else
             pend[j_] = pend[j_] | BIT(HANDED); /* a slot entry: its run claims the slot's tick */
#endif
             printf("t=%d r%d: stopping: slot %d handed over\n", now, r, j_);
             idle(i); PROBE(17, "buffered_handed_over_at_shutdown")
          :: else -> idle(i); spawn(i, K_SLOT, j_, 1); PROBE(18, "buffered_started")
          fi;
#else
          idle(i); spawn(i, K_SLOT, j_, 1);
#endif
          j_ = 0
       :: else -> buf = 0; idle(i)
       fi;
       check() }
  od
}

/* ================================================================== replicas */

proctype replica(byte r) {
end:
  do
  /* the timer fires slot nf[r] at its tick (a free run assumed: T is a model bound) */
  :: atomic { alive[r] && !shut[r] && nf[r] < NS && nf[r] <= now && FREE(r) ->
       if
       :: mrdone[r] || seenp[r] -> fate = fate | BIT(nf[r])   /* it fires the job no more */
       :: else ->
          free_task(r);
          spawn(i_, K_SLOT, nf[r], 1); i_ = 0;
          printf("t=%d r%d: fires slot %d\n", now, r, nf[r])
       fi;
       nf[r]++; check() }
  /* the taker: a due retry or backfill slot (pending::take, ZREM); any replica */
  :: atomic { alive[r] && !shut[r] && FREE(r) && ANY_PEND ->
       free_task(r);
       if
       :: DUE(0) != 0 -> j_ = 0
       :: DUE(1) != 0 -> j_ = 1
       :: DUE(2) != 0 -> j_ = 2
       fi;
       if
       :: HAS(DUE(j_), 0) -> rep = 0
       :: HAS(DUE(j_), 1) -> rep = 1
       :: HAS(DUE(j_), 2) -> rep = 2
       :: HAS(DUE(j_), HANDED) -> rep = HANDED
       fi;
       pend[j_] = pend[j_] & ~BIT(rep); taker[j_] = r + 1;
       printf("t=%d r%d: takes slot %d's pending entry %d (0 backfill, n-1 attempt n)\n", now, r, j_, rep);
       if
       :: rep == HANDED -> spawn(i_, K_SLOT, j_, 1); PROBE(32, "handed_over_taken")
       :: rep == 0 -> spawn(i_, K_BACKFILL, j_, 1); PROBE(19, "backfill_taken")
       :: rep != 0 && rep != HANDED -> spawn(i_, K_RETRY, j_, rep + 1); PROBE(20, "retry_taken")
       :: CAN(FK_TAKELOST, B_TAKELOST) -> USE(FK_TAKELOST);
#ifdef OLD_R1
          printf("t=%d r%d: the take's reply is lost\n", now, r)   /* the poll fails: removed, run nowhere */
#else
          /* sent again: the take answers "taken by you" */
          if
          :: taker[j_] == r + 1 ->
             if
             :: rep == HANDED -> spawn(i_, K_SLOT, j_, 1)
             :: rep == 0 -> spawn(i_, K_BACKFILL, j_, 1)
             :: rep != 0 && rep != HANDED -> spawn(i_, K_RETRY, j_, rep + 1)
             fi;
             PROBE(21, "take_resent")
          fi
#endif
       fi;
       i_ = 0; j_ = 0; rep = 0; check() }
  /* the taker: a run-now request (take_run.lua) */
  :: atomic { alive[r] && !shut[r] && req > 0 && FREE(r) ->
       free_task(r);
       req--; spawn(i_, K_MANUAL, 0, 1); i_ = 0; PROBE(22, "run_now_taken"); printf("t=%d r%d: takes the run-now request\n", now, r); check() }
  /* the resync (timer/resync.rs): the last claimed tick read, the latest slot after it that
   * this replica fired caught up */
  :: atomic { alive[r] && !shut[r] && rsync[r] && FREE(r) ->
       rsync[r] = 0;
       j_ = nf[r];
       if
       :: j_ > 0 && (last == NONE || last < TV(j_ - 1, 1)) && !mrdone[r] && !seenp[r] ->
          free_task(r);
          spawn(i_, K_SLOT, j_ - 1, 1); i_ = 0; PROBE(23, "caught_up");
          printf("t=%d r%d: resync catches slot %d up\n", now, r, j_ - 1)
       :: else -> skip
       fi;
       j_ = 0; check() }
  /* the background clean-ups: Releaser::abandon (abandon.lua) until the deadline; the last
   * give_up is sent at or after it (edges-lock's fix of issue 54's point 1) */
  :: atomic { alive[r] && (cl_tok[r * 2] != 0 || cl_tok[r * 2 + 1] != 0) ->
       if
       :: cl_tok[r * 2] != 0 -> j_ = r * 2
       :: cl_tok[r * 2 + 1] != 0 -> j_ = r * 2 + 1
       fi;
       if :: key == cl_tok[j_] -> key = 0; PROBE(24, "cleanup_gave_up") :: else -> skip fi;
       printf("t=%d r%d: clean-up gives up token %d\n", now, r, cl_tok[j_]);
       if :: now >= cl_dl[j_] -> cl_tok[j_] = 0; cl_dl[j_] = 0 :: else -> skip fi;
       j_ = 0; check() }
  /* kill -9 */
  :: atomic { alive[r] && CAN(FK_KILL, B_KILL) -> USE(FK_KILL);
       alive[r] = 0; cl_tok[r * 2] = 0; cl_dl[r * 2] = 0; cl_tok[r * 2 + 1] = 0; cl_dl[r * 2 + 1] = 0; rsync[r] = 0;
       j_ = r * T;
       do
       :: j_ < r * T + T ->
          if :: kind[j_] != K_IDLE && kind[j_] != K_MANUAL -> excused = excused | BIT(ts[j_]) :: else -> skip fi;
          body[j_] = 0; idle(j_); j_++
       :: else -> break
       od;
       /* slots it had not fired yet, and those it owed a retry of, may be lost with it */
       j_ = 0;
       do
       :: j_ < NS -> if :: j_ >= nf[r] || taker[j_] == r + 1 -> excused = excused | BIT(j_) :: else -> skip fi; j_++
       :: else -> break
       od;
       j_ = 0; PROBE(25, "killed"); printf("t=%d r%d: kill -9\n", now, r); check() }
  /* SIGTERM: stops firing and taking; the runs in flight finish */
  :: atomic { alive[r] && !shut[r] && CAN(FK_SHUT, B_SHUT) -> USE(FK_SHUT);
       shut[r] = 1; rsync[r] = 0;
       j_ = nf[r];
       do
       :: j_ < NS -> excused = excused | BIT(j_); j_++
       :: else -> break
       od;
       j_ = 0; PROBE(26, "shut_down"); printf("t=%d r%d: SIGTERM\n", now, r); check() }
  od
}

/* ================================================================== the world */

/* something must happen before the clock moves on: a slot due on a live replica, a clean-up's
 * last give_up */
/* a task's step other than its body's end is due at once (absent a stall) */
#define BUSY(i) (kind[i] != K_IDLE && pc[i] != P_BODY)
#define URGENT(r) (alive[r] && ((!shut[r] && nf[r] < NS && nf[r] <= now) || BUSY((r) * T) || BUSY((r) * T + 1) || \
  (cl_tok[(r) * 2] != 0 && now >= cl_dl[(r) * 2]) || (cl_tok[(r) * 2 + 1] != 0 && now >= cl_dl[(r) * 2 + 1])))
#if R == 1
#define CAN_TICK (!URGENT(0))
#elif R == 2
#define CAN_TICK (!URGENT(0) && !URGENT(1))
#else
#define CAN_TICK (!URGENT(0) && !URGENT(1) && !URGENT(2))
#endif

inline final_check() {
  /* every live replica is idle and the clock has stopped: what is owed */
  i_ = 0; j_ = 0;
  do
  :: i_ < R -> if :: alive[i_] && !shut[i_] -> j_ = 1 :: else -> skip fi; i_++
  :: else -> break
  od;
  i_ = 0;
  if
  :: j_ == 1 ->      /* a replica could still run what is owed */
     do
     :: i_ < NS ->
        /* owed and neither pending (waiting for the clock) nor run */
        if :: failpend[i_] != 0 && pend[i_] == 0 && !HAS(excused, i_) && !HAS(okd, i_) -> lost_retry = 1 :: else -> skip fi;
        if :: nfault == 0 && pauses == 0 && !HAS(fate, i_) -> slot_missed = 1 :: else -> skip fi;
        i_++
     :: else -> break
     od
  :: else -> skip
  fi;
  /* a buffered slot that never started (a stale entry of a slot that ran is harmless: only a
   * later slot is taken from the buffer) */
  if :: buf != 0 && j_ == 1 && started[buf - 1] == 0 && !HAS(excused, buf - 1) -> buffer_left = 1 :: else -> skip fi;
  i_ = 0; j_ = 0;
  assert(!lost_retry); assert(!slot_missed); assert(!buffer_left)
}

inline tick() {
  now++; printf("t=%d tick\n", now);
  pwait[0] = 0; pwait[1] = 0; pwait[2] = 0;
  if :: key != 0 && kexp <= now -> key = 0 :: else -> skip fi;
  if :: late_on && now >= late_sent + L -> late_on = 0; late_tok = 0; late_s = 0; late_sent = 0 :: else -> skip fi;
  check()
}

proctype world() {
  do
  :: atomic { now < TMAX && CAN_TICK -> tick() }
  /* a stall: the clock moves on while a replica has a step due */
  :: atomic { now < TMAX && !CAN_TICK && CAN(FK_STALL, B_STALL) -> USE(FK_STALL);
       printf("t=%d stall\n", now); PROBE(30, "stalled"); tick() }
  /* the command left in the network reaches Redis (before its lease: the documented limit) */
  :: atomic { late_on ->
       claim_ticks(late_tok, late_s); PROBE(27, "late_claim_ran");
       printf("t=%d the late claim of slot %d runs: %d\n", now, late_s, rep);
       late_on = 0; late_tok = 0; late_s = 0; late_sent = 0; rep = 0; check() }
  /* the operator */
  :: atomic { runnows < RUN_NOW -> runnows++; req++; printf("t=%d run-now requested\n", now); check() }
  :: atomic { pauses < PAUSE && !paused -> pauses++; paused = 1; excused = 255; printf("t=%d paused\n", now); check() }
  :: atomic { backfills < BACKFILLS && now > 0 ->
       /* control/backfill.rs: the slots without a ran/failed history entry queued */
       backfills++;
       j_ = 0;
       do
       :: j_ < NS && j_ < now ->
#ifndef OLD_F
          /* queue_backfill.lua: refused if a backfill of the slot was queued already */
          if :: !HAS(hist, j_) && !HAS(bfq, j_) -> pend[j_] = pend[j_] | 1; bfq = bfq | BIT(j_) :: else -> skip fi;
#else
          if :: !HAS(hist, j_) -> pend[j_] = pend[j_] | 1 :: else -> skip fi;
#endif
          j_++
       :: else -> break
       od;
       j_ = 0; PROBE(28, "backfill_requested"); printf("t=%d backfill requested\n", now); check() }
  :: timeout -> assert(now == TMAX); final_check(); break
  od
}

init {
  atomic {
    i_ = 0;
    do
    :: i_ < R -> alive[i_] = 1; i_++
    :: else -> break
    od;
    i_ = 0;
    run world();
    do
    :: i_ < R -> run replica(i_); i_++
    :: else -> break
    od;
    i_ = 0;
    do
    :: i_ < NT -> run task(i_); i_++
    :: else -> break
    od;
    i_ = 0
  }
}
