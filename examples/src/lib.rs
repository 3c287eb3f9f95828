//! Shared code of the examples.
//!
//! - [`redis`]: the Redis an example runs against (`REDIS_URL`, else a private
//!   `redis-server`), used by every example.
//! - [`order_service`]: the order service of `examples/order_service` — per-product locks with
//!   fencing over an SQLite inventory — and its scenarios, shared with the tests.
//! - [`temp`]: a temporary directory removed on drop.

pub mod order_service;
pub mod redis;
pub mod temp;
