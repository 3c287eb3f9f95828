//! Every supported shape of `#[distributed_lock]` compiles, and the expansion is lint-clean:
//! this file denies pedantic clippy lints, unused qualifications and unsafe code, which
//! `cargo clippy --all-targets -- -D warnings` checks. The calls run against a real Redis.
#![deny(clippy::pedantic, unused_qualifications, unsafe_code)]
#![allow(clippy::unused_async, reason = "the bodies are trivial on purpose")]

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockClient, LockError, distributed_lock};
use tests::harness::{RedisServer, wait_until};

/// An application error with a lock variant.
#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

struct Order {
    product_id: u64,
    line: (u32, u32),
}

#[distributed_lock(key = "shape:unit", skip_if_held, client = client)]
async fn skip_unit(client: &LockClient) {
    let _ = client;
}

#[distributed_lock(key = "shape:option:{id}", skip_if_held, client = client)]
async fn skip_option(client: &LockClient, id: u64) -> Option<u64> {
    let _ = client;
    Some(id)
}

#[distributed_lock(key = "shape:result", skip_if_held, client = client)]
async fn skip_result(client: &LockClient) -> anyhow::Result<()> {
    let _ = client;
    Ok(())
}

#[distributed_lock(key = "shape:fail-fast:{order.product_id}:{order.line.0}", client = client)]
async fn fail_fast(client: &LockClient, order: Order) -> Result<u64, LockError> {
    let _ = client;
    Ok(order.product_id + u64::from(order.line.1))
}

#[distributed_lock(key = "shape:{{tagged}}:wait", wait = "1s", lease = "10s", at_least = "10ms", fencing, client = client)]
async fn waiting(client: &LockClient) -> Result<Option<u64>, AppError> {
    let _ = client;
    Ok(lock_core::current().and_then(|lock| lock.fence()))
}

#[distributed_lock(key = "shape:generic:{id}", on_lost = "continue", client = client)]
async fn generic<T: Display + Send + Sync>(
    client: &LockClient,
    id: T,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let _ = client;
    Ok(id.to_string())
}

#[distributed_lock(key = "shape:impl-trait:{id}", client = client)]
async fn impl_trait_arg(client: &LockClient, id: impl Display + Send + Sync) -> Result<String, AppError> {
    let _ = client;
    Ok(format!("{id}"))
}

struct Service {
    name: String,
    locks: LockClient,
    calls: u32,
}

impl Service {
    #[distributed_lock(key = "shape:service:{self.name}", client = self.locks)]
    async fn by_ref(&self) -> Result<usize, LockError> {
        Ok(self.name.len())
    }

    #[distributed_lock(key = "shape:service:{self.name}:mut", client = &self.locks)]
    async fn by_mut(&mut self) -> Result<u32, LockError> {
        self.calls += 1;
        Ok(self.calls)
    }

    #[distributed_lock(key = "shape:service:arc", skip_if_held, client = self.locks.clone())]
    async fn by_arc(self: Arc<Self>) -> Option<String> {
        Some(self.name.clone())
    }
}

trait Job {
    async fn run(&self, id: u64) -> Result<u64, AppError>;
}

impl Job for Service {
    #[distributed_lock(key = "shape:job:{id}", client = self.locks)]
    async fn run(&self, id: u64) -> Result<u64, AppError> {
        Ok(id * 2)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_runs_its_body_under_the_lock() {
    let server = RedisServer::shared();
    let client = LockClient::from_url(&server.url()).unwrap();

    skip_unit(&client).await;
    assert_eq!(skip_option(&client, 7).await, Some(7));
    skip_result(&client).await.unwrap();
    assert_eq!(fail_fast(&client, Order { product_id: 40, line: (1, 2) }).await.unwrap(), 42);
    assert!(
        waiting(&client).await.unwrap().is_some_and(|fence| fence > 0),
        "the fence is visible in the body"
    );
    assert_eq!(generic(&client, 5u8).await.unwrap(), "5");
    assert_eq!(impl_trait_arg(&client, "x").await.unwrap(), "x");

    let mut service = Service { name: "svc".into(), locks: client.clone(), calls: 0 };
    assert_eq!(service.by_ref().await.unwrap(), 3);
    assert_eq!(service.by_mut().await.unwrap(), 1);
    assert_eq!(service.run(21).await.unwrap(), 42);
    assert_eq!(Arc::new(service).by_arc().await.as_deref(), Some("svc"));
    for key in ["shape:unit", "shape:fail-fast:40:1", "shape:service:svc"] {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "{key} released");
    }
    // `at_least = "10ms"` keeps that one a little longer.
    let held_at_least =
        wait_until(Duration::from_secs(1), || server.cli(&["EXISTS", "shape:{tagged}:wait"]) == "0").await;
    assert!(held_at_least, "released once the minimum hold passed");
}
