//! Tokens: the strength rule every token must pass, their names and roles, the constant-time
//! comparison, and the fingerprint that logs show instead of a token.

use crate::error::ConsoleError;

/// Shortest accepted action token, in bytes: a token is a shared secret, not a password.
pub const MIN_TOKEN_LEN: usize = 16;

/// Fewest different characters an accepted token has: `aaaaaaaaaaaaaaaa` is long enough but
/// guessable. A random token of 16 or more characters has far more (`lockctl token` prints
/// one).
pub const MIN_TOKEN_DISTINCT: usize = 8;

/// Fewest guesses (as a power of ten) that an accepted token takes by zxcvbn's estimate, which
/// knows words, names, sequences, repeats, dates and keyboard patterns: `password12345678`
/// takes about 10^4, `changeme-changeme` 10^8; 16 random letters and digits 10^16. At 10^14, a
/// client that tried 10,000 tokens a second, every second, would need about 300 years to try
/// them all: the limits on refused tokens make such a client loud, its token's strength keeps
/// it out.
pub const MIN_TOKEN_GUESSES_LOG10: f64 = 14.0;

/// Words a console token is likely to be made of, besides zxcvbn's own dictionaries.
const CONTEXT_WORDS: &[&str] = &["lock", "console", "lockctl", "admin", "token", "redis", "scheduler"];

/// Longest prefix of a token that the estimate looks at: the estimate's work grows with the
/// square of the length, and a token strong in its first 64 characters is strong.
const ESTIMATED_PREFIX: usize = 64;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// Read the pages and the API when reads need a token
    /// ([`Console::require_token_for_reads`](crate::Console::require_token_for_reads)); every
    /// action is refused (403 `forbidden`).
    Read,
    /// Read, and act: unlock, pause, resume, run now, retry, backfill.
    Admin,
}

impl Role {
    /// `read` or `admin`, as logs and the token file say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// The name of the token set with [`Console::token`](crate::Console::token): what the history
/// records as the actor of its actions.
pub const DEFAULT_TOKEN_NAME: &str = "console";

/// Longest token name, in bytes (it goes into the history and the pause flag).
const MAX_NAME_LEN: usize = 64;

/// Why `token` cannot be a console token, if it cannot: shorter than [`MIN_TOKEN_LEN`], fewer
/// than [`MIN_TOKEN_DISTINCT`] different characters, characters an HTTP header cannot carry
/// (whitespace, control characters, non-ASCII), or guessable in fewer than
/// 10^[`MIN_TOKEN_GUESSES_LOG10`] tries because it is made of words, sequences, repeats or
/// keyboard patterns (`password12345678`, `changeme-changeme`, `0123456789abcdef`). The message
/// says what to do instead; it never repeats the token.
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
    let prefix = &token[..token.len().min(ESTIMATED_PREFIX)];
    let guesses = zxcvbn::zxcvbn(prefix, CONTEXT_WORDS).guesses_log10();
    if guesses < MIN_TOKEN_GUESSES_LOG10 {
        return Some(format!(
            "the admin token is made of words, sequences, repeats or keyboard patterns, so it can be guessed in \
             about 10^{guesses:.0} tries; use a random one of at least {MIN_TOKEN_LEN} characters (`lockctl token` \
             prints one)"
        ));
    }
    None
}

/// A token, the name the history records for what it does, and its role.
#[derive(Clone)]
pub(crate) struct NamedToken {
    pub(crate) name: String,
    pub(crate) role: Role,
    secret: String,
}

impl NamedToken {
    /// Checks the name and the token's strength.
    pub(crate) fn new(name: &str, secret: String, role: Role) -> Result<Self, ConsoleError> {
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
        Ok(NamedToken { name: name.to_owned(), role, secret })
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
        assert_eq!(token_problem("9f3c2a1b7e4d8c60"), None, "16 random hex digits");
        assert_eq!(
            token_problem(&"x7k2-m9q4".repeat(8)).map(|p| p.contains("repeats")),
            Some(true),
            "a short part repeated"
        );
    }

    /// Long enough, with enough different characters, printable: refused all the same, as a
    /// guesser tries these first.
    #[test]
    fn guessable_tokens_are_refused() {
        for weak in [
            "password12345678",
            "changeme-changeme",
            "0123456789abcdef",
            "qwertyuiopasdfgh",
            "P@ssw0rd12345678",
            "administrator123",
            "lockctl-console-token",
        ] {
            let problem = token_problem(weak).unwrap_or_default();
            assert!(
                problem.contains("words, sequences, repeats or keyboard patterns"),
                "{weak}: {problem:?}"
            );
            assert!(!problem.contains(weak), "the message never repeats the token");
        }
        for strong in ["a8Kq2LxV9pZ3mN7w", "hardening-test-token-0123456789", "correct-horse-battery-staple"]
        {
            assert_eq!(token_problem(strong), None, "{strong}");
        }
    }

    #[test]
    fn names_are_checked_and_tokens_compare_whole() {
        assert!(NamedToken::new("alice", "9f3c2a1b7e4d8c60".into(), Role::Admin).is_ok());
        for bad in ["", "has space", "tab\t", &"n".repeat(65)] {
            assert!(
                matches!(
                    NamedToken::new(bad, "9f3c2a1b7e4d8c60".into(), Role::Admin),
                    Err(ConsoleError::InvalidTokenName(_))
                ),
                "{bad:?}"
            );
        }
        let token = NamedToken::new("bob", "k3v9-q7wz-m2xp-8rtn".into(), Role::Read)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(token.matches("k3v9-q7wz-m2xp-8rtn"));
        assert!(!token.matches("k3v9-q7wz-m2xp-8rto"));
        assert!(!token.matches("abc"));
    }

    #[test]
    fn fingerprints_are_short_and_stable() {
        // SHA-1("abc") = a9993e36...
        assert_eq!(fingerprint("abc"), "a9993e36");
        assert_ne!(fingerprint("abcdefghijklmnop"), fingerprint("abcdefghijklmnoq"));
    }
}
