//! `LockClient::subscribe`: the application's own channel on the client's shared pub/sub
//! connection, against a real redis-server. Messages are heard, a lost connection and its
//! restoration are reported as gaps, dropping the subscription unsubscribes, and lock waiters
//! are not confused with it.

use std::time::Duration;

use lock_core::{LockClient, Notice};
use tests::harness::{RedisServer, client, init_tracing, wait_until};

/// The number of subscribers of `channel` on the server.
fn subscribers(server: &RedisServer, channel: &str) -> String {
    let reply = server.cli(&["PUBSUB", "NUMSUB", channel]);
    reply.lines().last().unwrap_or_default().trim().to_owned()
}

/// Publishes `message` on `channel`; how many subscribers received it.
async fn try_publish(client: &LockClient, channel: &str, message: &str) -> lock_core::Result<i64> {
    let mut pipe = lock_core::redis::pipe();
    pipe.cmd(client.publish_command()).arg(channel).arg(message);
    let (receivers,): (i64,) = client.query_pipeline(&pipe).await?;
    Ok(receivers)
}

async fn publish(client: &LockClient, channel: &str, message: &str) {
    assert_eq!(try_publish(client, channel, message).await.expect("published"), 1, "one subscriber");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_heard_gaps_reported_and_dropping_unsubscribes() {
    init_tracing();
    let mut server = RedisServer::start();
    let listener = client(&server, "listener");
    let publisher = client(&server, "publisher");
    let channel = "app:{orders}:changed";
    let subscription = listener.subscribe(channel).await.expect("subscribed");
    assert_eq!(subscription.channel(), channel);
    assert_eq!(subscribers(&server, channel), "1", "subscribed when subscribe returns");
    assert_eq!(publisher.publish_command(), "PUBLISH", "one node");

    publish(&publisher, channel, "one").await;
    let heard = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
    assert_eq!(heard, Ok(Notice::Message));
    // Two messages while nobody awaited: one notice, nothing lost.
    publish(&publisher, channel, "two").await;
    publish(&publisher, channel, "three").await;
    let heard = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
    assert_eq!(heard, Ok(Notice::Message));
    // The subscription is not a lock waiter.
    let stats = listener.stats();
    assert_eq!((stats.waiting_keys, stats.waiters.len()), (0, 0), "{stats:?}");

    // The connection lost: a gap; once Redis is back, the subscription is restored by itself
    // (another gap), and messages are heard again.
    server.restart();
    // "three" may have arrived after the notice above: at most that message comes first.
    let mut before_gap = Vec::new();
    while let Ok(notice) = tokio::time::timeout(Duration::from_secs(10), subscription.next()).await {
        before_gap.push(notice);
        if notice == Notice::Gap || before_gap.len() > 2 {
            break;
        }
    }
    assert!(
        matches!(before_gap[..], [Notice::Gap] | [Notice::Message, Notice::Gap]),
        "the lost connection is reported: {before_gap:?}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || subscribers(&server, channel) == "1").await,
        "subscribed again after the restart"
    );
    let mut heard = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !heard.contains(&Notice::Message) && tokio::time::Instant::now() < deadline {
        // The publisher's own connection was lost too: its first command may fail.
        let _ = try_publish(&publisher, channel, "after").await;
        if let Ok(notice) = tokio::time::timeout(Duration::from_millis(500), subscription.next()).await {
            heard.push(notice);
        }
    }
    assert!(heard.contains(&Notice::Message), "heard after the restart: {heard:?}");
    assert!(!subscription.ensure().await.expect("subscribed"), "nothing to redo on a live subscription");

    drop(subscription);
    assert!(
        wait_until(Duration::from_secs(5), || subscribers(&server, channel) == "0").await,
        "dropping the subscription unsubscribes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_the_channel_is_sharded_in_its_hash_tags_slot() {
    init_tracing();
    let cluster = tokio::task::spawn_blocking(tests::harness::RedisCluster::start).await.expect("cluster");
    let hosts: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").trim_end_matches('/').to_owned())
        .collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    let connect = |instance: &str| {
        LockClient::builder().url(url.as_str()).instance_id(instance).build().expect("client")
    };
    let (listener, publisher) = (connect("listener"), connect("publisher"));
    assert_eq!(publisher.publish_command(), "SPUBLISH", "sharded pub/sub in a cluster");
    let channel = "app:{orders}:changed";
    let subscription = listener.subscribe(channel).await.expect("subscribed");
    // Subscribed on the node that owns the tag's slot (a shard channel is counted there only).
    let owner = cluster.cli_for_key(channel, &["PUBSUB", "SHARDNUMSUB", channel]);
    assert_eq!(owner.lines().last().map(str::trim), Some("1"), "{owner}");
    publish(&publisher, channel, "one").await;
    let heard = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
    assert_eq!(heard, Ok(Notice::Message));
}
