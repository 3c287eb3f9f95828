//! Test support for the workspace's integration tests: a private redis-server per test.

pub mod harness;
