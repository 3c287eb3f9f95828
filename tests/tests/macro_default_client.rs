//! The default client: none installed is a clear error (or a logged skip), never a panic;
//! once installed, annotated fns without `client = ...` use it.

use lock_core::{LockClient, LockError, distributed_lock};
use tests::harness::{RedisServer, init_tracing};

#[distributed_lock(key = "job:default")]
async fn uses_default() -> Result<&'static str, LockError> {
    Ok("ran")
}

#[distributed_lock(key = "job:default:skip", skip_if_held)]
async fn skips_without_client() -> Option<()> {
    Some(())
}

// One test: the default client is process-wide state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_client_is_required_then_used() {
    init_tracing();
    let err = uses_default().await.unwrap_err();
    assert!(matches!(err, LockError::NotConfigured), "{err:?}");
    assert!(err.to_string().contains("install_default"), "the message says what to do: {err}");
    assert_eq!(skips_without_client().await, None, "a skippable call is skipped and logged");

    let server = RedisServer::start();
    LockClient::builder().url(server.url()).instance_id("pod-default").build().unwrap().install_default();
    assert_eq!(uses_default().await.unwrap(), "ran");
    assert_eq!(skips_without_client().await, Some(()));
}
