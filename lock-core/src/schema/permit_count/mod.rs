//! Counting a semaphore's permits (`sem_count.lua`, beside this file), read only.

use crate::schema::eval::Eval;
use crate::schema::scripts::SEM_COUNT;

/// The count of the semaphore named `name`: its declared number of permits and how many are
/// taken.
pub(crate) struct PermitCount<'a> {
    pub(crate) name: &'a str,
}

impl PermitCount<'_> {
    pub(crate) fn eval(&self) -> Eval {
        Eval::new(&SEM_COUNT, &[self.name])
    }

    /// The reply `{declared, taken}`: the declared number (`None` while the semaphore is idle
    /// and so declares none) and the permits held and not lapsed.
    pub(crate) fn decode((declared, taken): (i64, i64)) -> (Option<u32>, u32) {
        let declared = (declared >= 0).then(|| u32::try_from(declared).unwrap_or(u32::MAX));
        (declared, u32::try_from(taken).unwrap_or(0))
    }
}
