//! One lock's page (`/locks/{key}`): its holders, waiters, fence and hand-offs.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::DateTime;
use lock_core::inspect::LockKind;

use crate::Console;
use crate::api::{Segment, segment};
use crate::error::ApiError;
use crate::page::buttons::{Effect, button};
use crate::page::layout::{Base, error_page, layout};
use crate::page::text::{esc, ms, seg, time};
use crate::view;

/// `GET /locks/{key}`: one lock in full, as `GET /api/locks/{key}` reads it: each holder (a
/// semaphore's permits, a read-write lock's writer and readers) with its liveness, the
/// waiters, the fence and the hand-offs; an Unlock button per holder.
pub(crate) async fn lock(State(console): State<Console>, base: Base, key: Segment) -> Response {
    let read = async {
        let key = segment(key)?;
        view::check_text("key", &key)?;
        Ok::<_, ApiError>(console.client().inspect(&key).await?)
    };
    let info = match read.await {
        Ok(info) => info,
        Err(e) => return error_page(&console, &base, e),
    };
    let kind = crate::json::kind_name(info.kind);
    let permits = match info.kind {
        LockKind::Semaphore { permits: Some(permits) } => format!(" of {permits} permits"),
        _ => String::new(),
    };
    let mut body = format!(
        "<h1>Lock <span id=\"lock-key\" class=\"key\">{}</span></h1><dl>\
         <dt>Kind</dt><dd id=\"lock-kind\">{kind}</dd><dt>Held</dt><dd id=\"lock-held\">{}</dd>\
         <dt>TTL</dt><dd>{}</dd><dt>Fence</dt><dd id=\"lock-fence\">{}</dd><dt>Last tick claimed</dt><dd>{}</dd>\
         <dt>Waiters</dt><dd>{} ({} live)</dd></dl>",
        esc(&info.key),
        if info.is_held() {
            format!("yes, {} holder(s){permits}", info.holder.iter().count() + info.holders.len())
        } else {
            "no".into()
        },
        info.ttl.map_or_else(|| "none".into(), ms),
        info.fence.map_or_else(|| "–".into(), |f| f.to_string()),
        info.last_tick
            .and_then(DateTime::from_timestamp_millis)
            .map_or_else(|| "–".into(), |t| time(Some(t))),
        info.waiters.len(),
        info.live_waiters(),
    );
    // The lock's holder is released by its key; a permit, a reader or a writer of a
    // read-write lock by naming its token, so each row has its own button.
    let by_token = !matches!(info.kind, LockKind::Lock);
    let role = |writer: bool| match info.kind {
        LockKind::Lock => "holder",
        LockKind::Semaphore { .. } => "permit",
        _ if writer => "writer",
        _ => "reader",
    };
    let rows: Vec<(&str, &lock_core::inspect::Holder)> = info
        .holder
        .iter()
        .map(|h| (role(true), h))
        .chain(info.holders.iter().map(|h| (role(false), h)))
        .collect();
    body.push_str("<h2>Holders</h2>");
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">Nobody holds it.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"holders\"><thead><tr><th>Role</th><th>Instance</th><th>Alive</th><th>Expires in</th>\
             <th>Liveness key</th><th>Token</th><th></th></tr></thead><tbody>",
        );
        for (role, holder) in rows {
            let query = if by_token { format!("?token={}", seg(&holder.token)) } else { String::new() };
            let unlock = button(
                &console,
                "DELETE",
                &format!("{}/api/locks/{}{query}", base.0, seg(&info.key)),
                "Unlock",
                Effect { kind: "unlock", name: &info.key },
                Some(&format!(
                    "Force-release this {role} of {}? It is not told and may still write.",
                    info.key
                )),
            );
            let (class, alive) = match (holder.released, holder.alive) {
                (true, _) => ("warn", "released"),
                (false, Some(true)) => ("ok", "yes"),
                (false, Some(false)) => ("bad", "no (liveness lapsed)"),
                (false, None) => ("skip", "unknown"),
            };
            let _ = write!(
                body,
                "<tr><td>{role}</td><td>{}</td><td class=\"{class}\">{alive}</td><td>{}</td><td class=\"key\">{}</td>\
                 <td class=\"token\">{}</td><td>{unlock}</td></tr>",
                esc(holder.instance.as_deref().unwrap_or("?")),
                holder.expires_in.map_or_else(|| "–".into(), ms),
                esc(holder.liveness_key.as_deref().unwrap_or("–")),
                esc(&holder.token),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    body.push_str("<h2>Waiters</h2>");
    if info.waiters.is_empty() {
        body.push_str("<p class=\"empty\">Nobody is queued.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"waiters\"><thead><tr><th>#</th><th>Token</th><th>Live</th><th>Ticket lapses in</th></tr></thead><tbody>",
        );
        for (i, waiter) in info.waiters.iter().enumerate() {
            let _ = write!(
                body,
                "<tr><td>{}</td><td class=\"token\">{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                i + 1,
                esc(&waiter.token),
                if waiter.live { "ok" } else { "bad" },
                if waiter.live { "yes" } else { "no (lapsed)" },
                waiter.ticket_remaining.map_or_else(|| "–".into(), ms),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    if !info.handoffs.is_empty() {
        body.push_str("<h2>Hand-offs</h2><ul id=\"handoffs\">");
        for handoff in &info.handoffs {
            let _ = write!(
                body,
                "<li><span class=\"key\">{}</span>{}</li>",
                esc(&handoff.client_id),
                if handoff.lapsed { " (lapsed)" } else { "" }
            );
        }
        body.push_str("</ul>");
    }
    layout(&console, &base, &format!("Lock {}", info.key), "Locks", &body).into_response()
}
