//! Shared code of the examples.
//!
//! - [`order_service`]: the order service of `examples/order_service` — per-product locks with
//!   fencing over an SQLite inventory — and its scenarios, shared with the tests.
//! - [`probes`]: the metrics port of `examples/daily_report`: `/metrics`, `/livez`, `/readyz`.
//!
//! The Redis every example runs against (`REDIS_URL`, else a private `redis-server`, else a
//! container) comes from the workspace's Redis fixture: [`redis_fixture::Redis`].

pub mod order_service;
pub mod probes;
