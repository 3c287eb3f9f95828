//! One contract suite, every deployment: the behaviour tests that matter (mutual exclusion
//! with many tasks and several clients, owner-checked release, expiry, extend, hand-off to
//! another client's waiter, crash takeover, fencing order, tick claim; a semaphore's bound and a
//! dead permit holder; a read-write lock's exclusion and a dead reader) against each deployment
//! the harness starts. Test names say which: `single::mutual_exclusion`,
//! `single_acl::hand_off_to_another_client`, ...
//!
//! The deployment of a kind is shared by the cases running at the same time
//! ([`deployment::shared`]); each case uses its own keys.

mod cases;
mod deployment;

use std::sync::{Arc, Mutex, Weak};

use deployment::{Deployment, shared};

/// One module per deployment, one test per case.
macro_rules! contract {
    ($name:ident, $start:path) => {
        mod $name {
            use super::*;

            fn deployment() -> Arc<Deployment> {
                static SLOT: Mutex<Weak<Deployment>> = Mutex::new(Weak::new());
                shared(&SLOT, $start)
            }

            contract!(@cases mutual_exclusion, owner_checked_release, expiry, extend,
                hand_off_to_another_client, crash_takeover, fencing_order, tick_claim, batched_tick_claims, get_many_across_nodes, semaphore_bound,
                semaphore_crash_takeover, rw_exclusion, rw_reader_crash_takeover);
        }
    };
    (@cases $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                tests::harness::init_tracing();
                // Started off the runtime's threads: it blocks for seconds.
                let d = tokio::task::spawn_blocking(deployment).await.expect("deployment starts");
                crate::cases::$case(&d).await;
            }
        )*
    };
}

contract!(single, Deployment::single);
contract!(single_acl, Deployment::single_acl);
contract!(tls_acl, Deployment::tls_acl);
contract!(cluster, Deployment::cluster);
contract!(sentinel, Deployment::sentinel);
