//! The holders' own releases of many locks at once when nobody queued
//! (`release_own_many.lua`, beside this file): one call per chunk of locks (sharing a hash slot
//! in a cluster). Its reply has, per key, what `release_own.lua` replies for it.

use deadpool_redis::redis::{self, Script};

use crate::schema::scripts::RELEASE_OWN_MANY;

/// One call: release each lock of `releases` (its key and the holder's token).
pub(crate) struct ReleaseOwnMany<'a> {
    pub(crate) releases: &'a [(&'a str, &'a str)],
}

impl ReleaseOwnMany<'_> {
    /// The call by hash, added to `pipe` (the caller loads the script again on NOSCRIPT).
    pub(crate) fn push(&self, pipe: &mut redis::Pipeline) {
        let cmd = pipe.cmd("EVALSHA").arg(RELEASE_OWN_MANY.get_hash()).arg(self.releases.len());
        for (key, _) in self.releases {
            cmd.arg(*key);
        }
        for (_, token) in self.releases {
            cmd.arg(*token);
        }
    }

    /// The script, for a pipeline's NOSCRIPT resend.
    pub(crate) fn script() -> &'static Script {
        &RELEASE_OWN_MANY
    }
}
