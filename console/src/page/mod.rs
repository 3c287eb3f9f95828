//! The web page: server-rendered HTML (no build step, no Node), one small script for the
//! action buttons, the token box and the background updates (it fetches the page it shows and
//! swaps in the new `<main>`, so the HTML rendered here is the only markup the page ever
//! shows), one stylesheet. Every value from Redis goes through [`text::esc`]; links into the
//! console are relative, so the router can be mounted anywhere.
//!
//! One module per page; what they share: [`layout`] (the frame, the mount prefix), [`text`]
//! (escaping and formats), [`buttons`] (the action buttons), [`chart`] (a job's runs),
//! [`counts`] (its runs over time).

pub(crate) mod assets;
pub(crate) mod buttons;
pub(crate) mod chart;
pub(crate) mod counts;
pub(crate) mod elections;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod layout;
pub(crate) mod lock;
pub(crate) mod locks;
pub(crate) mod overview;
pub(crate) mod replicas;
pub(crate) mod run;
pub(crate) mod text;
