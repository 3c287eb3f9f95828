//! The host check: the console answers only requests addressed to a loopback host or to a
//! name it was told to answer for. A page on another site that rebinds its own name to
//! 127.0.0.1 can make the operator's browser reach a loopback console, but the browser still
//! sends that site's name as `Host`: refused here, so nothing is read for it.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Console;
use crate::error::{ApiError, ConsoleError};

/// Longest host name accepted in the configuration (DNS's limit).
const MAX_HOST_LEN: usize = 253;

/// Refuses (421 `host_not_allowed`) a request whose `Host` is neither loopback nor allowed.
/// The probes (`/healthz`, `/livez`, `/readyz`) are exempt: they address the pod by its IP, and
/// reveal nothing.
pub(crate) async fn check(State(console): State<Console>, request: Request, next: Next) -> Response {
    let Some(allowed) = &console.inner.allowed_hosts else { return next.run(request).await };
    if super::is_probe(request.uri().path()) {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if host.is_some_and(|h| is_allowed(h, allowed)) {
        return next.run(request).await;
    }
    ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        "host_not_allowed",
        "this console answers only for loopback hosts (127.0.0.1, ::1, localhost) and the names it is \
         configured with (Console::allow_host, `lockctl serve --allow-host NAME`)",
    )
    .into_response()
}

/// The suffixes a Kubernetes Service's name takes inside the cluster: `<service>.<namespace>`
/// becomes `<service>.<namespace>.svc` and `<service>.<namespace>.svc.cluster.local` (the
/// default cluster domain; another one is allowed by its full name).
const SERVICE_SUFFIXES: [&str; 2] = [".svc", ".svc.cluster.local"];

/// Whether the `Host` header value `host` (a name or address, maybe with a port) is loopback,
/// one of `allowed` (lower case), or one of them followed by a Service suffix (`.svc`,
/// `.svc.cluster.local`), so that allowing `daily-report-console.prod` admits the Service's
/// namespaced and cluster-local names. Never any other suffix: a public name ending in an
/// allowed one could be pointed at the console by its owner.
pub(crate) fn is_allowed(host: &str, allowed: &[String]) -> bool {
    let Some(name) = name_of(host) else { return false };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
        return true;
    }
    allowed.iter().any(|a| {
        name == *a
            || SERVICE_SUFFIXES.iter().any(|suffix| name.strip_suffix(suffix).is_some_and(|base| base == a))
    })
}

/// The name or address in a `Host` value without its port: `[::1]:80` -> `::1`,
/// `localhost:8088` -> `localhost`. `None` for a value that is not one.
fn name_of(host: &str) -> Option<&str> {
    if let Some(rest) = host.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        return (after.is_empty() || port(after.strip_prefix(':')?)).then_some(address);
    }
    match host.rsplit_once(':') {
        Some((name, p)) if port(p) => Some(name),
        Some(_) => None,
        None => Some(host),
    }
    .filter(|name| !name.is_empty())
}

fn port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Checks a name given to [`Console::allow_host`] and returns it lower case.
pub(crate) fn normalize_allowed(name: &str) -> Result<String, ConsoleError> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= MAX_HOST_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b));
    if ok {
        Ok(name)
    } else {
        Err(ConsoleError::InvalidHost(format!(
            "{:?} is not a host name: give the bare name a browser or proxy sends as Host, e.g. \
             `ops.example.com` (no scheme, port or path)",
            name.chars().take(80).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_allowed_names_pass() {
        let allowed = vec!["ops.example.com".to_owned()];
        for host in [
            "127.0.0.1:8088",
            "127.0.0.1",
            "127.1.2.3:1",
            "[::1]:8088",
            "[::1]",
            "localhost",
            "LOCALHOST:80",
            "localhost.:80",
            "ops.example.com",
            "Ops.Example.Com:443",
        ] {
            assert!(is_allowed(host, &allowed), "{host}");
        }
        // A Service's names: allowing `<service>.<namespace>` admits its cluster names.
        let service = vec!["daily-report-console".to_owned(), "daily-report-console.prod".to_owned()];
        for host in [
            "daily-report-console",
            "daily-report-console:8088",
            "daily-report-console.prod",
            "daily-report-console.prod.svc",
            "daily-report-console.prod.svc.cluster.local",
            "daily-report-console.prod.svc.cluster.local.:8088",
        ] {
            assert!(is_allowed(host, &service), "{host}");
        }
        for host in [
            "daily-report-console.staging",
            "daily-report-console.staging.svc.cluster.local",
            "daily-report-console.prod.svc.attacker.example",
            "daily-report-console.prod.attacker.example",
            "daily-report-console.com",
            "x.daily-report-console.prod",
        ] {
            assert!(!is_allowed(host, &service), "{host}");
        }
        for host in [
            "attacker.example:8088",
            "attacker.example",
            "10.0.0.5:8088",
            "[::2]:80",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "",
            ":8088",
            "[::1",
            "[::1]x",
            "ops.example.com:notaport",
            "example.com",
        ] {
            assert!(!is_allowed(host, &allowed), "{host}");
        }
    }

    #[test]
    fn allowed_names_are_checked() {
        assert_eq!(normalize_allowed("Ops.Example.com.").ok().as_deref(), Some("ops.example.com"));
        for bad in ["", "https://ops.example.com", "ops.example.com:443", "a/b", "a b", "é.example"] {
            assert!(matches!(normalize_allowed(bad), Err(ConsoleError::InvalidHost(_))), "{bad}");
        }
    }
}
