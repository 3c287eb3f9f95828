/*
 * lock.pml: a model of lock-core's lock protocol on one lock key, for spin.
 *
 * README.md (next to this file) says what each step stands for in the code, the bounds, what
 * is abstracted away and why, the properties, and how to run it (scripts/check-model.sh).
 *
 * Processes: `world` (the clock, and commands left in the network reaching Redis) and one
 * `client` per client (its operations, its background clean-ups and hand-off confirmations,
 * and its faults). Every action is one d_step: atomic, as a Lua script is in Redis, and as a
 * client's synchronous code between two awaits is. Every action ends with check(), the state
 * invariants; two event properties are asserted where their event happens (del_key, and the
 * fallback timer).
 *
 * The default is the fixed logic. Each old behaviour is switched on by a -D flag:
 *   OLD_QUEUED_SINCE             bug 1: hand-off deadline counted from the first try answered Held
 *   OLD_NO_POST_RELEASE_CLEANUP  bug 2: no clean-up after the release when a try was uncertain
 *   OLD_FOUND_IS_CERTAIN         bug 3: give_up finding the token in the key ends any clean-up
 *   OLD_UNMARKED_HANDOFF         bug 4: acquire.lua hands a free key over without the |w mark
 *   OLD_LIST_TTL                 bug 5: a queue list recreated by RPUSH gets no expiry of its own
 *   OLD_CLEANUP_REPLY_DEADLINE   cex7: a clean-up ends on a reply that comes after its deadline
 *                                (or a failed give_up after it), whenever that give_up was sent
 *   OLD_ACCEPT_MESSAGE           a waiter named by a release takes the lock on the message alone
 *                                (accept_hand_off, first send + hand-off time; implied by
 *                                OLD_QUEUED_SINCE, whose bug lived in that path)
 * CFG (1..9) picks the clients, their operations, the fault budgets and the time bound; each
 * setting can also be given with -D (e.g. -DTMAX=6 -DB_CRASH=1).
 */

/* ================================================================== configuration */

#define OP_NONE 0
#define OP_WAIT 1   /* a waiting acquisition: LockClient::lock with a wait bound (acquire/waiting.rs) */
#define OP_FF   2   /* a fail-fast acquisition: try_lock (acquire/fail_fast.rs, plain SET NX PX GET) */

#ifndef CFG
#define CFG 6
#endif

#if CFG == 1
/* Bug 1: A waits; B takes the key, releases it (handing it to A), takes it again. One lost
 * reply and one stall: the issue's trace is the only way to two holders here. */
#define C_NC 2
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_P11 OP_FF
#define C_B_LOST 1
#define C_B_STALL 1
#define C_TMAX 4
#endif

#if CFG == 2
/* Bug 2: A waits while B holds; a try of A times out and runs late. */
#define C_NC 2
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_P11 OP_FF
#define C_B_LATE 1
#define C_B_LOST 1
#define C_TMAX 4
#endif

#if CFG == 3
/* Bug 3: A waits; one reply lost, one try left late, the wait cancelled; B takes the key. */
#define C_NC 2
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_B_LOST 1
#define C_B_LATE 1
#define C_B_CANCEL 1
#define C_TMAX 4
#endif

#if CFG == 4
/* Bug 4: B holds past its lease while one waiter waits; another comes when the key is free. */
#define C_NC 3
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_P20 OP_WAIT
#define C_TMAX 5
#endif

#if CFG == 5
/* Bug 5: B holds, A waits, B waits after its release. */
#define C_NC 2
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_P11 OP_WAIT
#define C_B_PSUB 1
#define C_B_CANCEL 1
#define C_TMAX 4
#endif

#if CFG == 6
/* General, two clients: A waits twice; B tries, then waits. Any two faults (each kind once). */
#define C_NC 2
#define C_P00 OP_WAIT
#define C_P01 OP_WAIT
#define C_P10 OP_FF
#define C_P11 OP_WAIT
#define C_ALL_FAULTS
#define C_B_FAULTS 2
#define C_TMAX 4
#endif

#if CFG == 7
/* General, three clients: A and C wait, B tries. Any two faults (each kind once). */
#define C_NC 3
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_P20 OP_WAIT
#define C_ALL_FAULTS
#define C_B_FAULTS 2
#define C_TMAX 5
#endif

#if CFG == 8
/* cex7: B's try_lock is left in the network; its clean-up's last give_up before the deadline
 * runs before the late try lands and is answered after the deadline (a stall). */
#define C_NC 1
#define C_P00 OP_FF
#define C_B_LATE 1
#define C_B_STALL 1
#define C_TMAX 4
#endif

#if CFG == 9
/* A hand-off and a restart: B holds, A waits; B's release hands the key to A, Redis restarts
 * without persistence, B takes the free key again. */
#define C_NC 2
#define C_P00 OP_WAIT
#define C_P10 OP_FF
#define C_P11 OP_FF
#define C_B_RESTART 1
#define C_TMAX 3
#endif

#ifdef OLD_QUEUED_SINCE
#define OLD_ACCEPT_MESSAGE
#endif

#ifdef C_ALL_FAULTS
#define C_B_LOST 1
#define C_B_LATE 1
#define C_B_STALL 1
#define C_B_CRASH 1
#define C_B_CANCEL 1
#define C_B_PSUB 1
#define C_B_RLOST 1
#endif

#ifndef C_NC
#error "unknown CFG"
#endif

/* Each setting: -D, else the configuration's, else the default. */
#ifndef NC
#define NC C_NC
#endif
#ifndef P00
#ifdef C_P00
#define P00 C_P00
#else
#define P00 OP_NONE
#endif
#endif
#ifndef P01
#ifdef C_P01
#define P01 C_P01
#else
#define P01 OP_NONE
#endif
#endif
#ifndef P10
#ifdef C_P10
#define P10 C_P10
#else
#define P10 OP_NONE
#endif
#endif
#ifndef P11
#ifdef C_P11
#define P11 C_P11
#else
#define P11 OP_NONE
#endif
#endif
#ifndef P20
#ifdef C_P20
#define P20 C_P20
#else
#define P20 OP_NONE
#endif
#endif
#ifndef P21
#ifdef C_P21
#define P21 C_P21
#else
#define P21 OP_NONE
#endif
#endif
#ifndef TMAX
#define TMAX C_TMAX      /* the clock stops here */
#endif
#ifndef B_LOST
#ifdef C_B_LOST
#define B_LOST C_B_LOST
#else
#define B_LOST 0         /* try or give_up replies lost (the command ran; a timeout) */
#endif
#endif
#ifndef B_LATE
#ifdef C_B_LATE
#define B_LATE C_B_LATE
#else
#define B_LATE 0         /* tries left in the network on a dropped connection, run any time */
#endif
#endif
#ifndef B_STALL
#ifdef C_B_STALL
#define B_STALL C_B_STALL
#else
#define B_STALL 0        /* stalls: a client takes no step while the clock runs */
#endif
#endif
#ifndef B_CRASH
#ifdef C_B_CRASH
#define B_CRASH C_B_CRASH
#else
#define B_CRASH 0        /* client crashes */
#endif
#endif
#ifndef B_CANCEL
#ifdef C_B_CANCEL
#define B_CANCEL C_B_CANCEL
#else
#define B_CANCEL 0       /* waits cancelled (the future dropped), possibly with a try out */
#endif
#endif
#ifndef B_PSUB
#ifdef C_B_PSUB
#define B_PSUB C_B_PSUB
#else
#define B_PSUB 0         /* pub/sub connections lost (what is published meanwhile is lost) */
#endif
#endif
#ifndef B_RLOST
#ifdef C_B_RLOST
#define B_RLOST C_B_RLOST
#else
#define B_RLOST 0        /* release replies lost */
#endif
#endif

#ifndef B_RESTART
#ifdef C_B_RESTART
#define B_RESTART C_B_RESTART
#else
#define B_RESTART 0      /* Redis restarts without persistence (not in C_ALL_FAULTS) */
#endif
#endif

#ifndef B_FAULTS
#ifdef C_B_FAULTS
#define B_FAULTS C_B_FAULTS
#else
#define B_FAULTS 255     /* faults in all, of any kinds (each within its own budget) */
#endif
#endif

/* Times, in clock ticks. Only their order matters (see README). */
#ifndef L
#define L 3              /* the lease (30 s by default) */
#endif
#ifndef H
#define H 2              /* the hand-off time, a reservation's life (the command timeout, 2 s) */
#endif
#ifndef TKT
#define TKT 3            /* a waiter's ticket, `line` = 3 x max backoff: outlives any pause */
#endif
#ifndef FB
#define FB 1             /* the longest pause before a fallback retry (max backoff, 1 s) */
#endif
#ifndef DLW
#define DLW 2            /* a waiting acquisition's wait bound (shorter than the lease) */
#endif
#ifndef D
#define D 0              /* drift: none, the most trusting guard deadlines (see README) */
#endif

/* ================================================================== names */

#define NOPS 2
#define NT (NC * NOPS)                 /* tokens 1..NT (0: none); a token per operation */
#define TOKEN(c, i) ((c) * NOPS + (i) + 1)
#define CL(t) (((t) - 1) / NOPS)       /* the client of a token: schema::client_id_of */
#define NOC 255                        /* no client: `me` = nil */
#define QMAX 3
#define NNET 2
#define MIXED 255                      /* uncertain tries went out on different connections */
#define NONE 255

#define OP(c, i) ((c) == 0 -> ((i) == 0 -> P00 : P01) : ((c) == 1 -> ((i) == 0 -> P10 : P11) : ((i) == 0 -> P20 : P21)))
#define NEXTOP(c) (opi[c] < NOPS -> OP(c, opi[c]) : OP_NONE)

/* a client's program counter */
#define IDLE     0   /* between operations (done once opi == NOPS) */
#define W_TRY    1   /* Waiting::try_once due */
#define W_LISTEN 2   /* Waiting::listen due, the channel not subscribed */
#define W_PAUSE  3   /* in Waiting::pause: asleep */
#define HOLD     4   /* a guard held */
#define REL2     5   /* release_own.lua said -1: release.lua due */

#define WAITING(c) (pc[c] == W_TRY || pc[c] == W_LISTEN || pc[c] == W_PAUSE)

/* clean-up kinds (what Releaser::abandon was told) */
#define K_ALL 1      /* every command of the token answered (a waiter that left), or a release
                      * whose reply was lost: one give_up that runs settles it (Settles::Once) */
#define K_UNC 2      /* a waiter's token with tries whose outcome is unknown */
#define K_ONE 3      /* a fail-fast acquisition's single uncertain try: the one way its token
                      * can get into the key */

/* network command kinds */
#define N_ACQ   1    /* acquire.lua with a ticket: a waiter's try */
#define N_SETNX 2    /* SET key token NX PX lease GET: a fail-fast try */

/* ================================================================== state */

mtype = { Held, Acquired };   /* for printing replies */

byte now;                     /* the clock: Redis's and every client's (no skew: see README) */

/* Redis: the lock key */
byte kv_tok;                  /* its owner token; 0: no key */
bit  kv_w;                    /* the `|w` mark */
byte kv_exp;                  /* the key exists while now < kv_exp */
bit  kv_late;                 /* set by a command that ran after its lease from its send */
bit  kv_scripted;             /* written or marked by a script that knew the queue */
/* {K}:waiters, the queue list: tokens (each stands for its entry `<H>|<token>`) */
byte q[QMAX];
byte qlen;
byte q_exp;                   /* 0: no expiry */
/* {K}:tickets, the zset: token -> ticket end; `@client` -> reservation deadline (negative
 * once counted as lapsed) */
byte tk[NT + 1];              /* 0: not a member */
byte rec_s[NC];               /* |score| of `@client`; 0: not a member */
bit  rec_neg[NC];             /* the score is negative */
byte z_exp;                   /* 0: no expiry */
bit  ghost_late[NT + 1];      /* the ticket was queued by a command that ran after its lease */

/* clients */
bit  alive[NC] = 1;
bit  stalled[NC];
byte pc[NC];
byte opi[NC];                 /* the operation under way (its index in the program) */
byte tok[NC];                 /* its token */
byte cg[NC] = 1;              /* the lock connection's generation (conn/mod.rs Sent); 0 once dead */
bit  sub[NC];                 /* the release channel subscribed and confirmed (conn/wake_ups) */
bit  wk[NC];                  /* Slot.woken */
bit  hd[NC];                  /* Slot.handed */
bit  avail[NC];               /* while it slept, a script made the lock available to it */
/* a waiting acquisition (acquire/waiting.rs Waiting) */
byte qs[NC];                  /* queued_since; NONE */
byte unc_gen[NC];             /* tries with an unknown outcome: 0 none; g all on connection g; MIXED */
byte unc_at[NC];              /* when the last of them was sent */
byte dl[NC];                  /* the wait bound */
byte fbdue[NC];               /* the fallback timer, while asleep */
/* a guard (held/state.rs LockState) */
byte gvu[NC];                 /* its deadline: believed held while now < gvu */
bit  glost[NC];               /* marked lost */
bit  ql[NC];                  /* KeyMetrics::queued_last: this client's last release handed over */
bit  g_after[NC];             /* the guard was taken after Redis restarted (rs_done) */
bit  rs_done;                 /* Redis restarted without persistence */
byte cf[NC];                  /* confirm_hand_off under way, for this token */
/* background clean-ups (Releaser::abandon), one per token */
bit  cu[NT + 1];
bit  cu_wait[NT + 1];         /* it ran this tick: its next give_up at the next tick */
byte cu_exp[NT + 1];          /* it stops once now >= cu_exp */
byte cu_gen[NT + 1];          /* the connection(s) of the uncertain command(s) */
byte cu_kind[NT + 1];
bit  cu_out[NT + 1];          /* a give_up ran, its reply still to come */
bit  cu_after[NT + 1];        /* ... it was sent at or after cu_exp */
bit  cu_rheld[NT + 1];        /* ... it found the token (its reply, when it comes) */
byte cu_ran[NT + 1];          /* ... the connection it went out on */
/* the network: commands sent whose run is still to come */
byte n_tok[NNET];
byte n_kind[NNET];
byte n_at[NNET];              /* sent at */
byte n_gen[NNET];             /* on connection */

/* fault budgets */
byte b_lost = B_LOST, b_late = B_LATE, b_stall = B_STALL, b_crash = B_CRASH,
     b_cancel = B_CANCEL, b_psub = B_PSUB, b_rlost = B_RLOST, b_restart = B_RESTART,
     b_faults = B_FAULTS;
#define FAULT(b) ((b) > 0 && b_faults > 0)
#define USE(b) b--; b_faults--

/* scratch: not part of the state */
hidden byte ho_out, ho_w, ho_e, ho_c, ho_more, ho_gone, hk, qi, li, ci, ni, xi, tt;
hidden byte r_kind, r_rem, r_held, r_rel, ran, zx, certain, late, found, rem;
hidden byte counted[NC];
/* what the properties look at, asserted by name */
hidden byte holders, orphan, no_ttl, freed_with_live_waiter, lost_wakeup;

/* Probes (-DPROBES): pan prints each the first time the search reaches it, so that a passing
 * run shows which paths it went through (scripts/check-model.sh requires all of them). They do
 * not touch the model's state. */
#ifdef PROBES
c_decl { int probe_seen[32]; }
#define PROBE(n, name) c_code { if (!probe_seen[n]) { probe_seen[n] = 1; printf("probe reached: %s\n", name); } }
#else
#define PROBE(n, name) skip
#endif

/* ================================================================== Redis */

inline zexists() {            /* zx: the tickets zset exists */
  zx = 0; xi = 1;
  do :: xi <= NT -> if :: tk[xi] != 0 -> zx = 1 :: else -> skip fi; xi++ :: else -> break od;
  xi = 0;
  do :: xi < NC -> if :: rec_s[xi] != 0 -> zx = 1 :: else -> skip fi; xi++ :: else -> break od
}

inline zset_gc() {            /* a zset whose last member went is deleted, its TTL with it */
  zexists();
  if :: !zx -> z_exp = 0 :: else -> skip fi
}

inline zrem(t) { tk[t] = 0; ghost_late[t] = 0 }

inline rec_del(c) { rec_s[c] = 0; rec_neg[c] = 0 }

inline q_pop() {              /* LTRIM queue 1 -1 */
  qi = 0;
  do :: qi + 1 < qlen -> q[qi] = q[qi + 1]; qi++ :: else -> break od;
  qlen--; q[qlen] = 0;
  if :: qlen == 0 -> q_exp = 0 :: else -> skip fi
}

inline lrem(t) {              /* LREM queue 1 <entry> */
  li = 0;
  do
  :: li < qlen && q[li] != t -> li++
  :: li < qlen && q[li] == t ->
     do :: li + 1 < qlen -> q[li] = q[li + 1]; li++ :: else -> break od;
     qlen--; q[qlen] = 0;
     if :: qlen == 0 -> q_exp = 0 :: else -> skip fi;
     break
  :: li >= qlen -> break
  od
}

/* A waiter Redis would hand the key to: ticket running, its client not known to be gone. */
#define REDIS_LIVE(w) (tk[w] > now && (rec_s[CL(w)] == 0 || (!rec_neg[CL(w)] && rec_s[CL(w)] > now)))
/* ... that really waits with that token. */
#define LIVE_WAITER(w) (alive[CL(w)] && WAITING(CL(w)) && tok[CL(w)] == (w) && REDIS_LIVE(w))
/* ... asleep in Waiting::pause */
#define ASLEEP(w) (alive[CL(w)] && pc[CL(w)] == W_PAUSE && tok[CL(w)] == (w))

inline kv_clear() { kv_tok = 0; kv_w = 0; kv_exp = 0; kv_late = 0; kv_scripted = 0 }

/* A script DELs the key. Property: nobody is still queued, live, behind a holder that a script
 * set or marked (the value promised a hand-off). And the first waiter Redis would have handed
 * it to, if asleep, should hear of it (see the fallback timer). */
inline del_key() {
  freed_with_live_waiter = 0;
  if
  :: kv_scripted ->
     qi = 0;
     do
     :: qi < qlen -> if :: LIVE_WAITER(q[qi]) -> freed_with_live_waiter = 1 :: else -> skip fi; qi++
     :: else -> break
     od;
     qi = 0;
     do
     :: qi < qlen && !REDIS_LIVE(q[qi]) -> qi++
     :: qi < qlen && REDIS_LIVE(q[qi]) ->
        if :: ASLEEP(q[qi]) -> avail[CL(q[qi])] = 1 :: else -> skip fi;
        break
     :: qi >= qlen -> break
     od
  :: else ->
     qi = 0;
     do
     :: qi < qlen -> if :: LIVE_WAITER(q[qi]) -> PROBE(1, "key_freed_waiter_queued_before_barger") :: else -> skip fi; qi++
     :: else -> break
     od
  fi;
  assert(!freed_with_live_waiter);
  kv_clear()
}

/* lock_grant.lua set_key(waiter, ms, more) */
inline set_key(w, ms, more, lt) {
  kv_tok = w; kv_w = more; kv_exp = now + (ms); kv_late = lt; kv_scripted = 1
}

/* PUBLISH <release channel of the waiter's client> <token>: conn/wake_ups Shared::deliver, at
 * once (a delayed message is a stall of its receiver) */
inline publish(e) {
  if
  :: alive[CL(e)] && sub[CL(e)] && WAITING(CL(e)) && tok[CL(e)] == e -> hd[CL(e)] = 1; wk[CL(e)] = 1
  :: else -> skip
  fi
}

/* PUBLISH <channel> '': wakes the client's waiters */
inline publish_empty(c) {
  if :: alive[c] && sub[c] && WAITING(c) -> wk[c] = 1 :: else -> skip fi
}

/* handoff.lua hand_over(queue, tickets, me, own, publish, channel_prefix, set_key): ho_out 0
 * (nil), 1 ('handed' to ho_w), 2 ('own'); ho_more. The queue holds at most QMAX entries, so
 * the chunked reads are one read; 'blocked' needs can_enter, which locks do not pass. */
inline hand_over(me, own) {
  ho_out = 0; ho_w = 0; ho_more = 0;
  hk = 0;
  do :: hk < NC -> counted[hk] = 0; hk++ :: else -> break od;
  do
  :: qlen == 0 -> break
  :: qlen > 0 ->
     ho_e = q[0]; ho_c = CL(ho_e);
     if
     :: ho_e == own ->                          /* the caller is the oldest live waiter */
        zrem(ho_e); q_pop(); ho_more = (qlen > 0); ho_out = 2;
        if :: me != NOC -> rec_del(me) :: else -> skip fi;
        break
     :: else -> skip
     fi;
     /* its client let a reservation lapse: skipped (counted once, the record made negative) */
     ho_gone = (rec_s[ho_c] != 0 && (rec_neg[ho_c] || rec_s[ho_c] <= now) && ho_c != me);
     if
     :: ho_gone && !rec_neg[ho_c] && !counted[ho_c] -> counted[ho_c] = 1; rec_neg[ho_c] = 1
     :: else -> skip
     fi;
     if
     :: tk[ho_e] > now && !ho_gone ->           /* chosen: granted, recorded, announced */
        q_pop(); ho_more = (qlen > 0);
        set_key(ho_e, H, ho_more, ghost_late[ho_e]);
        if :: ASLEEP(ho_e) -> avail[ho_c] = 1; PROBE(2, "handoff_to_sleeper") :: else -> skip fi;
        rec_s[ho_c] = now + H; rec_neg[ho_c] = 0;
        if :: me != NOC && ho_c != me -> rec_del(me) :: else -> skip fi;
        zrem(ho_e);
        publish(ho_e);
        ho_out = 1; ho_w = ho_e;
        break
     :: else ->                                 /* dropped; a lapsed live client told to retry */
        zrem(ho_e);
        if :: !ho_gone -> publish_empty(ho_c); PROBE(3, "lapsed_ticket_dropped") :: else -> PROBE(4, "gone_client_skipped") fi;
        q_pop()
     fi
  od;
  zset_gc()
}

/* acquire.lua wait_in_line(): handoff.lua queue_up(queue, tickets, token, entry, ticket, me)
 * for token t of client me, ticket tkt */
inline wait_in_line(t, tkt, me, lt) {
  if
  :: tk[t] == 0 ->                              /* ZADD said 1: RPUSH, ZREM @me */
     zexists();
     if :: zx && qlen == 0 -> PROBE(5, "queue_list_recreated_zset_kept") :: else -> skip fi;
     if :: qlen > 0 -> PROBE(6, "queued_behind_another") :: else -> skip fi;
     tk[t] = now + tkt;
     assert(qlen < QMAX);
     q[qlen] = t; qlen++;
#ifndef OLD_LIST_TTL
     /* the fix: RPUSH said 1 (the list is new): PEXPIRE queue max(ticket, PTTL(tickets)) */
     if
     :: qlen == 1 -> q_exp = now + (z_exp != 0 && z_exp - now > tkt -> z_exp - now : tkt)
     :: else -> skip
     fi;
#endif
     rec_del(me)
  :: else -> tk[t] = now + tkt                  /* ZADD updates the score */
  fi;
  ghost_late[t] = lt;
  /* if PTTL(tickets) < ticket then PEXPIRE queue ticket; PEXPIRE tickets ticket end */
  if
  :: z_exp == 0 || z_exp - now < tkt -> z_exp = now + tkt; if :: qlen > 0 -> q_exp = now + tkt :: else -> skip fi
  :: else -> skip
  fi
}

/* acquire.lua for token t with ticket tkt (a lock; no fence, no tick). r_kind 1: {1, ...}
 * acquired; 0: {0, ms, holder} held, r_rem the ms. lt: it runs after its lease from send. */
inline acquire_lua(t, tkt, lt) {
  tt = t;
  if
  :: kv_tok != 0 && kv_tok != tt ->             /* held: queue, mark the holder */
     wait_in_line(tt, tkt, CL(tt), lt);
     if :: !kv_w -> kv_w = 1; kv_scripted = 1 :: else -> skip fi;
     r_kind = 0; r_rem = kv_exp - now
  :: kv_tok == tt ->                            /* ours (handed over, or an earlier send) */
     kv_exp = now + L;
     if :: tk[tt] != 0 -> zrem(tt); lrem(tt); zset_gc() :: else -> skip fi;
     r_kind = 1
  :: kv_tok == 0 ->                             /* free: the oldest live waiter first */
     hand_over(CL(tt), tt);
     if
     :: ho_out == 1 ->
        PROBE(7, "handed_by_acquire");
        wait_in_line(tt, tkt, CL(tt), lt);
#ifndef OLD_UNMARKED_HANDOFF
        /* the fix: if ticket > 0 and not more then SET waiter|w KEEPTTL */
        if :: !ho_more -> kv_w = 1 :: else -> skip fi;
#endif
        r_kind = 0; r_rem = H
     :: else ->
        set_key(tt, L, ho_more, lt);
        r_kind = 1
     fi
  fi
}

/* SET key token NX PX lease GET */
inline setnx(t, lt) {
  if
  :: kv_tok == 0 -> kv_tok = t; kv_w = 0; kv_exp = now + L; kv_late = lt; kv_scripted = 0; r_kind = 1
  :: else -> r_kind = 0
  fi
}

/* release_own.lua: r_rel 1, 0, or NONE for -1 */
inline release_own_lua(t) {
  if
  :: kv_tok == t && !kv_w -> del_key(); r_rel = 1
  :: kv_tok == t && kv_w -> r_rel = NONE
  :: else -> r_rel = 0
  fi
}

/* release.lua: the holder's own release (me = its client), nothing to keep */
inline release_lua(t) {
  if
  :: kv_tok == t && !kv_w -> del_key(); r_rel = 1
  :: kv_tok == t && kv_w ->
     hand_over(CL(t), 0);
     if :: ho_out == 0 -> del_key(); r_rel = 1 :: else -> r_rel = 2; PROBE(8, "handed_by_release") fi
  :: else -> r_rel = 0
  fi
}

/* abandon.lua (Releaser::give_up): r_held */
inline abandon_lua(t) {
  zrem(t); lrem(t); zset_gc();
  if
  :: kv_tok == t ->
     hand_over(CL(t), 0);
     if :: ho_out == 0 -> del_key() :: else -> PROBE(9, "handed_by_abandon") fi;
     r_held = 1
  :: else -> r_held = 0
  fi
}

/* extend.lua (confirm_hand_off's renewal) */
inline extend_lua(t) {
  if :: kv_tok == t -> kv_exp = now + L; r_held = 1 :: else -> r_held = 0 fi
}

/* ================================================================== the network */

inline net_put(t, kind, g) {
  if
  :: n_tok[0] == 0 -> n_tok[0] = t; n_kind[0] = kind; n_at[0] = now; n_gen[0] = g
  :: else -> assert(n_tok[1] == 0); n_tok[1] = t; n_kind[1] = kind; n_at[1] = now; n_gen[1] = g
  fi
}

/* A command left in the network runs now; its reply goes nowhere. */
inline deliver(i) {
  late = (now >= n_at[i] + L);
  if :: late -> PROBE(10, "late_command_after_its_lease") :: else -> skip fi;
  if
  :: n_kind[i] == N_ACQ ->
     acquire_lua(n_tok[i], TKT, late);
     if :: r_kind == 1 && cu[n_tok[i]] -> PROBE(11, "late_try_takes_key_cleanup_pending") :: else -> skip fi;
     if
     :: r_kind == 1 && !cu[n_tok[i]] && !late && tok[CL(n_tok[i])] == n_tok[i] && pc[CL(n_tok[i])] == HOLD ->
        PROBE(12, "late_try_lands_on_own_guard")
     :: else -> skip
     fi;
     if :: r_kind == 0 && tk[n_tok[i]] != 0 && tok[CL(n_tok[i])] != n_tok[i] -> PROBE(13, "late_try_ghost_ticket") :: else -> skip fi
  :: else ->
     setnx(n_tok[i], late);
     if :: r_kind == 1 && cu[n_tok[i]] -> PROBE(14, "late_setnx_takes_key_cleanup_pending") :: else -> skip fi
  fi;
  n_tok[i] = 0; n_kind[i] = 0; n_at[i] = 0; n_gen[i] = 0
}

#define INNET(t) (n_tok[0] == (t) || n_tok[1] == (t))
/* A command sent on a connection runs after those sent before on it (one multiplexed
 * connection: FIFO). Only a cancelled try can be out on a live connection: the client's next
 * command waits for it to run. */
#define OUT_ON(i, c) (n_tok[i] != 0 && CL(n_tok[i]) == (c) && n_gen[i] == cg[c])
#define CAN_SEND(c) (!OUT_ON(0, c) && !OUT_ON(1, c))

/* ================================================================== properties */

/* Is token t someone's business: its waiting acquisition, its guard, its clean-up, a command
 * of it still to run, or the confirmation of its hand-off? */
#define BUSY(t) ((tok[CL(t)] == (t) && (WAITING(CL(t)) || pc[CL(t)] == HOLD || pc[CL(t)] == REL2)) \
                 || cu[t] || INNET(t) || cf[CL(t)] == (t))

/* One line of state, printed after each step when a trail is replayed (spin -t). */
#define SHOWC(c) printf("      %c: alive=%d pc=%d op=%d tok=%d sub=%d woken=%d handed=%d since=%d unc=%d@%d dl=%d fb=%d guard_until=%d lost=%d cg=%d stalled=%d\n", \
        65 + (c), alive[c], pc[c], opi[c], tok[c], sub[c], wk[c], hd[c], qs[c], unc_gen[c], unc_at[c], dl[c], fbdue[c], gvu[c], glost[c], cg[c], stalled[c])
inline dump_state() {
  printf("      key=%d mark=%d exp=%d | queue=[%d %d %d] exp=%d | tickets: ", kv_tok, kv_w, kv_exp, q[0], q[1], q[2], q_exp);
  printf("%d:%d %d:%d ", 1, tk[1], 2, tk[2]);
#if NT > 2
  printf("%d:%d %d:%d ", 3, tk[3], 4, tk[4]);
#endif
#if NT > 4
  printf("%d:%d %d:%d ", 5, tk[5], 6, tk[6]);
#endif
  printf("@A:%d ", (rec_neg[0] -> 0 - rec_s[0] : rec_s[0]));
#if NC > 1
  printf("@B:%d ", (rec_neg[1] -> 0 - rec_s[1] : rec_s[1]));
#endif
#if NC > 2
  printf("@C:%d ", (rec_neg[2] -> 0 - rec_s[2] : rec_s[2]));
#endif
  printf("exp=%d | net: %d@%d/g%d %d@%d/g%d\n", z_exp, n_tok[0], n_at[0], n_gen[0], n_tok[1], n_at[1], n_gen[1]);
  SHOWC(0);
#if NC > 1
  SHOWC(1);
#endif
#if NC > 2
  SHOWC(2);
#endif
  printf("      clean-ups: %d:%d/wait%d/until%d %d:%d/wait%d/until%d", 1, cu[1], cu_wait[1], cu_exp[1], 2, cu[2], cu_wait[2], cu_exp[2]);
#if NT > 2
  printf(" %d:%d/wait%d/until%d %d:%d/wait%d/until%d", 3, cu[3], cu_wait[3], cu_exp[3], 4, cu[4], cu_wait[4], cu_exp[4]);
#endif
#if NT > 4
  printf(" %d:%d/wait%d/until%d %d:%d/wait%d/until%d", 5, cu[5], cu_wait[5], cu_exp[5], 6, cu[6], cu_wait[6], cu_exp[6]);
#endif
  printf("\n")
}

/* A client's connection generation only matters relative to the ones recorded with its
 * uncertain commands: with none recorded, it is reset. */
#define GEN_USED(c) (unc_gen[c] != 0 || (cu[TOKEN(c, 0)] && cu_gen[TOKEN(c, 0)] != 0) \
                     || (cu[TOKEN(c, 1)] && cu_gen[TOKEN(c, 1)] != 0) \
                     || (n_tok[0] != 0 && CL(n_tok[0]) == (c)) || (n_tok[1] != 0 && CL(n_tok[1]) == (c)))

inline check() {
  ci = 0;
  do
  :: ci < NC -> if :: alive[ci] && !GEN_USED(ci) -> cg[ci] = 1 :: else -> skip fi; ci++
  :: else -> break
  od;
  dump_state();
  /* mutual exclusion: at most one guard believed held (not released, not marked lost,
   * before its deadline, its client alive); after a restart without persistence, among the
   * guards taken after it (one from before is its documented cost) */
  holders = 0; ci = 0;
  do
  :: ci < NC -> if :: alive[ci] && pc[ci] == HOLD && !glost[ci] && now < gvu[ci] && (g_after[ci] || !rs_done) -> holders++ :: else -> skip fi; ci++
  :: else -> break
  od;
  assert(holders <= 1);
  /* no retained waiters: the queue keys always expire */
  zexists();
  no_ttl = ((qlen > 0 && q_exp == 0) || (zx && z_exp == 0));
  assert(!no_ttl);
  /* no orphan: the key never holds a live client's token that nobody holds, waits with or
   * cleans up, unless a command that ran after its lease from send put it there */
  orphan = (kv_tok != 0 && !kv_late && alive[CL(kv_tok)] && !BUSY(kv_tok));
  assert(!orphan)
}

/* ================================================================== the clock */

/* Time passes only when no live client that is not stalled has a step due now. */
#define CUDUE(t) (cu[t] && !cu_wait[t] && !cu_out[t])   /* its next give_up is due */
#define CUREP(t) (cu[t] && cu_out[t])                   /* its give_up's reply is due */
#define URG(c) (alive[c] && !stalled[c] && (pc[c] == W_TRY || pc[c] == W_LISTEN || pc[c] == REL2 \
                || (pc[c] == W_PAUSE && (wk[c] || now >= fbdue[c] || now >= dl[c])) \
                || cf[c] != 0 || CUDUE(TOKEN(c, 0)) || CUDUE(TOKEN(c, 1)) \
                || CUREP(TOKEN(c, 0)) || CUREP(TOKEN(c, 1))))
/* Nothing depends on absolute time: the clock starts with the first operation. */
#define STARTED(c) (opi[c] > 0 || pc[c] != IDLE)
#if NC == 1
#define CAN_TICK (STARTED(0) && !URG(0))
#elif NC == 2
#define CAN_TICK ((STARTED(0) || STARTED(1)) && !URG(0) && !URG(1))
#else
#define CAN_TICK ((STARTED(0) || STARTED(1) || STARTED(2)) && !URG(0) && !URG(1) && !URG(2))
#endif

/* Times that have passed are only ever compared with the clock again: they are replaced by one
 * value that compares the same, so that states differing only in them are one state. */
inline forget_the_past() {
  xi = 1;
  do
  :: xi <= NT ->
     if :: tk[xi] != 0 && tk[xi] <= now -> tk[xi] = 1 :: else -> skip fi;   /* a lapsed ticket */
     if :: cu[xi] && cu_exp[xi] <= now -> cu_exp[xi] = 0 :: else -> skip fi;
     xi++
  :: else -> break
  od;
  xi = 0;
  do
  :: xi < NC ->
     /* a lapsed reservation: Redis would count it (hand_over) and skip the client alike */
     if :: rec_s[xi] != 0 && !rec_neg[xi] && rec_s[xi] <= now -> rec_neg[xi] = 1; rec_s[xi] = 1 :: else -> skip fi;
     if :: qs[xi] != NONE && 4 * (qs[xi] + H - D) < 4 * now + H -> qs[xi] = 0 :: else -> skip fi;
     if :: pc[xi] == HOLD && gvu[xi] <= now -> gvu[xi] = 0; glost[xi] = 0 :: else -> skip fi;
     if :: pc[xi] == W_PAUSE && fbdue[xi] <= now -> fbdue[xi] = 0 :: else -> skip fi;
     if :: WAITING(xi) && dl[xi] <= now -> dl[xi] = 0 :: else -> skip fi;
     if :: unc_gen[xi] != 0 && unc_at[xi] + L <= now -> unc_at[xi] = 0 :: else -> skip fi;
     xi++
  :: else -> break
  od;
  if :: n_tok[0] != 0 && n_at[0] + L <= now -> n_at[0] = 0 :: else -> skip fi;
  if :: n_tok[1] != 0 && n_at[1] + L <= now -> n_at[1] = 0 :: else -> skip fi
}

/* A clock tick; Redis expires keys. */
inline tick() {
  now++;
  printf("t=%d tick\n", now);
  if :: kv_tok != 0 && kv_exp <= now -> kv_clear() :: else -> skip fi;
  if
  :: qlen > 0 && q_exp != 0 && q_exp <= now ->
     do :: qlen > 0 -> qlen--; q[qlen] = 0 :: else -> break od; q_exp = 0
  :: else -> skip
  fi;
  zexists();
  if
  :: zx && z_exp != 0 && z_exp <= now ->
     xi = 1; do :: xi <= NT -> zrem(xi); xi++ :: else -> break od;
     xi = 0; do :: xi < NC -> rec_del(xi); xi++ :: else -> break od;
     z_exp = 0
  :: else -> skip
  fi;
  xi = 1; do :: xi <= NT -> cu_wait[xi] = 0; xi++ :: else -> break od;
  forget_the_past();
  check()
}

/* A stall: the clock runs on while client c, alone in having a step due, takes none (until
 * its next step). Starting one when no tick follows would change nothing. */
#if NC == 1
#define STALL_TICK(c) (URG(c))
#elif NC == 2
#define STALL_TICK(c) (URG(c) && !URG(1 - (c)))
#else
#define STALL_TICK(c) (URG(c) && ((c) == 0 || !URG(0)) && ((c) == 1 || !URG(1)) && ((c) == 2 || !URG(2)))
#endif

active proctype world() {
end:
  do
  :: d_step { now < TMAX && CAN_TICK -> tick() }
  :: d_step { now < TMAX && FAULT(b_stall) && STALL_TICK(0) ->
       USE(b_stall); stalled[0] = 1; printf("t=%d A: STALLS\n", now); tick() }
#if NC > 1
  :: d_step { now < TMAX && FAULT(b_stall) && STALL_TICK(1) ->
       USE(b_stall); stalled[1] = 1; printf("t=%d B: STALLS\n", now); tick() }
#endif
#if NC > 2
  :: d_step { now < TMAX && FAULT(b_stall) && STALL_TICK(2) ->
       USE(b_stall); stalled[2] = 1; printf("t=%d C: STALLS\n", now); tick() }
#endif
  /* Redis restarts without persistence: every key forgotten, every connection dropped (what
   * was still in the network with it), the pub/sub connections lost (wake_all). A hand-off
   * heard before, or in flight, keeps its `handed` flag. */
  :: d_step { FAULT(b_restart) && STARTED(0) ->
       USE(b_restart);
       printf("t=%d Redis RESTARTS without persistence\n", now);
       kv_clear();
       do :: qlen > 0 -> qlen--; q[qlen] = 0 :: else -> break od; q_exp = 0;
       xi = 1; do :: xi <= NT -> zrem(xi); xi++ :: else -> break od;
       xi = 0; do :: xi < NC -> rec_del(xi); xi++ :: else -> break od;
       z_exp = 0;
       n_tok[0] = 0; n_kind[0] = 0; n_at[0] = 0; n_gen[0] = 0;
       n_tok[1] = 0; n_kind[1] = 0; n_at[1] = 0; n_gen[1] = 0;
       xi = 0;
       do
       :: xi < NC ->
          if :: alive[xi] -> cg[xi]++; if :: sub[xi] && WAITING(xi) -> wk[xi] = 1 :: else -> skip fi; sub[xi] = 0 :: else -> skip fi;
          xi++
       :: else -> break
       od;
       rs_done = 1;
       check() }
  /* a command left in the network runs */
  :: d_step { n_tok[0] != 0 ->
       printf("t=%d the try of token %d sent at %d runs now\n", now, n_tok[0], n_at[0]);
       deliver(0); check() }
  :: d_step { n_tok[1] != 0 ->
       printf("t=%d the try of token %d sent at %d runs now\n", now, n_tok[1], n_at[1]);
       deliver(1); check() }
  od
}

/* ================================================================== clients */

inline op_done(c) {
  opi[c]++; pc[c] = IDLE; tok[c] = 0;
  if :: opi[c] == NOPS -> ql[c] = 0; sub[c] = 0 :: else -> skip fi   /* done: no more use */
}

inline w_clear(c) {
  qs[c] = 0; unc_gen[c] = 0; unc_at[c] = 0; dl[c] = 0; fbdue[c] = 0;
  wk[c] = 0; hd[c] = 0; avail[c] = 0
}

inline g_clear(c) { gvu[c] = 0; glost[c] = 0; g_after[c] = 0 }

inline cu_clear(t) {
  cu[t] = 0; cu_wait[t] = 0; cu_exp[t] = 0; cu_gen[t] = 0; cu_kind[t] = 0;
  cu_out[t] = 0; cu_after[t] = 0; cu_rheld[t] = 0; cu_ran[t] = 0
}

/* Waiting::new: a new token, its slot registered */
inline w_start(c) {
  tok[c] = TOKEN(c, opi[c]); qs[c] = NONE; dl[c] = now + DLW; wk[c] = 0; hd[c] = 0;
  pc[c] = W_TRY
}

/* Before a try: Waiting::new (the first), or the end of Waiting::pause. Property (no lost
 * wake-up): when the fallback timer fires, what a script made available to this waiter while
 * it slept (a hand-off to it, or the key freed with it first in line) has woken it. */
inline w_enter_try(c) {
  if
  :: pc[c] == IDLE -> w_start(c)
  :: pc[c] == W_PAUSE && now >= fbdue[c] ->
     printf("t=%d %c: fallback timer\n", now, 65 + c);
     lost_wakeup = (avail[c] && !wk[c]);
     assert(!lost_wakeup);
     fbdue[c] = 0; avail[c] = 0
  :: pc[c] == W_PAUSE ->
     printf("t=%d %c: woken (handed=%d), tries again\n", now, 65 + c, hd[c]);
     if :: hd[c] -> PROBE(20, "handoff_refused_by_deadline_check") :: else -> skip fi;
     if :: hd[c] && kv_tok != tok[c] -> PROBE(21, "stale_handed_flag_refused") :: else -> skip fi;
     wk[c] = 0; hd[c] = 0; fbdue[c] = 0; avail[c] = 0
  :: else -> skip
  fi;
  pc[c] = W_TRY
}

/* Waiting::try_once reads the clock: a try is sent now */
inline w_sent(c) {
#ifndef OLD_QUEUED_SINCE
  if :: qs[c] == NONE -> qs[c] = now :: else -> skip fi;   /* the fix: the first try's send */
#endif
  skip
}

/* the try's outcome is unknown (sent on connection g) */
inline uncertain(c, g) {
  if
  :: unc_gen[c] == 0 -> unc_gen[c] = g
  :: unc_gen[c] != 0 && unc_gen[c] != g -> unc_gen[c] = MIXED
  :: else -> skip
  fi;
  unc_at[c] = now
}

/* Core::guard: a guard valid until vu */
inline take(c, vu) {
  pc[c] = HOLD; gvu[c] = vu; glost[c] = 0; g_after[c] = rs_done;
  qs[c] = 0; dl[c] = 0; fbdue[c] = 0; wk[c] = 0; hd[c] = 0; avail[c] = 0
}

/* Step::Wait: Waiting::listen returns at once (no round trip) when the channel is already
 * subscribed, then Waiting::pause */
inline to_listen(c) {
  if
  :: sub[c] -> pc[c] = W_PAUSE; avail[c] = 0; fbdue[c] = now + (rem < FB -> rem : FB)
  :: else -> pc[c] = W_LISTEN
  fi
}

/* the reply of an answered try */
inline w_reply(c) {
  if
  :: r_kind == 1 -> take(c, now + L - D)
  :: else ->
#ifdef OLD_QUEUED_SINCE
     if :: qs[c] == NONE -> qs[c] = now :: else -> skip fi;  /* get_or_insert(try_sent_at) */
#endif
     rem = r_rem; to_listen(c)
  fi
}

/* Releaser::abandon */
inline spawn_cleanup(t, kind, g, exp) {
  cu[t] = 1; cu_wait[t] = 0; cu_kind[t] = kind; cu_gen[t] = g; cu_exp[t] = exp
}

/* Drop for Waiting, without the lock: Waiting::abandon */
inline w_leave(c) {
  if
  :: unc_gen[c] == 0 -> spawn_cleanup(tok[c], K_ALL, 0, now + L)   /* see README: sent_at */
  :: else -> spawn_cleanup(tok[c], K_UNC, unc_gen[c], unc_at[c] + L)
  fi;
  w_clear(c); op_done(c)
}

/* the end of the guard's release (Releaser::release); lost: its reply was lost (send_once:
 * Releaser::abandon with Settles::Once, a release only ever gives the token up) */
inline rel_done(c, lost) {
  ql[c] = (r_rel == 2);
#ifndef OLD_NO_POST_RELEASE_CLEANUP
  /* the fix: a try of this token whose outcome is unknown may still run: give it up too */
  if
  :: unc_gen[c] != 0 -> spawn_cleanup(tok[c], K_UNC, unc_gen[c], unc_at[c] + L); PROBE(15, "post_release_cleanup")
  :: else -> if :: lost -> spawn_cleanup(tok[c], K_ALL, 0, now + L) :: else -> skip fi
  fi;
#else
  if :: lost -> spawn_cleanup(tok[c], K_ALL, 0, now + L) :: else -> skip fi;
#endif
  g_clear(c); w_clear(c); op_done(c)
}

/* Releaser::abandon's verdict on a give_up's reply (ok: answered; r_held: it found the token;
 * ran: the connection it ran on; cu_after: it was sent at or after the deadline): done when
 * certain, or when a give_up sent at or after the deadline ran (cleanup_ends). The old logic
 * looked at the clock when the reply came (or failed). */
inline cu_decide(t, ok) {
  certain = (ok && (cu_kind[t] == K_ALL
                    || (cu_gen[t] != 0 && cu_gen[t] != MIXED && ran == cu_gen[t])
                    || (cu_kind[t] == K_ONE && r_held)
#ifdef OLD_FOUND_IS_CERTAIN
                    || r_held
#endif
                    ));
  if :: ok && r_held && !certain -> PROBE(16, "cleanup_found_token_not_certain") :: else -> skip fi;
  if :: ok && cu_gen[t] != 0 && cu_gen[t] != MIXED && ran == cu_gen[t] -> PROBE(17, "cleanup_certain_same_connection") :: else -> skip fi;
#ifdef OLD_CLEANUP_REPLY_DEADLINE
  found = (now >= cu_exp[t]);
#else
  found = (ok && cu_after[t]);
#endif
  if :: !certain && found -> PROBE(18, "cleanup_ends_with_lease") :: else -> skip fi;
  if :: !certain && !found -> PROBE(19, "cleanup_retries") :: else -> skip fi;
  if :: !certain && !found && !cu_after[t] && now >= cu_exp[t] -> PROBE(24, "cleanup_reply_after_deadline_goes_on") :: else -> skip fi;
  cu_out[t] = 0; cu_after[t] = 0; cu_rheld[t] = 0; cu_ran[t] = 0;
  if
  :: certain || found -> cu_clear(t)
  /* past the deadline, the next give_up goes out at once after one that ran */
  :: else -> cu_wait[t] = !(ok && now >= cu_exp[t])
  fi
}

#define ME (_pid - 1)
#ifdef OLD_ACCEPT_MESSAGE
#define ACCEPT_OK(c) (hd[c] && qs[c] != NONE && 4 * (qs[c] + H - D) >= 4 * now + H)
#else
/* the fix: a hand-off is taken only on the next try's reply (Waiting::pause) */
#define ACCEPT_OK(c) 0
#endif
/* Waiting::pause returns (the fallback timer, or woken without a hand-off it accepts) and the
 * loop goes on to the next try_once: no await in between, so one step with the try. */
#define PAUSE_EXIT(c) (pc[c] == W_PAUSE && (now >= fbdue[c] || (wk[c] && !ACCEPT_OK(c))))
#define TRY_EN (alive[ME] && CAN_SEND(ME) && (pc[ME] == W_TRY || PAUSE_EXIT(ME) || (pc[ME] == IDLE && NEXTOP(ME) == OP_WAIT)))
#define FF_EN (alive[ME] && CAN_SEND(ME) && pc[ME] == IDLE && NEXTOP(ME) == OP_FF)
#define T0 TOKEN(ME, 0)
#define T1 TOKEN(ME, 1)

active [NC] proctype client() {
end:
  do
  /* ---- Waiting::try_once: acquire.lua with a ticket; answered */
  :: d_step { TRY_EN ->
       w_enter_try(ME);
       w_sent(ME);
       acquire_lua(tok[ME], TKT, 0);
       printf("t=%d %c: try (acquire.lua) answered %e\n", now, 65 + ME, (r_kind -> Acquired : Held));
       w_reply(ME);
       stalled[ME] = 0; check() }
  /* ... it ran, its reply lost: a timeout, the connection dropped; Step::Wait */
  :: d_step { TRY_EN && FAULT(b_lost) ->
       USE(b_lost);
       w_enter_try(ME);
       w_sent(ME);
       acquire_lua(tok[ME], TKT, 0);
       printf("t=%d %c: try (acquire.lua) ran (%e), its reply LOST\n", now, 65 + ME, (r_kind -> Acquired : Held));
       uncertain(ME, cg[ME]); cg[ME]++;
       rem = FB; to_listen(ME);
       stalled[ME] = 0; check() }
  /* ... timed out, left in the network on the dropped connection */
  :: d_step { TRY_EN && FAULT(b_late) ->
       USE(b_late);
       w_enter_try(ME);
       printf("t=%d %c: try (acquire.lua) timed out; it stays in the network (LATE)\n", now, 65 + ME);
       w_sent(ME);
       net_put(tok[ME], N_ACQ, cg[ME]);
       uncertain(ME, cg[ME]); cg[ME]++;
       rem = FB; to_listen(ME);
       stalled[ME] = 0; check() }
  /* ... the wait cancelled while the try is out (the connection kept): Drop cleans up */
  :: d_step { TRY_EN && pc[ME] != IDLE && FAULT(b_cancel) ->
       USE(b_cancel);
       w_enter_try(ME);
       printf("t=%d %c: wait CANCELLED with a try out\n", now, 65 + ME);
       w_sent(ME);
       net_put(tok[ME], N_ACQ, cg[ME]);
       uncertain(ME, cg[ME]);
       w_leave(ME);
       stalled[ME] = 0; check() }
  /* ---- Waiting::listen, not subscribed: subscribes; newly subscribed, tries at once */
  :: d_step { alive[ME] && pc[ME] == W_LISTEN ->
       printf("t=%d %c: listen: subscribes\n", now, 65 + ME);
       sub[ME] = 1; pc[ME] = W_TRY;
       stalled[ME] = 0; check() }
  /* ---- Waiting::pause: woken (Ticket::woken), handed: accept_hand_off takes the lock */
  :: d_step { alive[ME] && pc[ME] == W_PAUSE && wk[ME] && ACCEPT_OK(ME) ->
       printf("t=%d %c: woken, handed: accept_hand_off takes it, valid until %d\n", now, 65 + ME, qs[ME] + H - D);
       take(ME, qs[ME] + H - D);
       cf[ME] = tok[ME];                         /* confirm_hand_off */
       stalled[ME] = 0; check() }
  /* ... the wait bound: timed out; Drop -> Waiting::abandon */
  :: d_step { alive[ME] && pc[ME] == W_PAUSE && now >= dl[ME] ->
       printf("t=%d %c: wait bound reached: leaves\n", now, 65 + ME);
       w_leave(ME);
       stalled[ME] = 0; check() }
  /* ... or the wait cancelled (the future dropped) */
  :: d_step { alive[ME] && pc[ME] == W_PAUSE && now < dl[ME] && FAULT(b_cancel) ->
       USE(b_cancel);
       printf("t=%d %c: wait CANCELLED: leaves\n", now, 65 + ME);
       w_leave(ME);
       stalled[ME] = 0; check() }
  /* ---- fail-fast: SET NX PX GET; answered */
  :: d_step { FF_EN ->
       tok[ME] = TOKEN(ME, opi[ME]);
       setnx(tok[ME], 0);
       printf("t=%d %c: try_lock (SET NX) answered %e\n", now, 65 + ME, (r_kind -> Acquired : Held));
       if :: r_kind == 1 -> take(ME, now + L - D) :: else -> op_done(ME) fi;
       stalled[ME] = 0; check() }
  /* ... it ran, its reply lost: CleanupOnDrop */
  :: d_step { FF_EN && FAULT(b_lost) ->
       USE(b_lost);
       tok[ME] = TOKEN(ME, opi[ME]);
       setnx(tok[ME], 0);
       printf("t=%d %c: try_lock (SET NX) ran (%e), its reply LOST\n", now, 65 + ME, (r_kind -> Acquired : Held));
       spawn_cleanup(tok[ME], K_ONE, cg[ME], now + L);
       cg[ME]++; op_done(ME);
       stalled[ME] = 0; check() }
  /* ... left in the network on the dropped connection */
  :: d_step { FF_EN && FAULT(b_late) ->
       USE(b_late);
       tok[ME] = TOKEN(ME, opi[ME]);
       printf("t=%d %c: try_lock (SET NX) timed out; it stays in the network (LATE)\n", now, 65 + ME);
       net_put(tok[ME], N_SETNX, cg[ME]);
       spawn_cleanup(tok[ME], K_ONE, cg[ME], now + L);
       cg[ME]++; op_done(ME);
       stalled[ME] = 0; check() }
  /* ---- the guard's release (Releaser::release): release_own.lua first unless queued_last */
  :: d_step { alive[ME] && CAN_SEND(ME) && pc[ME] == HOLD ->
       if
       :: !ql[ME] ->
          release_own_lua(tok[ME]);
          printf("t=%d %c: release: release_own.lua says %d\n", now, 65 + ME, (r_rel == NONE -> -1 : r_rel));
          if :: r_rel == NONE -> pc[ME] = REL2; g_clear(ME) :: else -> rel_done(ME, 0) fi
       :: else ->
          release_lua(tok[ME]);
          printf("t=%d %c: release: release.lua says %d\n", now, 65 + ME, r_rel);
          rel_done(ME, 0)
       fi;
       stalled[ME] = 0; check() }
  :: d_step { alive[ME] && CAN_SEND(ME) && pc[ME] == REL2 ->
       release_lua(tok[ME]);
       printf("t=%d %c: release: release.lua says %d\n", now, 65 + ME, r_rel);
       rel_done(ME, 0);
       stalled[ME] = 0; check() }
  /* ... its reply lost (it ran): send_once -> Releaser::abandon */
  :: d_step { alive[ME] && CAN_SEND(ME) && (pc[ME] == HOLD || pc[ME] == REL2) && FAULT(b_rlost) ->
       USE(b_rlost);
       if
       :: pc[ME] == HOLD && !ql[ME] -> release_own_lua(tok[ME]); if :: r_rel == NONE -> release_lua(tok[ME]) :: else -> skip fi
       :: else -> release_lua(tok[ME])
       fi;
       printf("t=%d %c: release ran, its reply LOST\n", now, 65 + ME);
       found = ql[ME];                          /* queued_last is not set on an error */
       rel_done(ME, 1); cg[ME]++;
       if :: opi[ME] < NOPS -> ql[ME] = found :: else -> skip fi;
       stalled[ME] = 0; check() }
  /* ---- confirm_hand_off: the renewal (extend.lua); not the token's: the guard is lost */
  :: d_step { alive[ME] && CAN_SEND(ME) && cf[ME] != 0 ->
       extend_lua(cf[ME]);
       printf("t=%d %c: confirm_hand_off: extend.lua says %d\n", now, 65 + ME, r_held);
       if
       :: pc[ME] == HOLD && tok[ME] == cf[ME] ->
          if :: r_held -> gvu[ME] = (gvu[ME] > now + L - D -> gvu[ME] : now + L - D) :: else -> glost[ME] = 1 fi
       :: else -> skip
       fi;
       cf[ME] = 0;
       stalled[ME] = 0; check() }
  /* ---- its background clean-ups: give_up (abandon.lua), for each of its tokens: sent and
   * run in one step, its reply in another (any later step; time passes meanwhile only in a
   * stall) */
  :: d_step { alive[ME] && CAN_SEND(ME) && CUDUE(T0) ->
       abandon_lua(T0);
       cu_out[T0] = 1; cu_after[T0] = (now >= cu_exp[T0]); cu_rheld[T0] = r_held; cu_ran[T0] = cg[ME];
       printf("t=%d %c: clean-up of token %d: give_up runs (%d), its reply to come\n", now, 65 + ME, T0, r_held);
       stalled[ME] = 0; check() }
  :: d_step { alive[ME] && CAN_SEND(ME) && CUDUE(T1) ->
       abandon_lua(T1);
       cu_out[T1] = 1; cu_after[T1] = (now >= cu_exp[T1]); cu_rheld[T1] = r_held; cu_ran[T1] = cg[ME];
       printf("t=%d %c: clean-up of token %d: give_up runs (%d), its reply to come\n", now, 65 + ME, T1, r_held);
       stalled[ME] = 0; check() }
  :: d_step { alive[ME] && CUREP(T0) ->
       r_held = cu_rheld[T0]; ran = cu_ran[T0];
       printf("t=%d %c: clean-up of token %d: give_up says %d\n", now, 65 + ME, T0, r_held);
       cu_decide(T0, 1);
       stalled[ME] = 0; check() }
  :: d_step { alive[ME] && CUREP(T1) ->
       r_held = cu_rheld[T1]; ran = cu_ran[T1];
       printf("t=%d %c: clean-up of token %d: give_up says %d\n", now, 65 + ME, T1, r_held);
       cu_decide(T1, 1);
       stalled[ME] = 0; check() }
  :: d_step { alive[ME] && (CUREP(T0) || CUREP(T1)) && FAULT(b_lost) ->
       USE(b_lost);
       tt = (CUREP(T0) -> T0 : T1);
       if :: cu_ran[tt] == cg[ME] -> cg[ME]++ :: else -> skip fi;
       r_held = 0; ran = 0;
       printf("t=%d %c: clean-up of token %d: give_up's reply LOST\n", now, 65 + ME, tt);
       cu_decide(tt, 0);
       stalled[ME] = 0; check() }
  /* ---- faults */
  /* a crash, while the client has something under way */
  :: d_step { alive[ME] && FAULT(b_crash) && (pc[ME] != IDLE || cu[T0] || cu[T1] || cf[ME] != 0) ->
       USE(b_crash);
       printf("t=%d %c: CRASH\n", now, 65 + ME);
       alive[ME] = 0; stalled[ME] = 0; pc[ME] = IDLE; opi[ME] = NOPS; tok[ME] = 0; cg[ME] = 0;
       sub[ME] = 0; w_clear(ME); g_clear(ME); ql[ME] = 0; cf[ME] = 0;
       cu_clear(T0); cu_clear(T1);
       check() }
  /* the pub/sub connection lost while a waiter needs it */
  :: d_step { alive[ME] && sub[ME] && WAITING(ME) && FAULT(b_psub) ->
       USE(b_psub);
       printf("t=%d %c: pub/sub connection LOST (wake_all)\n", now, 65 + ME);
       sub[ME] = 0;
       if :: WAITING(ME) -> wk[ME] = 1 :: else -> skip fi;
       check() }
  od
}
