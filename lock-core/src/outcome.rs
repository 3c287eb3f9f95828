//! What an annotated fn returns when it did not run its body: the return-type contract of
//! `#[distributed_lock]`.

use crate::error::LockError;

/// A return type that can say "the body did not run because another instance holds the lock".
/// Needed by `#[distributed_lock(skip_if_held)]`.
///
/// Implemented for `()`, `Option<T>` (`None`) and `Result<T, E>` where `T: Skippable` (`Ok` of
/// the skipped `T`) and `E: From<LockError>`. For `()` and `Option<T>` a Redis failure cannot be
/// returned, so it is logged as an error and the call is skipped.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock(skip_if_held)]` needs a return type that can say \"skipped\", but `{Self}` cannot",
    label = "this return type cannot represent a skipped call",
    note = "use `()`, `Option<T>` (None when skipped) or `Result<T, E>` where `T` can be skipped (e.g. `Result<(), E>`) and `E: From<lock_core::LockError>`",
    note = "or drop `skip_if_held` to fail fast with a `LockError::Held` error"
)]
pub trait Skippable: Sized {
    /// The value returned when the lock was held elsewhere and the body was skipped.
    fn skipped() -> Self;
    /// The value returned when taking or keeping the lock failed (Redis error, lock lost).
    fn lock_failed(error: LockError) -> Self;
}

/// A return type that can carry a [`LockError`]: what `#[distributed_lock]` needs when it fails
/// fast or waits, since then "held" and "timed out" are errors.
///
/// Implemented for `Result<T, E>` where `E: From<LockError>` (so `anyhow::Error`,
/// `Box<dyn Error + Send + Sync>`, `LockError` itself, or your error type with a
/// `#[from] LockError` variant).
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` without `skip_if_held` needs a `Result<T, E>` return type with `E: From<lock_core::LockError>`, but the fn returns `{Self}`",
    label = "a held lock or a wait timeout cannot be reported through this type",
    note = "return `Result<T, E>` where `E: From<lock_core::LockError>` (anyhow::Error works), or add `skip_if_held` to skip the call instead"
)]
pub trait LockResult: Sized {
    /// The value returned when the lock could not be taken or was lost.
    fn lock_failed(error: LockError) -> Self;
}

impl Skippable for () {
    fn skipped() -> Self {}
    fn lock_failed(error: LockError) -> Self {
        tracing::error!(error = %crate::error::ErrorChain(&error), "distributed lock failed; the call was skipped");
    }
}

impl<T> Skippable for Option<T> {
    fn skipped() -> Self {
        None
    }
    fn lock_failed(error: LockError) -> Self {
        tracing::error!(error = %crate::error::ErrorChain(&error), "distributed lock failed; the call was skipped");
        None
    }
}

impl<T: Skippable, E: From<LockError>> Skippable for Result<T, E> {
    fn skipped() -> Self {
        Ok(T::skipped())
    }
    fn lock_failed(error: LockError) -> Self {
        Err(error.into())
    }
}

impl<T, E: From<LockError>> LockResult for Result<T, E> {
    fn lock_failed(error: LockError) -> Self {
        Err(error.into())
    }
}
