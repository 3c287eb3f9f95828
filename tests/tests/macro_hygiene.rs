//! The expansion is hygienic: every shape of `#[distributed_lock]` compiles inside a
//! `#![no_implicit_prelude]` module (nothing from the prelude is assumed) that also defines
//! items named like what the expansion uses, and the calls run against a real Redis.

mod hygiene {
    #![no_implicit_prelude]

    use ::lock_core::{LockClient, LockError, distributed_lock};
    use ::std::option::Option::{self, Some};
    use ::std::result::Result::{self, Ok};
    use ::std::string::{String, ToString};

    // Names an expansion written with relative paths would pick up instead.
    #[allow(dead_code)]
    mod lock_core {}
    #[allow(dead_code)]
    mod __private {}
    #[allow(dead_code)]
    struct Spec;
    #[allow(dead_code)]
    struct LockOptions;
    #[allow(dead_code)]
    struct Duration;
    #[allow(dead_code)]
    fn run() {}
    #[allow(dead_code)]
    fn run_skip() {}
    #[allow(unused_macros)]
    macro_rules! format {
        ($($tt:tt)*) => {
            ::core::compile_error!("the expansion must not use a local `format!`")
        };
    }

    pub(crate) struct Order {
        pub(crate) id: u64,
    }

    #[distributed_lock(key = "hygiene:skip:{id}", skip_if_held, client = client)]
    pub(crate) async fn skip(client: &LockClient, id: u64) -> Option<u64> {
        let _ = client;
        Some(id)
    }

    #[distributed_lock(key = "hygiene:unit", skip_if_held, lease = "1s", client = client)]
    pub(crate) async fn unit(client: &LockClient) {
        let _ = client;
    }

    #[distributed_lock(key = "hygiene:order:{order.id}", client = client)]
    pub(crate) async fn fail_fast(client: &LockClient, order: Order) -> Result<u64, LockError> {
        let _ = client;
        Ok(order.id)
    }

    #[distributed_lock(
        key = "hygiene:{{tagged}}:wait",
        wait = "1s",
        lease = "10s",
        at_least = "10ms",
        fencing,
        on_lost = "continue",
        client = client
    )]
    pub(crate) async fn waiting(client: &LockClient) -> Result<Option<u64>, LockError> {
        let _ = client;
        Ok(::lock_core::current().and_then(|lock| lock.fence()))
    }

    #[distributed_lock(key = "hygiene:generic:{id}", crate = "::lock_core", client = client)]
    pub(crate) async fn generic<T: ::std::fmt::Display>(
        client: &LockClient,
        id: T,
    ) -> Result<String, LockError> {
        let _ = client;
        Ok(id.to_string())
    }

    #[distributed_lock(key = "hygiene:default")]
    pub(crate) async fn default_client() -> Result<(), LockError> {
        Ok(())
    }

    pub(crate) struct Svc {
        pub(crate) client: ::std::sync::Arc<LockClient>,
        pub(crate) name: &'static str,
    }

    impl Svc {
        #[distributed_lock(key = "hygiene:svc:{self.name}:{n}", client = self.client)]
        pub(crate) async fn method(&self, n: u32) -> Result<u32, LockError> {
            Ok(n)
        }

        #[distributed_lock(key = "hygiene:svc:{self.name}", skip_if_held, client = self.client)]
        pub(crate) async fn owned(self: ::std::sync::Arc<Self>) -> Option<&'static str> {
            Some(self.name)
        }
    }
}

use std::sync::Arc;

use lock_core::LockClient;
use tests::harness::{RedisServer, init_tracing};

// One test: it installs the default client, which is process-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_compiles_and_runs_without_the_prelude() {
    init_tracing();
    let server = RedisServer::shared();
    let client = LockClient::builder().url(server.url()).build().unwrap();
    client.clone().install_default();

    assert_eq!(hygiene::skip(&client, 3).await, Some(3));
    hygiene::unit(&client).await;
    assert_eq!(hygiene::fail_fast(&client, hygiene::Order { id: 4 }).await.unwrap(), 4);
    assert!(hygiene::waiting(&client).await.unwrap().is_some(), "fencing token drawn");
    assert_eq!(hygiene::generic(&client, "g").await.unwrap(), "g");
    hygiene::default_client().await.unwrap();
    let svc = Arc::new(hygiene::Svc { client: Arc::new(client), name: "svc" });
    assert_eq!(svc.method(5).await.unwrap(), 5);
    assert_eq!(svc.owned().await, Some("svc"));
    for key in ["hygiene:skip:3", "hygiene:unit", "hygiene:order:4", "hygiene:generic:g", "hygiene:svc:svc:5"]
    {
        assert_eq!(server.cli(&["EXISTS", key]), "0", "{key} released");
    }
}
