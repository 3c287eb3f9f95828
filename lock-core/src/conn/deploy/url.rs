//! The `REDIS_URL` forms a client accepts, parsed into a [`Spec`]:
//!
//! - `redis://[[user]:password@]host[:port][/db]` (`rediss://` for TLS): one node.
//! - `redis+sentinel://[[user]:password@]host1[:port1][,host2[:port2]...]/master_name[/db]`
//!   (`rediss+sentinel://` for TLS to the sentinels and the master): a master found through the
//!   sentinels (port 26379 by default). The credentials are the master's; the sentinels are
//!   reached without any.
//! - `redis+cluster://[[user]:password@]host1[:port1][,host2[:port2]...][/]`
//!   (`rediss+cluster://` for TLS): a Redis Cluster, reached through any of the nodes listed
//!   (port 6379 by default); the client learns the others from them.
//!
//! Error messages never repeat the URL's credentials.

use crate::error::{LockError, Result};

/// Default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;
/// Default port of a Redis node.
const REDIS_PORT: u16 = 6379;

/// Where a client's Redis is, as configured.
// No `Debug` outside tests: the URLs carry credentials.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(Debug))]
pub(crate) enum Spec {
    /// One node (or a stable address in front of one).
    Single(String),
    /// A master behind Sentinel: the sentinels' URLs, the master's name, and the URL of the
    /// master's settings (credentials, db, TLS) with a placeholder host.
    Sentinel { sentinels: Vec<String>, master: String, node: String },
    /// A Redis Cluster: URLs of some of its nodes.
    Cluster { nodes: Vec<String> },
}

/// The form every error about a URL points to.
const FORMS: &str = "expected redis://[[user]:password@]host[:port][/db], \
    redis+sentinel://[[user]:password@]host1:port1,host2:port2/master_name[/db] or \
    redis+cluster://[[user]:password@]host1:port1,host2:port2 (rediss... for TLS)";

/// RFC 3986: a letter, then letters, digits, `+`, `-` or `.`.
pub(crate) fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Parses one of the forms above.
pub(crate) fn parse(url: &str) -> Result<Spec> {
    let url = url.trim();
    if url.is_empty() {
        return Err(LockError::Config(format!("the Redis URL is empty; {FORMS}")));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(LockError::Config(format!("the Redis URL has no scheme; {FORMS}")));
    };
    let (tls, kind) = match scheme {
        "redis" | "rediss" | "valkey" | "valkeys" | "redis+unix" | "unix" => {
            return Ok(Spec::Single(url.to_owned()));
        }
        "redis+sentinel" => (false, Kind::Sentinel),
        "rediss+sentinel" => (true, Kind::Sentinel),
        "redis+cluster" => (false, Kind::Cluster),
        "rediss+cluster" => (true, Kind::Cluster),
        // Echoed only when it looks like a scheme (RFC 3986's characters): anything else
        // before `://` may be a mistyped URL's credentials (`redis:/:secret@host://`).
        other if is_scheme(other) => {
            return Err(LockError::Config(format!(
                "unknown Redis URL scheme `{}`; {FORMS}",
                other.chars().take(32).collect::<String>()
            )));
        }
        _ => {
            return Err(LockError::Config(format!(
                "the Redis URL does not start with a scheme (letters, digits, `+`, `-`, `.` before `://`); {FORMS}"
            )));
        }
    };
    let node_scheme = if tls { "rediss" } else { "redis" };
    // Credentials end at the last `@` before the path (a password may contain `@`).
    let path_start = rest.find(['/', '?']).unwrap_or(rest.len());
    let (userinfo, hosts) = match rest[..path_start].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..path_start]),
        None => (None, &rest[..path_start]),
    };
    let path = rest[path_start..].trim_start_matches('/');
    if path.contains('?') || rest[path_start..].starts_with('?') {
        return Err(LockError::Config(format!(
            "query parameters are not supported in {scheme}:// URLs; {FORMS}"
        )));
    }
    let creds = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let default_port = match kind {
        Kind::Sentinel => SENTINEL_PORT,
        Kind::Cluster => REDIS_PORT,
    };
    let hosts =
        hosts.split(',').map(|h| host_port(h.trim(), default_port, scheme)).collect::<Result<Vec<_>>>()?;
    match kind {
        Kind::Sentinel => {
            let mut parts = path.split('/');
            let master = parts.next().unwrap_or_default();
            if master.is_empty() {
                return Err(LockError::Config(format!(
                    "{scheme}:// needs the master's name after the hosts, e.g. \
                     redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster"
                )));
            }
            let db = parts.next().filter(|d| !d.is_empty());
            if let Some(db) = db
                && db.parse::<i64>().is_err()
            {
                return Err(LockError::Config(format!(
                    "the database after the master's name must be a number, got `{}`",
                    db.chars().take(16).collect::<String>()
                )));
            }
            if parts.next().is_some_and(|p| !p.is_empty()) {
                return Err(LockError::Config(format!(
                    "too many path segments in the {scheme}:// URL; {FORMS}"
                )));
            }
            let sentinels = hosts.iter().map(|h| format!("{node_scheme}://{h}")).collect();
            // The master's address comes from the sentinels; only its settings are kept here.
            let node = format!("{node_scheme}://{creds}sentinel-master/{}", db.unwrap_or("0"));
            Ok(Spec::Sentinel { sentinels, master: master.to_owned(), node })
        }
        Kind::Cluster => {
            if !path.is_empty() {
                return Err(LockError::Config(format!(
                    "a cluster has no databases or names: remove `/{}` from the {scheme}:// URL",
                    path.chars().take(16).collect::<String>()
                )));
            }
            Ok(Spec::Cluster { nodes: hosts.iter().map(|h| format!("{node_scheme}://{creds}{h}")).collect() })
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Sentinel,
    Cluster,
}

/// `host[:port]`, checked, with the default port added.
fn host_port(h: &str, default_port: u16, scheme: &str) -> Result<String> {
    if h.is_empty() {
        return Err(LockError::Config(format!(
            "an empty host in the {scheme}:// URL's host list; list them as host1:port1,host2:port2"
        )));
    }
    // An IPv6 literal keeps its brackets: [::1]:6379.
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (h, None),
    };
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return Err(LockError::Config(format!("invalid host in the {scheme}:// URL's host list; {FORMS}")));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            LockError::Config(format!(
                "invalid port `{}` in the {scheme}:// URL; use a number from 1 to 65535",
                p.chars().take(16).collect::<String>()
            ))
        })?,
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_node_urls_pass_through() {
        assert_eq!(parse("redis://h:1/2").ok(), Some(Spec::Single("redis://h:1/2".into())));
        assert_eq!(parse(" rediss://u:p@h/ ").ok(), Some(Spec::Single("rediss://u:p@h/".into())));
    }

    #[test]
    fn sentinel_urls() {
        let spec = parse("redis+sentinel://u:p@w@a:1,b/mymaster/3").ok();
        assert_eq!(
            spec,
            Some(Spec::Sentinel {
                sentinels: vec!["redis://a:1".into(), "redis://b:26379".into()],
                master: "mymaster".into(),
                node: "redis://u:p@w@sentinel-master/3".into(),
            })
        );
        let Ok(Spec::Sentinel { sentinels, node, .. }) = parse("rediss+sentinel://a/m") else { panic!() };
        assert_eq!(sentinels, ["rediss://a:26379"]);
        assert_eq!(node, "rediss://sentinel-master/0");
    }

    #[test]
    fn cluster_urls() {
        assert_eq!(
            parse("redis+cluster://:pw@a:7000,[::1]:7001,b").ok(),
            Some(Spec::Cluster {
                nodes: vec![
                    "redis://:pw@a:7000".into(),
                    "redis://:pw@[::1]:7001".into(),
                    "redis://:pw@b:6379".into()
                ]
            })
        );
    }

    #[test]
    fn bad_urls_say_what_to_fix_without_the_password() {
        for (url, says) in [
            ("", "empty"),
            ("localhost:6379", "no scheme"),
            ("http://h", "unknown Redis URL scheme"),
            ("redis:/:secret@127.0.0.1://", "does not start with a scheme"),
            ("redis+sentinel://:secret@a:1", "master's name"),
            ("redis+sentinel://:secret@a:1/m/x", "must be a number"),
            ("redis+sentinel://:secret@a:1,,b/m", "empty host"),
            ("redis+cluster://:secret@a:99999", "invalid port"),
            ("redis+cluster://:secret@a:1/0", "no databases"),
            ("redis+cluster://:secret@a:1?x=1", "query parameters"),
        ] {
            let message = parse(url).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains("secret"), "{url}: {message}");
        }
    }
}
