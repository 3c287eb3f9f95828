//! Who may act or read, and the headers every response carries.
//!
//! Actions are refused, in this order: a cross-site request (403 `cross_site`), read-only
//! mode (403 `read_only`), no token configured (403 `no_token`), a missing or wrong bearer
//! token (401 `unauthorized`, or 429 `too_many_attempts` once refused tokens went past a limit:
//! see `attempts`), a token whose role only reads (403 `forbidden`). Reads need nothing, unless
//! the console requires a token (of either role) for them too. Every refusal and every action
//! is logged (see `audit`).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Console;
use crate::access::audit::{self, Action, Caller};
use crate::access::token::{NamedToken, Role, fingerprint};
use crate::error::ApiError;

/// Checks that `caller` may run the action `kind` on `target`; the accepted [`Action`] names
/// the token's owner. A refusal is logged before it is returned.
pub(crate) fn authorize(
    console: &Console,
    caller: &Caller,
    kind: &'static str,
    target: &str,
) -> Result<Action, ApiError> {
    let given = bearer(&caller.headers);
    let print = given.map_or_else(|| "none".to_owned(), fingerprint);
    let refuse = |error: ApiError| {
        audit::refused(kind, target, caller, &print, &error);
        error
    };
    if let Some(why) = cross_site(&caller.headers) {
        return Err(refuse(ApiError::new(StatusCode::FORBIDDEN, "cross_site", why)));
    }
    if console.inner.read_only {
        return Err(refuse(ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "the console is read-only: actions are disabled (started with --read-only)",
        )));
    }
    if console.inner.tokens.is_empty() {
        return Err(refuse(ApiError::new(
            StatusCode::FORBIDDEN,
            "no_token",
            "no admin token is configured, so actions are disabled: set LOCKCTL_ADMIN_TOKEN (or Console::token)",
        )));
    }
    let token = check_token(console, caller, given).map_err(refuse)?;
    if token.role != Role::Admin {
        return Err(refuse(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the token `{}` may read but not act: actions need an admin token", token.name),
        )));
    }
    Ok(Action {
        kind,
        target: target.to_owned(),
        client: caller.addr_text(),
        actor: token.name.clone(),
        fingerprint: print,
        holder: None,
    })
}

/// The token `given` matches, or why not: 401 for a missing or wrong token, 429 once refused
/// tokens went past a limit (the caller's address's, or all addresses' together). The token is
/// compared before any limit is looked at: a correct token is accepted whatever others sent.
fn check_token<'c>(
    console: &'c Console,
    caller: &Caller,
    given: Option<&str>,
) -> Result<&'c NamedToken, ApiError> {
    // Every token is compared, whichever matches: the time taken does not say which one did.
    let found = given.and_then(|given| {
        console
            .inner
            .tokens
            .iter()
            .fold(None, |found, token| if token.matches(given) { Some(token) } else { found })
    });
    if let Some(token) = found {
        return Ok(token);
    }
    if let Some(over) = console.inner.attempts.refused(caller.addr.map(|a| a.ip())) {
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            format!(
                "{}: this token is refused, and so is every wrong token for {}s (a correct one is accepted)",
                over.limit.describe(),
                over.wait.as_secs().max(1)
            ),
        );
        error.retry_after = Some(over.wait);
        return Err(error);
    }
    Err(match given {
        Some(_) => ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "the bearer token is wrong"),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this needs an `Authorization: Bearer <token>` header",
        ),
    })
}

/// The bearer token of `Authorization`, the scheme in any case (RFC 9110 makes it
/// case-insensitive) and surrounding spaces ignored.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Requires the token on reads when the console is configured to (everything but the probes
/// and the page's script and style, which hold nothing from Redis).
pub(crate) async fn reads(State(console): State<Console>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let open = super::is_probe(path) || matches!(path, "/console.js" | "/console.css");
    let is_read = matches!(*request.method(), axum::http::Method::GET | axum::http::Method::HEAD);
    if !console.inner.reads_need_token || open || !is_read {
        return next.run(request).await;
    }
    let caller = Caller {
        addr: request.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0),
        headers: request.headers().clone(),
    };
    let given = bearer(&caller.headers);
    let refusal = if console.inner.tokens.is_empty() {
        Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "no_token",
            "reads need the admin token, but none is configured: set LOCKCTL_ADMIN_TOKEN (or Console::token)",
        ))
    } else {
        check_token(&console, &caller, given).err()
    };
    match refusal {
        None => next.run(request).await,
        Some(error) => {
            let print = given.map_or_else(|| "none".to_owned(), fingerprint);
            audit::refused("read", path, &caller, &print, &error);
            error.into_response()
        }
    }
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
    fn the_bearer_scheme_is_case_insensitive() {
        for value in ["Bearer abc", "bearer abc", "BEARER  abc ", " Bearer abc"] {
            let map = {
                let mut map = HeaderMap::new();
                map.insert(
                    header::AUTHORIZATION,
                    HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static("")),
                );
                map
            };
            assert_eq!(bearer(&map), Some("abc"), "{value:?}");
        }
        for value in ["Basic abc", "Bearer", "Bearer ", "Bearerabc"] {
            let mut map = HeaderMap::new();
            map.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer(&map), None, "{value:?}");
        }
    }
}
