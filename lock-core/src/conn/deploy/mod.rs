//! The Redis deployments a client runs on: one node, a master behind Sentinel,
//! or a Redis Cluster; with TLS and ACL users on any of them.

mod link;
pub(crate) mod slots;
mod target;
pub(crate) mod url;

pub(crate) use link::Link;
pub(crate) use target::{Deployment, PubSubSource};
