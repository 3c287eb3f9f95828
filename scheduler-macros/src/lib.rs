#![doc = include_str!("../README.md")]

mod expand;
mod options;
mod singleton;

use proc_macro::TokenStream;

/// Declares a scheduled job on its `async fn`: every replica runs it through the scheduler, and
/// each slot runs once across them.
///
/// ```ignore
/// use lock_scheduler::{RunContext, State, scheduled};
///
/// // Daily at 02:00 Berlin time; the job's name is `generate-daily-report`, its lock
/// // `lock:job:generate-daily-report`.
/// #[scheduled(cron = "0 0 2 * * *", zone = "Europe/Berlin")]
/// async fn generate_daily_report(State(db): State<Db>, run: RunContext) -> anyhow::Result<()> {
///     println!("report for {}", run.local_slot());
///     Ok(())
/// }
///
/// // Every 30 s, at :05 and :35 of each minute, on whichever replica claims the slot.
/// #[scheduled(every = "30s", offset = "5s", name = "heartbeat")]
/// async fn heartbeat() {}
///
/// # async fn start(client: lock_scheduler::lock_core::LockClient, db: Db) -> anyhow::Result<()> {
/// lock_scheduler::Scheduler::builder()
///     .client(client)
///     .state(db)          // what `State<Db>` arguments get
///     .scheduled_jobs()   // every #[scheduled] job of the binary
///     .build()?
///     .run_until_signal()
///     .await?;
/// # Ok(()) }
/// ```
///
/// # Options
///
/// | option | what |
/// |---|---|
/// | `cron = "0 0 2 * * *"` | a 6-field cron expression (`sec min hour day-of-month month day-of-week`) |
/// | `every = "30s"`, `offset = "5s"` | an interval instead: slots aligned to the Unix epoch, the same on every replica |
/// | `zone = "Europe/Berlin"` | the IANA time zone of a cron expression (default UTC) |
/// | `name = "daily-report"` | the job's name (default: the function's, `_` as `-`) |
/// | `lock = "lock:report"` | the lock the scheduler takes (default `lock:job:<name>`); not on a `#[distributed_lock]` fn, which takes its own |
/// | `lease`, `wait`, `at_least`, `fencing` | that lock's options, as on `#[distributed_lock]` |
/// | `on_lost = "continue"` | let a run whose lock is lost finish (default `"cancel"`) |
/// | `catch_up = "latest 5m"` | missed slots: `"never"`, `"latest"` (within a minute), `"latest <duration>"`, `"each <count>"` |
/// | `max_run_time = "10m"` | cancel a run that takes longer |
/// | `retry = "3 every 10s x2 max 10m jitter 0.1"` | retry a failed run: attempts in all, then optionally the first delay, the factor, the longest delay, the jitter fraction (`RetryPolicy`; defaults 10 s, ×2, 10 m, 0.1) |
/// | `pause_after_failures = "5"` | pause the job on every replica after this many slots in a row failed for good |
/// | `overlap = "buffer_one"` | a slot that comes while the previous run goes on: `"skip"` (default), `"allow"`, `"buffer_one"`, `"replace"`; not on a `#[distributed_lock]` fn |
/// | `jitter = "30s"` | delay each slot's start by up to this, the same on every replica |
/// | `start_at = "2026-01-01T00:00:00Z"`, `end_at = "..."` | no slot before / after this RFC 3339 time (checked at compile time; `end_at` not before `start_at`) |
/// | `max_runs = 3` | stop firing after this many runs across the replicas (at least 1) |
/// | `group = "reports"` | the scheduler group whose `scheduled_jobs()` adds it (default: any) |
/// | `crate = "my_app::lock_scheduler"` | where lock-scheduler is, when reached through a re-export |
///
/// Durations are an integer with `ms`, `s`, `m`, `h` or `d`.
///
/// # Checked at compile time
///
/// The schedule is parsed by the parser the scheduler uses: a field out of range names the
/// field and its allowed values, an expression that never fires (30 February) and an unknown
/// time zone are errors on the literal. So is every misuse: a function that is not `async`, a
/// method, a generic function, an argument the scheduler cannot supply (it supplies
/// `RunContext` and `State<T>`), `cron` with `every`, an unknown or repeated option, a lock
/// option (or `overlap`) on a `#[distributed_lock]` function, a retry policy, failure count,
/// overlap policy, jitter, time or run limit the scheduler would refuse.
///
/// # Beside the function
///
/// The function is kept as written (call it as before). Next to it, a module of the same name
/// holds its job: `generate_daily_report::job()` builds it, to add with
/// `SchedulerBuilder::job` in a test or a binary that wants some jobs only. With
/// `#[distributed_lock]`, put `#[scheduled]` above it: the job then runs under that lock.
///
/// The schedule can be changed without recompiling: `SCHEDULE_<JOB>` in the environment (the
/// name in upper case, other characters as `_`; `-` turns the job off) or
/// `SchedulerBuilder::schedule_override`.
#[proc_macro_attribute]
pub fn scheduled(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    let attr_span = proc_macro2::Span::call_site();
    match expand::expand(args.into(), item.clone(), attr_span) {
        Ok(tokens) => tokens.into(),
        // The function unchanged next to the errors, so the rest of the crate (and the editor)
        // still sees it.
        Err(e) => {
            let mut out = e.to_compile_error();
            out.extend(item);
            out.into()
        }
    }
}

/// Declares a singleton on its `async fn`: a long-running task that runs on exactly one replica
/// at a time, the leader of its election (`lock:singleton:<name>` by default).
///
/// ```ignore
/// use lock_scheduler::{SingletonContext, State, Term, singleton};
///
/// #[singleton(name = "orders-feed", restart_delay = "5s")]
/// async fn consume_orders(State(db): State<Db>, Term(term): Term, cx: SingletonContext) -> anyhow::Result<()> {
///     while !cx.is_stopping() {
///         // ... read the feed once, write with `term` as the fencing token ...
///     }
///     Ok(())
/// }
/// ```
///
/// Started when this replica is elected, with the leadership's `Term`; dropped at once when the
/// leadership is lost; asked to stop (`SingletonContext::stopping`) and dropped after the
/// scheduler's grace on shutdown, which then hands leadership to the next replica; started
/// again after `restart_delay` (default 1 s) when it returns. Add every declared singleton with
/// `SchedulerBuilder::singletons()`, or one with `SchedulerBuilder::singleton(<fn>::singleton())`.
///
/// | option | what |
/// |---|---|
/// | `name = "orders-feed"` | the singleton's name (default: the function's, `_` as `-`) |
/// | `election = "lock:feed"` | the election's key (default `lock:singleton:<name>`) |
/// | `restart_delay = "5s"` | the pause before a body that returned is started again (at most 1 h) |
/// | `group = "feeds"` | the scheduler group whose `singletons()` adds it (default: any) |
/// | `crate = "my_app::lock_scheduler"` | where lock-scheduler is, when reached through a re-export |
///
/// Arguments are `SingletonContext`, `Term` and `State<T>`; anything else, a function that is
/// not `async`, a method, a generic function, and an unknown, repeated or invalid option are
/// compile errors.
#[proc_macro_attribute]
pub fn singleton(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match singleton::expand(args.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        Err(e) => {
            let mut out = e.to_compile_error();
            out.extend(item);
            out.into()
        }
    }
}
