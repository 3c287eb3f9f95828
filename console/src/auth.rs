//! Who may act, and the headers every response carries.
//!
//! Actions are refused, in this order: a cross-site request (403 `cross_site`), read-only
//! mode (403 `read_only`), no token configured (403 `no_token`), a missing or wrong bearer
//! token (401 `unauthorized`). Reads need nothing.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::Console;
use crate::error::ApiError;

/// Checks that the request may run an action.
pub(crate) fn check_action(console: &Console, headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(why) = cross_site(headers) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "cross_site", why));
    }
    if console.inner.read_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "the console is read-only: actions are disabled (started with --read-only)",
        ));
    }
    let Some(expected) = &console.inner.token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "no_token",
            "no admin token is configured, so actions are disabled: set LOCKCTL_ADMIN_TOKEN (or Console::token)",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(given) if same(given.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "the bearer token is wrong")),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "actions need an `Authorization: Bearer <token>` header",
        )),
    }
}

/// Compares in time independent of where the inputs differ (the token is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why the request looks cross-site, if it does. A browser that sends `Sec-Fetch-Site` says
/// exactly that (and a reverse proxy rewriting `Host` does not disturb it); without it, an
/// `Origin` whose host is neither the request's `Host` nor its `X-Forwarded-Host` is refused.
/// Non-browser clients send neither header.
fn cross_site(headers: &HeaderMap) -> Option<String> {
    let text = |name: &str| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return (!matches!(site, "same-origin" | "none"))
            .then(|| format!("a {site} request may not run actions (Sec-Fetch-Site)"));
    }
    let origin = text("origin")?;
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    let hosts = [text("host"), text("x-forwarded-host")];
    if origin == "null" || !hosts.contains(&Some(origin_host)) {
        return Some("a request from another origin may not run actions (Origin)".into());
    }
    None
}

/// Adds the headers every response carries: no caching (the data is live), no sniffing, no
/// framing by other sites, and a content security policy that allows only the console's own
/// script and style (every value from Redis is escaped as well).
pub(crate) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(header::HeaderName::from_static(name), HeaderValue::from_static(value));
    };
    set(headers, "cache-control", "no-store");
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "no-referrer");
    set(headers, "x-frame-options", "SAMEORIGIN");
    set(
        headers,
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'self'",
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(header::HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn cross_site_requests_are_told_apart() {
        assert!(cross_site(&headers(&[])).is_none(), "curl sends neither header");
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-origin")])).is_none());
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])).is_some());
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-site")])).is_some());
        let same = [("origin", "http://127.0.0.1:8088"), ("host", "127.0.0.1:8088")];
        assert!(cross_site(&headers(&same)).is_none());
        let other = [("origin", "https://evil.example"), ("host", "127.0.0.1:8088")];
        assert!(cross_site(&headers(&other)).is_some());
        assert!(cross_site(&headers(&[("origin", "null"), ("host", "x")])).is_some());
        let proxied = [
            ("origin", "https://ops.example"),
            ("host", "10.0.0.5:8088"),
            ("x-forwarded-host", "ops.example"),
        ];
        assert!(cross_site(&headers(&proxied)).is_none(), "behind a proxy that rewrites Host");
        let browser =
            [("sec-fetch-site", "same-origin"), ("origin", "https://ops.example"), ("host", "10.0.0.5")];
        assert!(cross_site(&headers(&browser)).is_none(), "Sec-Fetch-Site decides when present");
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcdefghijklmnop", b"abcdefghijklmnop"));
        assert!(!same(b"abcdefghijklmnop", b"abcdefghijklmnoq"));
        assert!(!same(b"abc", b"abcd"));
    }
}
