//! Action tokens: the strength rule every token must pass, their names, the constant-time
//! comparison, and the fingerprint that logs show instead of a token.

use crate::error::ConsoleError;

/// Shortest accepted action token, in bytes: a token is a shared secret, not a password.
pub const MIN_TOKEN_LEN: usize = 16;

/// Fewest different characters an accepted token has: `aaaaaaaaaaaaaaaa` is long enough but
/// guessable. A random token of 16 or more characters has far more (`lockctl token` prints
/// one).
pub const MIN_TOKEN_DISTINCT: usize = 8;

/// The name of the token set with [`Console::token`](crate::Console::token): what the history
/// records as the actor of its actions.
pub const DEFAULT_TOKEN_NAME: &str = "console";

/// Longest token name, in bytes (it goes into the history and the pause flag).
const MAX_NAME_LEN: usize = 64;

/// Why `token` cannot be an action token, if it cannot: shorter than [`MIN_TOKEN_LEN`], fewer
/// than [`MIN_TOKEN_DISTINCT`] different characters, or characters an HTTP header cannot carry
/// (whitespace, control characters, non-ASCII). The message says what to do instead; it never
/// repeats the token.
pub fn token_problem(token: &str) -> Option<String> {
    if token.len() < MIN_TOKEN_LEN {
        return Some(format!(
            "the admin token is {} bytes long; use at least {MIN_TOKEN_LEN} random characters (`lockctl token` prints one)",
            token.len()
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control() || !c.is_ascii()) {
        return Some(
            "the admin token must be printable ASCII without spaces (it is sent in an HTTP header)".into(),
        );
    }
    let mut seen = [false; 128];
    let distinct =
        token.bytes().filter(|&b| !std::mem::replace(&mut seen[usize::from(b & 0x7f)], true)).count();
    if distinct < MIN_TOKEN_DISTINCT {
        return Some(format!(
            "the admin token has only {distinct} different characters, so it is easy to guess; use at least \
             {MIN_TOKEN_DISTINCT} (a random one: `lockctl token`)"
        ));
    }
    None
}

/// A token and the name the history records for what it does.
#[derive(Clone)]
pub(crate) struct NamedToken {
    pub(crate) name: String,
    secret: String,
}

impl NamedToken {
    /// Checks the name and the token's strength.
    pub(crate) fn new(name: &str, secret: String) -> Result<Self, ConsoleError> {
        let name_ok = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b".-_@".contains(&b));
        if !name_ok {
            return Err(ConsoleError::InvalidTokenName(format!(
                "a token's name must be 1 to {MAX_NAME_LEN} letters, digits or `.-_@` (e.g. `alice`), not {:?}",
                name.chars().take(MAX_NAME_LEN).collect::<String>()
            )));
        }
        if let Some(problem) = token_problem(&secret) {
            return Err(ConsoleError::WeakToken(format!("token `{name}`: {problem}")));
        }
        Ok(NamedToken { name: name.to_owned(), secret })
    }

    /// Whether `given` is this token, in time independent of where they differ.
    pub(crate) fn matches(&self, given: &str) -> bool {
        same(given.as_bytes(), self.secret.as_bytes())
    }

    pub(crate) fn same_secret(&self, other: &NamedToken) -> bool {
        same(self.secret.as_bytes(), other.secret.as_bytes())
    }
}

/// Compares in time independent of where the inputs differ (the token is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What logs show of a presented token: the first 8 hex digits of its SHA-1, enough to tell
/// tokens apart (and to match one an operator holds) without revealing it.
pub(crate) fn fingerprint(token: &str) -> String {
    let mut hex = sha1_smol::Sha1::from(token.as_bytes()).digest().to_string();
    hex.truncate(8);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_tokens_are_refused_with_a_reason() {
        assert!(token_problem("short").is_some_and(|p| p.contains("at least 16")));
        let repeated = token_problem(&"a".repeat(16)).unwrap_or_default();
        assert!(repeated.contains("only 1 different"), "{repeated}");
        assert!(token_problem("abababababababababab").is_some(), "two characters, however long");
        assert!(token_problem("has a space in it 0123").is_some_and(|p| p.contains("printable")));
        assert!(token_problem("tøken-with-ünicode-0123").is_some());
        assert_eq!(token_problem("console-test-token-0123456789"), None);
        assert_eq!(token_problem("0123456789abcdef"), None);
    }

    #[test]
    fn names_are_checked_and_tokens_compare_whole() {
        assert!(NamedToken::new("alice", "0123456789abcdef".into()).is_ok());
        for bad in ["", "has space", "tab\t", &"n".repeat(65)] {
            assert!(
                matches!(
                    NamedToken::new(bad, "0123456789abcdef".into()),
                    Err(ConsoleError::InvalidTokenName(_))
                ),
                "{bad:?}"
            );
        }
        let token = NamedToken::new("bob", "abcdefghijklmnop".into()).unwrap_or_else(|e| panic!("{e}"));
        assert!(token.matches("abcdefghijklmnop"));
        assert!(!token.matches("abcdefghijklmnoq"));
        assert!(!token.matches("abc"));
    }

    #[test]
    fn fingerprints_are_short_and_stable() {
        // SHA-1("abc") = a9993e36...
        assert_eq!(fingerprint("abc"), "a9993e36");
        assert_ne!(fingerprint("abcdefghijklmnop"), fingerprint("abcdefghijklmnoq"));
    }
}
