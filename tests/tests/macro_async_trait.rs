//! `#[distributed_lock]` on the methods of an `#[async_trait]` impl, as a new user writes it.
//! async-trait expands first and leaves each method as a plain fn returning
//! `Box::pin(async move { .. })`; the attribute locks that `async` block. Runs against a real
//! Redis, through the concrete type and through `Arc<dyn _>` / `Box<dyn _>`.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::{LockClient, LockError, LockOptions, distributed_lock};
use tests::harness::{RedisServer, init_tracing};

#[async_trait]
trait Reports: Send + Sync {
    /// Fail fast: a report already being generated elsewhere is an error.
    async fn daily(&self) -> Result<u32, LockError>;

    /// Skips when held; the key names a field of `self` and two parameters.
    async fn regional(&self, region: &str, day: u32) -> Option<String>;

    /// The client, for the default method below.
    fn client(&self) -> &LockClient;

    /// A default method of the trait, locked too.
    #[distributed_lock(key = "report:weekly", skip_if_held, client = self.client())]
    async fn weekly(&self) -> Option<&'static str> {
        Some("weekly")
    }
}

/// What the replicas share in a test: how many bodies ran, and how many calls returned.
#[derive(Default)]
struct Counters {
    runs: AtomicU32,
    finished: AtomicU32,
}

struct Svc {
    client: LockClient,
    tenant: String,
    counters: Arc<Counters>,
}

impl Svc {
    fn new(server: &RedisServer, instance: &str, counters: Arc<Counters>) -> Svc {
        let client = LockClient::builder()
            .url(server.url())
            .instance_id(instance)
            .command_timeout(Duration::from_millis(500))
            .build()
            .expect("valid client configuration");
        Svc { client, tenant: "acme".to_owned(), counters }
    }
}

#[async_trait]
impl Reports for Svc {
    #[distributed_lock(key = "lock:report", client = self.client)]
    async fn daily(&self) -> Result<u32, LockError> {
        let runs = self.counters.runs.fetch_add(1, Ordering::SeqCst) + 1;
        // Hold the lock until the other replica's call has returned, so that the calls overlap.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.counters.finished.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(runs)
    }

    #[distributed_lock(key = "report:{self.tenant}:{region}:{day}", skip_if_held, client = self.client)]
    async fn regional(&self, region: &str, day: u32) -> Option<String> {
        self.counters.runs.fetch_add(1, Ordering::SeqCst);
        // The body still sees its parameters and `self`, as async-trait bound them.
        assert_eq!((region.len(), day, self.tenant.as_str()), (2, 7, "acme"));
        lock_core::current().map(|lock| lock.key().to_owned())
    }

    fn client(&self) -> &LockClient {
        &self.client
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_through_trait_objects_exclude_each_other() {
    init_tracing();
    let server = RedisServer::shared();
    for round in 0..10 {
        let counters = Arc::new(Counters::default());
        let replicas: [Arc<dyn Reports>; 2] = [
            Arc::new(Svc::new(&server, "pod-1", counters.clone())),
            Arc::new(Svc::new(&server, "pod-2", counters.clone())),
        ];
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let calls: Vec<_> = replicas
            .iter()
            .cloned()
            .map(|svc| {
                let (start, counters) = (start.clone(), counters.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    let result = svc.daily().await;
                    counters.finished.fetch_add(1, Ordering::SeqCst);
                    result
                })
            })
            .collect();
        let mut results = Vec::new();
        for call in calls {
            results.push(tokio::time::timeout(Duration::from_secs(10), call).await.unwrap().unwrap());
        }
        assert_eq!(counters.runs.load(Ordering::SeqCst), 1, "round {round}: exactly one body ran");
        let ran: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(ran, [&1], "round {round}: {results:?}");
        let held = results.iter().find_map(|r| r.as_ref().err()).expect("the other call failed");
        assert!(matches!(held, LockError::Held { key, .. } if key == "lock:report"), "round {round}: {held}");
        assert_eq!(server.cli(&["EXISTS", "lock:report"]), "0", "round {round}: released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_placeholders_use_self_fields_and_parameters() {
    init_tracing();
    let server = RedisServer::shared();
    let counters = Arc::new(Counters::default());
    let svc = Svc::new(&server, "pod-1", counters.clone());
    let boxed: Box<dyn Reports> = Box::new(Svc::new(&server, "pod-2", counters.clone()));

    assert_eq!(svc.regional("eu", 7).await.as_deref(), Some("report:acme:eu:7"));
    assert_eq!(boxed.regional("us", 7).await.as_deref(), Some("report:acme:us:7"));
    assert_eq!(counters.runs.load(Ordering::SeqCst), 2);

    // Held by another owner: the call through the trait object is skipped, body not run.
    let other = LockClient::builder().url(server.url()).instance_id("pod-3").build().unwrap();
    let held = other.try_lock("report:acme:eu:7", LockOptions::new()).await.unwrap();
    assert_eq!(boxed.regional("eu", 7).await, None, "skipped while held");
    assert_eq!(svc.regional("us", 7).await.as_deref(), Some("report:acme:us:7"), "another key is free");
    assert_eq!(counters.runs.load(Ordering::SeqCst), 3, "the skipped body did not run");

    // The trait's default method, through the trait object.
    assert_eq!(boxed.weekly().await, Some("weekly"));
    let weekly = other.try_lock("report:weekly", LockOptions::new()).await.unwrap();
    assert_eq!(boxed.weekly().await, None);
    weekly.release().await.unwrap();
    held.release().await.unwrap();
    assert_eq!(boxed.regional("eu", 7).await.as_deref(), Some("report:acme:eu:7"));
}

/// More method shapes under `#[async_trait]`: other receivers, patterns, generics, `?Send`.
#[async_trait]
trait Shapes {
    async fn owned(self: Arc<Self>, n: u64) -> Result<u64, LockError>;
    async fn exclusive(&mut self, mut count: u32) -> Result<u32, LockError>;
    async fn pattern(&self, (a, b): (u32, u32), _: u8) -> Result<u32, LockError>;
    async fn generic<T: Display + Send + Sync>(&self, id: T) -> Result<String, LockError>;
    async fn unit(&self);
}

struct Shaped {
    client: Arc<LockClient>,
    name: &'static str,
    count: u32,
}

#[async_trait]
impl Shapes for Shaped {
    #[distributed_lock(key = "async-trait:owned:{self.name}:{n}", wait = "1s", lease = "5s", client = self.client)]
    async fn owned(self: Arc<Self>, n: u64) -> Result<u64, LockError> {
        Ok(n + u64::from(self.count))
    }

    #[distributed_lock(key = "async-trait:exclusive:{count}", fencing, on_lost = "continue", client = self.client)]
    async fn exclusive(&mut self, mut count: u32) -> Result<u32, LockError> {
        count += 1;
        self.count += count;
        assert!(lock_core::current().and_then(|lock| lock.fence()).is_some(), "fencing token drawn");
        Ok(self.count)
    }

    #[distributed_lock(key = "async-trait:pattern", at_least = "10ms", client = self.client)]
    async fn pattern(&self, (a, b): (u32, u32), _: u8) -> Result<u32, LockError> {
        Ok(a + b)
    }

    #[distributed_lock(key = "async-trait:generic:{id}", client = self.client)]
    async fn generic<T: Display + Send + Sync>(&self, id: T) -> Result<String, LockError> {
        Ok(id.to_string())
    }

    #[distributed_lock(key = "async-trait:unit", skip_if_held, client = self.client)]
    async fn unit(&self) {}
}

/// `#[async_trait(?Send)]`: the boxed future is not `Send`.
#[async_trait(?Send)]
trait Local {
    async fn local(&self, id: u32) -> Result<u32, LockError>;
}

#[async_trait(?Send)]
impl Local for Shaped {
    #[distributed_lock(key = "async-trait:local:{id}", client = self.client)]
    async fn local(&self, id: u32) -> Result<u32, LockError> {
        let not_send = std::rc::Rc::new(id);
        tokio::task::yield_now().await;
        Ok(*not_send)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_method_shapes() {
    init_tracing();
    let server = RedisServer::shared();
    let client = Arc::new(LockClient::builder().url(server.url()).build().unwrap());
    let mut shaped = Shaped { client, name: "s", count: 0 };
    assert_eq!(shaped.exclusive(1).await.unwrap(), 2);
    assert_eq!(shaped.pattern((2, 3), 0).await.unwrap(), 5);
    assert_eq!(shaped.generic(42).await.unwrap(), "42");
    shaped.unit().await;
    assert_eq!(shaped.local(9).await.unwrap(), 9);
    assert_eq!(Arc::new(shaped).owned(1).await.unwrap(), 3);
    for key in
        ["async-trait:owned:s:1", "async-trait:exclusive:1", "async-trait:generic:42", "async-trait:local:9"]
    {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "{key} released");
    }
}
