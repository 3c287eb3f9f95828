//! The locks (`/locks`): the held locks a pattern matches, each with an Unlock button.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use lock_core::inspect::LockKind;

use crate::Console;
use crate::api::{Params, lock_query};
use crate::error::ApiError;
use crate::page::buttons::{Effect, button};
use crate::page::layout::{Base, error_page, layout};
use crate::page::text::{esc, ms, seg};
use crate::view;

/// `GET /locks?pattern=...&limit=...`
pub(crate) async fn locks(State(console): State<Console>, base: Base, query: Params) -> Response {
    let read = async {
        let query = lock_query(&console, query)?;
        let (locks, complete) = view::locks(console.client(), &query, console.inner.budget.keys).await?;
        Ok::<_, ApiError>((query, locks, complete))
    };
    let (query, locks, complete) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&console, &base, e),
    };
    let mut body = if complete {
        String::new()
    } else {
        "<p class=\"warn\" id=\"partial\">Partial list: the console's budget of holds to check ran out (or \
         more client identities hold locks than one listing reads), so more locks may match than are shown.</p>"
            .to_owned()
    };
    let _ = write!(
        body,
        "<h1>Locks</h1><form method=\"get\" action=\"{}locks\" class=\"filter\">\
         <input name=\"pattern\" value=\"{}\" aria-label=\"pattern\"> <input name=\"limit\" value=\"{}\" size=\"5\" aria-label=\"limit\"> \
         <button>Filter</button></form>",
        base.root(),
        esc(&query.pattern),
        query.limit
    );
    if locks.is_empty() {
        body.push_str("<p class=\"empty\">No held lock matches.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"locks\"><thead><tr><th>Key</th><th>Kind</th><th>Holders</th><th>Instance</th><th>TTL</th><th>Holder token</th><th></th></tr></thead><tbody>",
        );
        for lock in &locks {
            // A semaphore's permit or a reader is released by naming its token (the listing
            // shows one holder, so only a single hold has a button); a lock by its key.
            let by_token = !matches!(lock.kind, LockKind::Lock);
            let unlock = if lock.holders > 1 {
                String::new()
            } else {
                let token =
                    if by_token { format!("?token={}", seg(&lock.holder.token)) } else { String::new() };
                button(
                    &console,
                    "DELETE",
                    &format!("{}/api/locks/{}{token}", base.0, seg(&lock.key)),
                    "Unlock",
                    Effect { kind: "unlock", name: &lock.key },
                    Some(&format!("Force-release {}? Its holder is not told and may still write.", lock.key)),
                )
            };
            let _ = write!(
                body,
                "<tr><td class=\"key\"><a href=\"{}locks/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"token\">{}</td><td>{unlock}</td></tr>",
                base.root(),
                seg(&lock.key),
                esc(&lock.key),
                crate::json::kind_name(lock.kind),
                lock.holders,
                esc(lock.holder.instance.as_deref().unwrap_or("?")),
                lock.ttl.map_or_else(|| "none".into(), ms),
                esc(&lock.holder.token),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    layout(&console, &base, "Locks", "Locks", &body).into_response()
}
