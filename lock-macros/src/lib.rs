#![doc = include_str!("../README.md")]

mod duration;
mod expand;
mod key;
mod options;
mod shape;

use proc_macro::TokenStream;

/// Runs the annotated `async fn` under a distributed lock held in Redis, so that across all
/// replicas only one call with the same key runs its body at a time.
///
/// ```no_run
/// use lock_core::{LockError, distributed_lock};
///
/// // A job every replica fires; one runs it, the others skip.
/// #[distributed_lock(key = "lock:daily-report", skip_if_held)]
/// async fn generate_daily_report() -> anyhow::Result<()> {
///     Ok(())
/// }
///
/// # struct Order { product_id: u64, qty: u32 }
/// # struct Store;
/// # impl Store { async fn decrement(&self, _: u64, _: u32, _: u64) -> Result<(), LockError> { Ok(()) } }
/// struct Orders { store: Store }
///
/// impl Orders {
///     // Per-resource exclusion with a fencing token, waiting up to 2 s.
///     #[distributed_lock(key = "lock:product:{order.product_id}", wait = "2s", lease = "10s", fencing)]
///     async fn place_order(&self, order: Order) -> Result<(), LockError> {
///         let fence = lock_core::current().and_then(|l| l.fence()).unwrap_or(0);
///         self.store.decrement(order.product_id, order.qty, fence).await
///     }
/// }
/// ```
///
/// # Options
///
/// | option | default | meaning |
/// |---|---|---|
/// | `key = "..."` | required | The Redis key. `{param}`, `{param.field}` and `{self.field}` are replaced by the value's `Display` form; each placeholder must name a parameter (checked at compile time). `{{` and `}}` are literal braces (e.g. a cluster hash tag). |
/// | `skip_if_held` | off | If another owner holds the lock, log `lock <key> is held by another instance, skipping` at info and return the "skipped" value without running the body. |
/// | `wait = "5s"` | off | Wait up to this long for a held lock, then fail with `LockError::Timeout`. Without `wait` or `skip_if_held`, a held lock fails at once with `LockError::Held`. |
/// | `lease = "10s"` | watchdog | A fixed lease: the key expires this long after acquisition and is never renewed; at least `lock_core::MIN_LEASE` (checked at compile time). Without it, the client's watchdog lease (30 s) is renewed every 10 s while the body runs, and a crashed holder's lock is taken over after about one liveness TTL (its client's liveness lease). |
/// | `at_least = "30s"` | off | Keep the lock at least this long after acquisition even if the body ends sooner (ShedLock's `lockAtLeastFor`). |
/// | `fencing` | off | Draw a fencing token; the body reads it through `lock_core::current()`. |
/// | `client = expr` | installed default | The `LockClient` to use (`LockClient`, `&LockClient`, `Arc<LockClient>`; may use `self`). Without it, the client installed with `LockClient::install_default()`; none installed is a `LockError::NotConfigured` at call time. |
/// | `on_lost = "cancel"` | `"cancel"` | If the lock is lost while the body runs (renewal refused, or the lease ran out while Redis was unreachable), `"cancel"` drops the body at its next await and returns `LockError::Lost`; `"continue"` lets it finish and only logs. |
/// | `permits = 4` | off | Hold one of the 4 permits of the semaphore named by `key` instead of a lock (`LockClient::semaphore`): at most 4 calls run the body at once. Every caller must say the same number (else `LockError::PermitsMismatch`). Not with `read`/`write`. |
/// | `read` / `write` | off | Hold the read-write lock named by `key` (`LockClient::rw_lock`) for reading (many at once) or for writing (alone). A `read` fn called inside a `write` section of the same key is a nested hold; a `write` fn called inside a `read` section fails with `LockError::WriteInsideRead`. |
/// | `crate = "path"` | `"::lock_core"` | The path to lock-core, for code that reaches it through a re-export: `crate = "lock_scheduler::lock_core"` with `use lock_scheduler::lock_core::distributed_lock;`. Every path in the expansion goes through it (tokio's `#[tokio::main(crate = "...")]`). |
///
/// With `permits`, `read` or `write`, everything else means the same: `skip_if_held` skips when
/// no permit is free (or the read-write lock cannot be entered), `wait` waits for one, the
/// watchdog renews the hold, `fencing` draws a fence per semaphore or read-write lock. Only a
/// lock claims a scheduler run's tick (a `Job` runs once per tick through its own lock).
///
/// Durations are an integer and a unit: `"250ms"`, `"10s"`, `"5m"`, `"1h"`; all are checked at
/// compile time, and a zero duration is rejected.
///
/// Why `on_lost = "cancel"` is the default: a lock is taken so that the body never runs
/// without it. Once this process knows it lost the lock, another replica may already be
/// running the same body, and stopping at the next await is the only way to keep that
/// promise. Choose `"continue"` for bodies that must not stop half-way (several writes
/// without a transaction), and protect their writes with `fencing`.
///
/// # Return type
///
/// - With `skip_if_held`, the return type must be able to say "skipped" (the `Skippable`
///   trait): `()`, `Option<T>` (`None`), or `Result<T, E>` where `T` is skippable and
///   `E: From<LockError>` (`Ok(())` when skipped). For `()` and `Option<T>`, a Redis failure is
///   logged as an error and the call is skipped.
/// - Otherwise (fail fast or `wait`), it must be `Result<T, E>` with `E: From<LockError>`
///   (`anyhow::Error` works), which receives `Held`, `Timeout`, `Lost` and Redis errors.
///
/// A return type that does not fit is a compile error naming the rule.
///
/// # Behaviour
///
/// The signature is kept; only the body is replaced by one call into `lock_core::__private`
/// that acquires, runs the original body as a future, and releases — on return, on `?`
/// errors, on panic and when the caller's future is dropped. Inside the body, calling another
/// annotated fn (or `LockClient::acquire`) with the same key on the same client is re-entrant: it
/// neither deadlocks nor touches Redis. Works on free fns, inherent and trait-impl methods
/// (`&self`, `&mut self`, `self: Arc<Self>`), generic fns and `impl Trait` arguments. The
/// expansion reaches lock-core only through the `crate` path and `std`/`core` only through
/// absolute paths, so it also compiles inside `#![no_implicit_prelude]` modules.
///
/// On the methods of an `#[async_trait]` impl (or trait, for default methods), write the
/// attribute on the `async fn` as usual. async-trait expands first and turns the method into a
/// fn returning `Box::pin(async move { .. })`; the attribute recognises that shape (as
/// tracing's `#[instrument]` does) and locks the `async` block, so the method works through
/// the concrete type and through `Box<dyn Trait>` / `Arc<dyn Trait>` alike:
///
/// ```no_run
/// # use async_trait::async_trait;
/// # use lock_core::{LockClient, distributed_lock};
/// # struct Report;
/// # #[async_trait] trait Reports { async fn daily(&self, day: u32) -> Option<Report>; }
/// # struct Service { tenant: String, locks: LockClient }
/// #[async_trait]
/// impl Reports for Service {
///     #[distributed_lock(key = "lock:report:{self.tenant}:{day}", skip_if_held, client = &self.locks)]
///     async fn daily(&self, day: u32) -> Option<Report> {
///         Some(Report)
///     }
/// }
/// ```
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match expand::expand(args.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        // Emit the fn unchanged next to the errors, so the rest of the crate (and the
        // editor) still sees it.
        Err(e) => {
            let mut out = e.to_compile_error();
            out.extend(item);
            out.into()
        }
    }
}
