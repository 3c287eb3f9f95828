//! `crate = "..."`: an application that reaches lock-core only through `lock-scheduler`'s
//! re-export uses the attribute with `crate = "lock_scheduler::lock_core"`. Nothing in this file
//! names `lock_core` directly; that the expansion does not either (every path goes through the
//! `crate` option) is checked on its tokens by lock-macros' unit tests.

use std::time::Duration;

use lock_scheduler::lock_core::{LockClient, LockError, LockOptions, distributed_lock};
use tests::harness::{RedisServer, init_tracing};

struct Billing {
    locks: LockClient,
    region: &'static str,
}

impl Billing {
    #[distributed_lock(
        crate = "lock_scheduler::lock_core",
        key = "reexport:invoice:{self.region}:{id}",
        wait = "1s",
        lease = "5s",
        fencing,
        client = self.locks
    )]
    async fn invoice(&self, id: u64) -> Result<Option<u64>, LockError> {
        let _ = id;
        Ok(lock_scheduler::lock_core::current().and_then(|lock| lock.fence()))
    }
}

#[distributed_lock(crate = "::lock_scheduler::lock_core", key = "reexport:sweep", skip_if_held, client = client)]
async fn sweep(client: &LockClient) -> Option<&'static str> {
    let _ = client;
    Some("swept")
}

mod nested {
    use lock_scheduler::lock_core::{LockClient, LockError, distributed_lock};

    /// A relative path resolves where the fn is, like any path written there.
    #[distributed_lock(crate = "lock_scheduler::lock_core", key = "reexport:nested", on_lost = "continue", client = client)]
    pub(crate) async fn nested(client: &LockClient) -> Result<(), LockError> {
        let _ = client;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_works_through_the_scheduler_reexport() {
    init_tracing();
    let server = RedisServer::shared();
    let client =
        LockClient::builder().url(server.url()).command_timeout(Duration::from_millis(500)).build().unwrap();
    let billing = Billing { locks: client.clone(), region: "eu" };

    let fence = billing.invoice(7).await.unwrap();
    assert!(fence.is_some(), "fencing token drawn");
    assert_eq!(billing.invoice(7).await.unwrap().map(|f| f > fence.unwrap_or(0)), Some(true));

    assert_eq!(sweep(&client).await, Some("swept"));
    let other = LockClient::builder().url(server.url()).instance_id("pod-2").build().unwrap();
    let held = other.try_lock("reexport:sweep", LockOptions::new()).await.unwrap();
    assert_eq!(sweep(&client).await, None, "skipped while held");
    held.release().await.unwrap();

    nested::nested(&client).await.unwrap();
    for key in ["reexport:invoice:eu:7", "reexport:sweep", "reexport:nested"] {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "{key} released");
    }
}
