//! The Redis schema of the lock protocol, in one place: every key name, marker, token format
//! and expiry that lock-core writes, and the Lua scripts that write them. Each operation's
//! module holds its `.lua` files and the one type that encodes its KEYS and ARGV and decodes
//! its reply (`acquire`, `release`, `renewal`, `claim_ticks`, `release_own_many`,
//! `permit_count`); `scripts` puts each script together with the fragments it calls. Nothing
//! else in the workspace spells a suffix or a marker: the bench, `lockctl` and the tests use
//! these functions.
//!
//! | name | what |
//! |---|---|
//! | `<key>` | the owner token (`<instance>:<client id>:<uuid>`, see [`owner_of`]), with a PX expiry; ends in [`QUEUED_MARK`] while callers queue behind the holder; [`RELEASED_SUFFIX`] appended while kept for a minimum hold after release |
//! | [`fence_key`] | the fencing counter |
//! | [`tick_key`], [`tick_claimant_key`] | the last claimed scheduler tick, and the token that claimed it |
//! | [`queue_key`] | the queue of waiters: a list of [`queue_entry`]s, oldest first |
//! | [`tickets_key`] | the waiters' tickets (zset: token -> lapse time, epoch ms) and the per-client hand-off records ([`handoff_record`]) |
//! | [`release_channel`] | the channel on which a client hears hand-offs of a key to its waiters |
//! | [`liveness_key`] | a client's liveness lease |
//! | [`holdings_key`] | what one client identity holds (hash: owner token -> `<kind>\|<name>`, see [`holding_value`]), kept by the client beside its locks, never read by a script |
//! | [`HOLDINGS_INDEX`] | the identities with a holdings record (zset: owner -> when its record expires, epoch ms) |
//!
//! Every auxiliary name of a key shares the key's Redis Cluster slot: the key wrapped in a hash
//! tag (`{lock:a}:fence`), or, when the key already has a tag, the key itself plus the suffix
//! (`lock:{order}:1:fence`).

pub(crate) mod acquire;
pub(crate) mod claim_ticks;
pub(crate) mod eval;
pub(crate) mod hold;
pub(crate) mod permit_count;
pub(crate) mod release;
pub(crate) mod release_own_many;
pub(crate) mod renewal;
#[cfg(test)]
mod script_tests;
pub(crate) mod scripts;

#[doc(hidden)]
pub use scripts::lua;

use std::time::Duration;

use crate::error::{LockError, Result};

/// Longest key accepted, in bytes. Redis allows more, but a lock key this long is a bug.
pub const MAX_KEY_LEN: usize = 1024;

/// How long a claimed scheduler tick is remembered ([`tick_key`] expires this long after the
/// last claim): a replica never claims a slot older than that.
pub const TICK_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Appended to a lock key's value while callers are queued behind its holder, so that the
/// release (a compare-and-delete when nobody waits) knows to hand the lock over without
/// looking the queue up.
pub const QUEUED_MARK: &str = "|w";

/// Appended to the owner token a release keeps in the key for the rest of a minimum hold
/// (`at_least`): still taken, no longer anyone's to renew.
pub const RELEASED_SUFFIX: &str = ":released";

/// Prefix of liveness keys: `lock-client:<instance>:<client id>`.
pub const LIVENESS_PREFIX: &str = "lock-client:";

/// The hash tag of the holdings records and their index: all in one cluster slot, so one
/// pipeline reads every client's record.
pub const HOLDINGS_TAG: &str = "{lock-holdings}";

/// The index of holdings records (zset: owner `<instance>:<client id>` -> when its record
/// expires, epoch ms, the client's clock). Readers list the owners scored after now.
pub const HOLDINGS_INDEX: &str = "{lock-holdings}:owners";

/// Hex digits of a client id (the second field of an owner token).
pub(crate) const CLIENT_ID_LEN: usize = 12;

/// Starts a hand-off record in a lock's tickets zset: `@<client id>`, scored with the deadline
/// of the last reservation made for that client, negated once a lapse has been counted. It has
/// no `:`, so it can never be a token.
const HANDOFF_RECORD: &str = "@";

// The auxiliary names' suffixes.
const FENCE: &str = "fence";
const TICK: &str = "tick";
const TICK_BY: &str = "tick:by";
const QUEUE: &str = "waiters";
const TICKETS: &str = "waiters:until";
const RELEASED: &str = "released:";
const READERS: &str = "readers";

/// Checks that `key` can name a lock: not empty, at most [`MAX_KEY_LEN`] bytes, no control
/// characters, braces only as one Redis Cluster hash tag.
pub fn validate_key(key: &str) -> Result<()> {
    // Every acquisition validates its key: printable ASCII without braces and with something
    // besides spaces (nearly every key) is accepted in one pass over the bytes, with no early
    // exit so that the loop vectorises.
    let plain = key.len() <= MAX_KEY_LEN && {
        let (odd, visible) = key.bytes().fold((false, false), |(odd, visible), b| {
            (odd | !(b' '..=b'~').contains(&b) | (b == b'{') | (b == b'}'), visible | (b != b' '))
        });
        !odd && visible
    };
    if plain {
        return Ok(());
    }
    let reason = if key.is_empty() {
        "the key is empty; use a name such as \"lock:daily-report\""
    } else if key.trim().is_empty() {
        "the key is only whitespace"
    } else if key.len() > MAX_KEY_LEN {
        "the key is longer than 1024 bytes"
    } else if key.chars().any(char::is_control) {
        "the key contains control characters"
    } else if hash_tag(key).is_none() && key.contains(['{', '}']) {
        // The auxiliary keys could not be placed in the key's cluster slot.
        "braces are reserved for a Redis Cluster hash tag: use one non-empty `{tag}` or none"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidKey { key: key.to_owned(), reason })
}

/// The Redis Cluster hash tag of `key`, if it has one (the text between the first `{` and the
/// next `}`, when non-empty), exactly as Redis computes it.
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The start of every auxiliary name of `key`, in its slot: `{<key>}:`, or `<key>:` for a key
/// with a hash tag.
pub fn aux_prefix(key: &str) -> String {
    aux(key, "")
}

/// An auxiliary name of `key`: [`aux_prefix`] plus `suffix`. Built by hand: this runs several
/// times per acquisition.
fn aux(key: &str, suffix: &str) -> String {
    let tagged = hash_tag(key).is_some();
    let mut aux = String::with_capacity(key.len() + suffix.len() + 3);
    if !tagged {
        aux.push('{');
    }
    aux.push_str(key);
    if !tagged {
        aux.push('}');
    }
    aux.push(':');
    aux.push_str(suffix);
    aux
}

/// The fencing counter of `key`: `max(counter + 1, server time in µs)` at each fenced
/// acquisition, expiring with the lease.
pub fn fence_key(key: &str) -> String {
    aux(key, FENCE)
}

/// The last scheduler tick claimed with `key` (epoch ms of the slot), expiring [`TICK_TTL`]
/// after the claim.
pub fn tick_key(key: &str) -> String {
    aux(key, TICK)
}

/// The token that claimed [`tick_key`]'s tick, for a retry of the claim whose reply was lost.
pub fn tick_claimant_key(key: &str) -> String {
    aux(key, TICK_BY)
}

/// The queue of waiters for `key` (a list of [`queue_entry`]s, oldest first).
pub fn queue_key(key: &str) -> String {
    aux(key, QUEUE)
}

/// The waiters' tickets of `key` (zset: token -> when the ticket lapses, epoch ms), which also
/// holds the per-client hand-off records ([`handoff_record`]).
pub fn tickets_key(key: &str) -> String {
    aux(key, TICKETS)
}

/// The readers of the read-write lock `name` (zset: reader token -> when its hold lapses, epoch
/// ms); the writer's token is in `name` itself.
pub fn readers_key(name: &str) -> String {
    aux(name, READERS)
}

/// The read-write lock whose [`readers_key`] `key` is, if it is one.
pub fn rw_lock_of_readers_key(key: &str) -> Option<&str> {
    base_of(key, READERS)
}

/// The lock whose [`tick_key`] `key` is, if it is one.
pub fn lock_of_tick_key(key: &str) -> Option<&str> {
    base_of(key, TICK)
}

/// The key whose auxiliary name `aux(key, suffix)` is `name`, if it is one.
fn base_of<'a>(name: &'a str, suffix: &str) -> Option<&'a str> {
    let prefix = name.strip_suffix(suffix)?.strip_suffix(':')?;
    match prefix.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
        Some(key) if hash_tag(key).is_none() => Some(key),
        _ => hash_tag(prefix).is_some().then_some(prefix),
    }
}

/// The member of a semaphore's holders zset (the semaphore's name itself: holder token -> when
/// its permit lapses) that records the number of permits it was declared with, scored with
/// minus that number.
pub const PERMITS_MEMBER: &str = "#permits";

/// The start of the release channels of `key`: `{<key>}:released:`, followed by a client id
/// (in the key's slot, so a sharded publish from the key's scripts reaches it).
pub fn release_channel_prefix(key: &str) -> String {
    aux(key, RELEASED)
}

/// The channel on which the client `client_id` hears about hand-offs of `key` to its waiters:
/// one channel per key and client, so a release wakes only the client it names.
pub fn release_channel(key: &str, client_id: &str) -> String {
    let mut channel = release_channel_prefix(key);
    channel.push_str(client_id);
    channel
}

/// The lock (semaphore, read-write lock) whose auxiliary name `key` is exactly (its fence, tick,
/// tick claimant, queue, tickets or readers), if it is one. Stricter than [`is_auxiliary_key`]:
/// `lock:a:fence` is a lock's own name, `{lock:a}:fence` the fence of `lock:a`.
pub fn lock_of_auxiliary_key(key: &str) -> Option<&str> {
    [TICKETS, TICK_BY, FENCE, TICK, QUEUE, READERS].iter().find_map(|suffix| base_of(key, suffix))
}

/// Whether `key` belongs to the lock machinery rather than naming a lock: an auxiliary name of
/// some lock, or a liveness key.
pub fn is_auxiliary_key(key: &str) -> bool {
    key.starts_with(LIVENESS_PREFIX)
        || key.starts_with(HOLDINGS_TAG)
        || [FENCE, TICK, TICK_BY, QUEUE, TICKETS, READERS]
            .iter()
            .any(|s| key.strip_suffix(s).is_some_and(|k| k.ends_with(':')))
}

/// An owner token: `"<owner>:<lock id>"`, where the owner is `<instance>:<client id>` (it names
/// the client's [`liveness_key`]) and the lock id a hyphenated UUID. Built without the
/// formatting machinery (it is on every acquisition's path).
pub(crate) fn new_token(owner: &str, lock_id: uuid::Uuid) -> String {
    let mut buf = uuid::Uuid::encode_buffer();
    let id = lock_id.hyphenated().encode_lower(&mut buf);
    let mut token = String::with_capacity(owner.len() + 1 + id.len());
    token.push_str(owner);
    token.push(':');
    token.push_str(id);
    token
}

/// The owner (`<instance>:<client id>`) of an owner token (`<instance>:<client id>:<uuid>`), or `None` for a
/// value lock-core did not write.
pub fn owner_of(token: &str) -> Option<&str> {
    let (owner, lock_id) = token.rsplit_once(':')?;
    let (_, client_id) = owner.rsplit_once(':')?;
    let is_hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    (is_hex(client_id, CLIENT_ID_LEN) && is_hex(lock_id, 36)).then_some(owner)
}

/// The client id in an owner token `<instance>:<client id>:<uuid>` (the scripts find it the
/// same way: the second field from the end); empty if there is none.
pub fn client_id_of(token: &str) -> &str {
    token.rsplit(':').nth(1).unwrap_or_default()
}

/// The instance id of an owner (`<instance>:<client id>`).
pub fn instance_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(instance, _)| instance)
}

/// The liveness key of `owner` (`<instance>:<client id>`).
pub fn liveness_key(owner: &str) -> String {
    format!("{LIVENESS_PREFIX}{owner}")
}

/// The holdings record of `owner` (`<instance>:<client id>`): a hash of the holds that client
/// identity took and has not given back (owner token -> [`holding_value`]), written by the
/// client itself after its acquisitions (never by the lock scripts), expiring after the longest
/// of their leases. What operators' tools enumerate locks from.
pub fn holdings_key(owner: &str) -> String {
    format!("{HOLDINGS_TAG}:{owner}")
}

/// A holdings record's value for a hold of `name`: `<kind>|<name>`, the kind one of `l` (a
/// lock), `p` (a semaphore's permit), `r` (a read hold), `w` (a write hold).
pub fn holding_value(kind: char, name: &str) -> String {
    let mut value = String::with_capacity(name.len() + 2);
    value.push(kind);
    value.push('|');
    value.push_str(name);
    value
}

/// The kind and name of a [`holding_value`], or `None` for a value of another shape.
pub fn parse_holding_value(value: &str) -> Option<(char, &str)> {
    let (kind, name) = value.split_once('|')?;
    let kind = match kind {
        "l" => 'l',
        "p" => 'p',
        "r" => 'r',
        "w" => 'w',
        _ => return None,
    };
    (!name.is_empty()).then_some((kind, name))
}

/// A new client's owner prefix, `<instance>:<client id>`, from a random hex id.
pub(crate) fn new_owner(instance: &str, random_hex: &str) -> String {
    format!("{instance}:{}", &random_hex[..CLIENT_ID_LEN.min(random_hex.len())])
}

/// A lock key's value without its queue mark: the holder's token.
pub fn unmarked(value: &str) -> &str {
    value.strip_suffix(QUEUED_MARK).unwrap_or(value)
}

/// A waiter's entry in [`queue_key`]: `<hand-off ms>|<token>`. The waiter names how long a lock
/// handed to it stays reserved, since it is the one that trusts the reservation without a
/// round trip.
pub fn queue_entry(token: &str, handoff_ms: u64) -> String {
    format!("{handoff_ms}|{token}")
}

/// A read-write lock reader's entry in [`queue_key`]: `<hand-off ms>r|<token>` (a writer's is a
/// plain [`queue_entry`]).
pub fn reader_queue_entry(token: &str, handoff_ms: u64) -> String {
    format!("{handoff_ms}r|{token}")
}

/// Whether a queue entry is a reader's ([`reader_queue_entry`]).
pub fn is_reader_entry(entry: &str) -> bool {
    entry.split_once('|').is_some_and(|(head, _)| head.ends_with('r'))
}

/// The token of a [`queue_entry`].
pub fn token_of_entry(entry: &str) -> &str {
    entry.split_once('|').map_or(entry, |(_, token)| token)
}

/// The hand-off record of `client_id` in [`tickets_key`].
pub fn handoff_record(client_id: &str) -> String {
    format!("{HANDOFF_RECORD}{client_id}")
}

/// The client id of a hand-off record, or `None` if `member` of [`tickets_key`] is a waiter's
/// token.
pub fn handoff_record_client(member: &str) -> Option<&str> {
    member.strip_prefix(HANDOFF_RECORD).filter(|id| !id.contains(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aux_keys_share_the_slot() {
        assert_eq!(fence_key("lock:daily-report"), "{lock:daily-report}:fence");
        assert_eq!(fence_key("lock:{order}:1"), "lock:{order}:1:fence");
        assert_eq!(aux_prefix("lock:a"), "{lock:a}:");
        assert_eq!(hash_tag("{a{b}"), Some("a{b"));
        assert_eq!(hash_tag("a{}b"), None);
        assert!(is_auxiliary_key(&tick_claimant_key("lock:a")));
        assert!(is_auxiliary_key(&tickets_key("lock:a")));
        assert!(is_auxiliary_key(&liveness_key("pod-1:0123456789ab")));
        assert!(!is_auxiliary_key("lock:a"));
        assert!(!is_auxiliary_key("lock:nofence"), "a suffix counts only after a `:`");
        assert!(is_auxiliary_key(&readers_key("rw:a")));
        for name in ["rw:catalogue", "rw:{shop}:catalogue", "a"] {
            assert_eq!(rw_lock_of_readers_key(&readers_key(name)), Some(name));
            assert_eq!(lock_of_tick_key(&tick_key(name)), Some(name));
        }
        assert_eq!(lock_of_tick_key(&fence_key("lock:a")), None);
        assert_eq!(rw_lock_of_readers_key("rw:a"), None);
        assert!(is_reader_entry(&reader_queue_entry("pod:abc:uuid", 300)));
        assert!(!is_reader_entry(&queue_entry("pod:abc:uuid", 300)));
        assert_eq!(rw_lock_of_readers_key("{rw:a}:fence"), None);
        for name in ["lock:a", "lock:{order}:1"] {
            for aux in [fence_key(name), tick_key(name), tick_claimant_key(name), queue_key(name)] {
                assert_eq!(lock_of_auxiliary_key(&aux), Some(name), "{aux}");
            }
            assert_eq!(lock_of_auxiliary_key(&tickets_key(name)), Some(name));
            assert_eq!(lock_of_auxiliary_key(&readers_key(name)), Some(name));
        }
        assert_eq!(lock_of_auxiliary_key("lock:a:fence"), None, "a lock's own name");
        assert_eq!(lock_of_auxiliary_key("lock:a"), None);
    }

    #[test]
    fn queue_marks_and_entries() {
        assert_eq!(unmarked("pod:abc:uuid|w"), "pod:abc:uuid");
        assert_eq!(unmarked("pod:abc:uuid"), "pod:abc:uuid");
        assert_eq!(queue_entry("pod:abc:uuid", 300), "300|pod:abc:uuid");
        assert_eq!(token_of_entry("300|pod:abc:uuid"), "pod:abc:uuid");
        assert_eq!(handoff_record_client(&handoff_record("abcdef012345")), Some("abcdef012345"));
        assert_eq!(handoff_record_client("@pod:abcdef012345:uuid"), None, "a token, not a record");
    }

    #[test]
    fn tokens_name_their_owner_and_client() {
        let owner = new_owner("pod-1", "0123456789abcdef0123");
        assert_eq!(owner, "pod-1:0123456789ab");
        let token = new_token(&owner, uuid::Uuid::nil());
        assert_eq!(token, "pod-1:0123456789ab:00000000-0000-0000-0000-000000000000");
        assert_eq!(owner_of(&token), Some("pod-1:0123456789ab"));
        assert_eq!(client_id_of(&token), "0123456789ab");
        assert_eq!(instance_of("pod:with:colons:0123456789ab"), "pod:with:colons");
        assert_eq!(owner_of("hello"), None);
        assert_eq!(liveness_key(&owner), "lock-client:pod-1:0123456789ab");
        assert_eq!(holdings_key(&owner), "{lock-holdings}:pod-1:0123456789ab");
        assert!(is_auxiliary_key(&holdings_key(&owner)) && is_auxiliary_key(HOLDINGS_INDEX));
        assert_eq!(parse_holding_value(&holding_value('p', "sem:a|b")), Some(('p', "sem:a|b")));
        assert_eq!(parse_holding_value("x|a"), None);
        assert_eq!(parse_holding_value("l|"), None);
    }

    #[test]
    fn release_channels_are_per_client_and_in_the_slot() {
        assert_eq!(release_channel("lock:x", "abcdef012345"), "{lock:x}:released:abcdef012345");
        assert_eq!(release_channel("lock:{o}:1", "abcdef012345"), "lock:{o}:1:released:abcdef012345");
    }

    #[test]
    fn rejects_bad_keys() {
        for key in ["", "  ", "a\nb", "a{}b", "a}b", "a{b"] {
            assert!(matches!(validate_key(key), Err(LockError::InvalidKey { .. })), "{key:?}");
        }
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate_key("lock:product:42").is_ok());
    }
}
