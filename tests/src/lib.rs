//! Test support for the workspace's integration tests: a private Redis per test, from a
//! `redis-server` process or a Docker container (see [`harness`]).

pub mod harness;
pub mod http;
pub mod nemesis;
