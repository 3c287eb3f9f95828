//! Renewing a hold to its lease (`extend.lua` for a lock's or writer's key, `member_renew.lua`
//! for a permit or a reader kept in a zset, beside this file): one call alone, or one in the
//! watchdog's pipelines. Replies 1 when renewed, 0 when the hold is gone.

use deadpool_redis::redis::{self, Script};

use crate::schema;
use crate::schema::eval::Eval;
use crate::schema::hold::Hold;
use crate::schema::scripts::{EXTEND, MEMBER_RENEW};

/// The renewal of `token`'s hold on `key` to `lease_ms`.
pub(crate) struct Renewal<'a> {
    pub(crate) hold: Hold,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) lease_ms: u64,
}

impl Renewal<'_> {
    /// The script of this renewal.
    fn script(&self) -> &'static Script {
        if self.hold.in_value() { &EXTEND } else { &MEMBER_RENEW }
    }

    /// The one key a renewal touches (in `key`'s slot): the key, or a reader's zset.
    fn renewed_key(&self) -> std::borrow::Cow<'_, str> {
        match self.hold {
            Hold::Read => std::borrow::Cow::Owned(schema::readers_key(self.key)),
            _ => std::borrow::Cow::Borrowed(self.key),
        }
    }

    /// The call, sent alone (loading the script on NOSCRIPT).
    pub(crate) fn eval(&self) -> Eval {
        let mut eval = Eval::new(self.script(), &[self.renewed_key()]);
        eval.arg(self.token).arg(self.lease_ms);
        eval
    }

    /// The call by hash, added to `pipe` (the scripts are loaded before a pipelined pass).
    pub(crate) fn push(&self, pipe: &mut redis::Pipeline) {
        pipe.cmd("EVALSHA")
            .arg(self.script().get_hash())
            .arg(1)
            .arg(self.renewed_key().as_ref())
            .arg(self.token)
            .arg(self.lease_ms);
    }

    /// The scripts a pipelined pass may call, to load first.
    pub(crate) fn scripts() -> [&'static Script; 2] {
        [&EXTEND, &MEMBER_RENEW]
    }
}
