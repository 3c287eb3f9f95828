//! Who may do what, checked before anything is read or changed: the Host check ([`host`]), the
//! action tokens and their strength rule ([`token`]), the authorization of actions and reads and
//! the headers every response carries ([`auth`]), the limit on refused tokens ([`attempts`]),
//! the limit on requests in flight ([`busy`]), and the audit trail of every action and refusal
//! ([`audit`]).

pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod auth;
pub(crate) mod busy;
pub(crate) mod host;
pub(crate) mod token;

/// The probes' paths: exempt from the Host check (probes address the pod by its IP), the read
/// token and the limit on requests in flight (a probe must not fail because viewers are busy).
/// None of them shows anything read from Redis.
pub(crate) fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz")
}
