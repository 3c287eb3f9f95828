//! Lock key validation and the names of the auxiliary keys and channel that belong to a lock.

use crate::error::{LockError, Result};

/// Longest key accepted, in bytes. Redis allows more, but a lock key this long is a bug.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks that `key` can name a lock.
pub(crate) fn validate(key: &str) -> Result<()> {
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
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// An auxiliary key of `key` (`suffix` is e.g. "fence"), in the same cluster slot: the key
/// wrapped in a hash tag, or, when the key already has a tag, the key itself plus the suffix.
pub(crate) fn aux(key: &str, suffix: &str) -> String {
    // Built by hand: this runs several times per acquisition.
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

/// The start of the release channels of `key`: `{<key>}:released:` (in the key's slot, so a
/// sharded publish from the key's scripts reaches it), followed by a client id.
fn release_channel_prefix(key: &str) -> String {
    aux(key, "released:")
}

/// The pub/sub channel on which the client that owns `token` hears about hand-offs of `key`:
/// one channel per key and client, so a release wakes only the client it names.
pub(crate) fn release_channel(key: &str, token: &str) -> String {
    let mut channel = release_channel_prefix(key);
    channel.push_str(client_id_of(token));
    channel
}

/// Appended to a lock key's value while callers are queued behind its holder, so that the
/// release (a compare-and-delete when nobody waits) knows to hand the lock over without
/// looking the queue up (see `scripts.rs`).
const QUEUED_MARK: &str = "|w";

/// A lock key's value without its queue mark: the holder's token.
pub(crate) fn unmarked(value: &str) -> &str {
    value.strip_suffix(QUEUED_MARK).unwrap_or(value)
}

/// A waiter's entry in the queue `{<key>}:waiters`: `<hand-off ms>|<token>`. The waiter names
/// how long a lock handed to it stays reserved, since it is the one that trusts the
/// reservation without a round trip (see `acquire.rs`).
pub(crate) fn queue_entry(token: &str, handoff_ms: u64) -> String {
    format!("{handoff_ms}|{token}")
}

/// The token of a queue entry (see [`queue_entry`]).
pub(crate) fn token_of_entry(entry: &str) -> &str {
    entry.split_once('|').map_or(entry, |(_, token)| token)
}

/// The client id in an owner token `<instance>:<client id>:<uuid>` (the scripts find it the
/// same way: the second field from the end).
pub(crate) fn client_id_of(token: &str) -> &str {
    token.rsplit(':').nth(1).unwrap_or_default()
}

/// Starts a hand-off record in a lock's tickets zset: `@<client id>`, scored with the deadline
/// of the last reservation made for that client (see `scripts.rs`). It has no `:`, so it can
/// never be a token.
const HANDOFF_RECORD: &str = "@";

/// The client id of a hand-off record, or `None` if `member` is a waiter's token.
pub(crate) fn handoff_record_client(member: &str) -> Option<&str> {
    member.strip_prefix(HANDOFF_RECORD).filter(|id| !id.contains(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aux_keys_share_the_slot() {
        assert_eq!(aux("lock:daily-report", "fence"), "{lock:daily-report}:fence");
        assert_eq!(aux("lock:{order}:1", "fence"), "lock:{order}:1:fence");
        assert_eq!(hash_tag("{a{b}"), Some("a{b"));
        assert_eq!(hash_tag("a{}b"), None);
    }

    #[test]
    fn queue_marks_and_entries() {
        assert_eq!(unmarked("pod:abc:uuid|w"), "pod:abc:uuid");
        assert_eq!(unmarked("pod:abc:uuid"), "pod:abc:uuid");
        assert_eq!(queue_entry("pod:abc:uuid", 300), "300|pod:abc:uuid");
        assert_eq!(token_of_entry("300|pod:abc:uuid"), "pod:abc:uuid");
        assert_eq!(handoff_record_client("@abcdef012345"), Some("abcdef012345"));
        assert_eq!(handoff_record_client("@pod:abcdef012345:uuid"), None, "a token, not a record");
    }

    #[test]
    fn release_channels_are_per_client_and_in_the_slot() {
        let token = "pod:1:abcdef012345:0b5e3c9a-4c1e-4d5f-9a0b-1c2d3e4f5a6b";
        assert_eq!(release_channel("lock:x", token), "{lock:x}:released:abcdef012345");
        assert_eq!(release_channel("lock:{o}:1", token), "lock:{o}:1:released:abcdef012345");
    }

    #[test]
    fn rejects_bad_keys() {
        for key in ["", "  ", "a\nb", "a{}b", "a}b", "a{b"] {
            assert!(matches!(validate(key), Err(LockError::InvalidKey { .. })), "{key:?}");
        }
        assert!(validate(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate("lock:product:42").is_ok());
    }
}
