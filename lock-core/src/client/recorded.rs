//! What the holdings records say (see [`schema::holdings_key`]): the holds every live client
//! identity recorded, read from the index and the records alone. Operators' tools start here,
//! so that no key is read unless some client recorded it as a lock; and a glob matcher for
//! their patterns, applied to the recorded names instead of a `SCAN` of the keyspace.

use std::time::{SystemTime, UNIX_EPOCH};

use deadpool_redis::redis::{self, Value};

use crate::acquire::Core;
use crate::error::{LockError, Result};
use crate::schema;

/// Client identities read at most (the index's first ones by expiry beyond it are left out and
/// the answer says it is incomplete).
pub(crate) const MAX_OWNERS: usize = 1000;

/// Records read per pipeline.
const RECORDS_PER_PIPELINE: usize = 100;

/// Index entries whose score is this much in the past still count (clients' clocks differ).
const CLOCK_GRACE_MS: u64 = 60_000;

/// One hold as a record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The owner token.
    pub(crate) token: String,
    /// `l`, `p`, `r` or `w` (see [`schema::holding_value`]).
    pub(crate) kind: char,
    /// The lock's (semaphore's, read-write lock's) name.
    pub(crate) name: String,
}

/// Every hold the live records name, and whether every record was read.
pub(crate) async fn holds(core: &Core) -> Result<(Vec<Recorded>, bool)> {
    holds_for(core, &|| "reading the holdings records".to_owned()).await
}

/// [`holds`], failing with `action` as what was being done.
async fn holds_for(core: &Core, action: &(dyn Fn() -> String + Sync)) -> Result<(Vec<Recorded>, bool)> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut cmd = redis::cmd("ZRANGEBYSCORE");
    cmd.arg(schema::HOLDINGS_INDEX)
        .arg(now.saturating_sub(CLOCK_GRACE_MS))
        .arg("+inf")
        .arg("LIMIT")
        .arg(0)
        .arg(MAX_OWNERS + 1);
    let mut owners: Vec<String> = core.conn.query(&cmd, action).await?;
    let complete = owners.len() <= MAX_OWNERS;
    owners.truncate(MAX_OWNERS);
    let mut found = Vec::new();
    for chunk in owners.chunks(RECORDS_PER_PIPELINE) {
        let mut pipe = redis::pipe();
        for owner in chunk {
            pipe.cmd("HGETALL").arg(schema::holdings_key(owner));
        }
        let records: Vec<Value> =
            core.conn.query_pipeline(&pipe).await.map_err(|e| LockError::redis(action(), e))?;
        for (owner, record) in chunk.iter().zip(records) {
            let fields: Vec<(String, String)> = redis::from_redis_value(record).unwrap_or_default();
            for (token, value) in fields {
                // Only what a client of this crate wrote: a token of that very owner, a known kind.
                if schema::owner_of(&token) != Some(owner.as_str()) {
                    continue;
                }
                let Some((kind, name)) = schema::parse_holding_value(&value) else { continue };
                if schema::validate_key(name).is_err() {
                    continue;
                }
                found.push(Recorded { token, kind, name: name.to_owned() });
            }
        }
    }
    found.sort_by(|a, b| (&a.name, &a.token).cmp(&(&b.name, &b.token)));
    found.dedup();
    Ok((found, complete))
}

/// The holds the live records name for `name`.
pub(crate) async fn holds_of(core: &Core, name: &str) -> Result<Vec<Recorded>> {
    let (all, _) = holds_for(core, &|| format!("reading lock `{}`", short(name))).await?;
    Ok(all.into_iter().filter(|h| h.name == name).collect())
}

/// A name shortened for messages.
fn short(name: &str) -> &str {
    match name.char_indices().nth(120) {
        Some((i, _)) => &name[..i],
        None => name,
    }
}

/// Whether `text` matches the glob `pattern` as Redis's `SCAN MATCH` would: `*`, `?`,
/// `[abc]`, `[^a]`, `[a-z]` and `\` escapes.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    glob(pattern.as_bytes(), text.as_bytes())
}

fn glob(p: &[u8], t: &[u8]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear-ish, no recursion on input.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(p, pi, t[ti])
                        && matched
                    {
                        pi = next;
                        ti += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() => {
                    if p[pi + 1] == t[ti] {
                        pi += 2;
                        ti += 1;
                        continue;
                    }
                }
                c => {
                    if c == t[ti] {
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether `c` is in the class starting at `p[open]` (`[`), and where the pattern goes on.
fn class(p: &[u8], open: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = open + 1;
    let negate = p.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        let &b = p.get(i)?;
        match b {
            b']' => break,
            b'\\' => {
                i += 1;
                matched |= *p.get(i)? == c;
            }
            _ if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&e| e != b']') => {
                let (lo, hi) = (b.min(p[i + 2]), b.max(p[i + 2]));
                matched |= (lo..=hi).contains(&c);
                i += 2;
            }
            _ => matched |= b == c,
        }
        i += 1;
    }
    Some((matched != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_as_redis_does() {
        for (p, t, m) in [
            ("*", "anything", true),
            ("lock:*", "lock:a", true),
            ("lock:*", "app:lock:a", false),
            ("l?ck:*", "lock:", true),
            ("*:report", "lock:daily:report", true),
            ("*a*b", "xaxxb", true),
            ("*a*b", "xaxxbc", false),
            ("[ab]x", "bx", true),
            ("[^ab]x", "bx", false),
            ("[a-c]*", "cat", true),
            ("[a-c]*", "dog", false),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("", "", true),
            ("[", "a", false),
        ] {
            assert_eq!(glob_match(p, t), m, "{p} ~ {t}");
        }
    }
}
