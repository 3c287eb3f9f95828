//! `examples/order_service` against a real Redis (a private server per test) and a real SQLite
//! file in a temporary directory: the lock prevents the oversell that happens without it, the
//! fencing token makes the store reject a stalled holder's write, and orders for different
//! products are not serialised.

use std::sync::Mutex;
use std::time::Duration;

use examples::order_service::scenarios::{self, Locking, StallStep, connect_replicas};
use examples::order_service::{Inventory, Order, OrderError, OrderService, STALLING_LEASE};
use lock_core::{LockClient, LockOptions};
use redis_fixture::{Redis, RedisSource};
use tempfile::TempDir;
use tests::harness::{RedisServer, init_tracing, wait_until};

/// How long an order holds its product between reading and writing the stock.
const HOLD: Duration = Duration::from_millis(5);

/// A private Redis, a fresh SQLite file and `count` replicas on them.
struct Setup {
    server: RedisServer,
    _dir: TempDir,
    replicas: Vec<OrderService>,
}

fn setup(count: usize) -> Setup {
    init_tracing();
    let server = RedisServer::start();
    let dir = TempDir::with_prefix("order-service-test-").expect("temp dir");
    let replicas = connect_replicas(&server.url(), &dir.path().join("inventory.db"), count, HOLD)
        .expect("replicas connect");
    Setup { server, _dir: dir, replicas }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_lock_exactly_the_stock_is_sold() {
    let s = setup(4);
    for (round, product) in (1..=3).enumerate() {
        let r = scenarios::rush(&s.replicas, product, 5, 40, Locking::Locked).await.unwrap();
        assert!(r.errors.is_empty(), "round {round}: {:?}", r.errors);
        assert_eq!(r.busy, 0, "round {round}: no order gave up waiting");
        assert_eq!(r.accepted.len() + r.out_of_stock, 40, "round {round}: every order answered");
        assert_eq!(r.sold(), 5, "round {round}: sold = initial stock");
        assert_eq!(r.sold_in_store, 5, "round {round}: the orders table agrees");
        assert_eq!(r.final_row.stock, 0, "round {round}: nothing left");
        assert!(r.lowest_stock() >= 0, "round {round}: stock never below zero");

        // Writes went through in fence order, each with a newer fence than the last.
        let mut accepted = r.accepted.clone();
        accepted.sort_by_key(|receipt| receipt.order_id);
        let fences: Vec<u64> = accepted.iter().map(|receipt| receipt.fence.unwrap()).collect();
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "round {round}: fences {fences:?}");
        let remaining: Vec<i64> = accepted.iter().map(|receipt| receipt.remaining).collect();
        assert_eq!(remaining, [4, 3, 2, 1, 0], "round {round}: one decrement at a time");
        assert_eq!(r.final_row.last_fence, i64::try_from(fences[4]).unwrap());
        assert_eq!(s.server.cli(&["EXISTS", &format!("lock:product:{product}")]), "0", "all released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_it_oversells() {
    let s = setup(4);
    for (round, product) in (1..=3).enumerate() {
        let r = scenarios::rush(&s.replicas, product, 5, 40, Locking::Unlocked).await.unwrap();
        assert!(r.errors.is_empty(), "round {round}: {:?}", r.errors);
        assert!(r.sold() > 5, "round {round}: oversold, {} orders accepted for 5 items", r.sold());
        assert_eq!(r.sold_in_store, r.sold(), "round {round}: the store recorded every oversold order");
        assert!(
            r.final_row.stock + r.sold_in_store > 5,
            "round {round}: lost updates: {} left + {} sold > 5",
            r.final_row.stock,
            r.sold_in_store
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_write_is_rejected_by_the_fence() {
    let s = setup(2);
    let steps = Mutex::new(Vec::new());
    let record = |at: Duration, step: StallStep| steps.lock().unwrap().push((at, step));
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        scenarios::stalled_holder(&s.replicas[0], &s.replicas[1], 3, 3, &record),
    )
    .await
    .expect("the scenario ends")
    .unwrap();

    // While the holder held the lock, the other replica's fail-fast order was turned away.
    match &r.fail_fast {
        Err(e @ OrderError::Busy { key, .. }) => {
            assert_eq!(key, "lock:product:3");
            assert!(e.to_string().starts_with("product is being processed, try again"), "{e}");
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    // The other replica took over with a newer fence and its write was accepted.
    let taker_fence = r.taker.fence.unwrap();
    assert!(taker_fence > r.holder_fence, "{taker_fence} > {}", r.holder_fence);
    assert_eq!(r.taker.instance, "pod-2");
    assert_eq!(r.taker.remaining, 2);
    // The stalled holder knew (is_held() = false) but went on; the store refused its write.
    assert!(!r.holder_still_held);
    match &r.holder_result {
        Err(OrderError::StaleFence { product_id: 3, fence, last_fence }) => {
            assert_eq!(*fence, i64::try_from(r.holder_fence).unwrap());
            assert_eq!(*last_fence, i64::try_from(taker_fence).unwrap());
        }
        other => panic!("expected StaleFence, got {other:?}"),
    }
    assert_eq!(r.final_row.stock, 2, "only the new holder's write applied");
    assert_eq!(r.final_row.last_fence, i64::try_from(taker_fence).unwrap());
    assert_eq!(r.sold_in_store, 1);

    // Steps in order; the takeover only after the holder's lease ran out.
    let steps = steps.into_inner().unwrap();
    let names: Vec<&str> = steps
        .iter()
        .map(|(_, step)| match step {
            StallStep::HolderStalls { .. } => "stalls",
            StallStep::FailFast { .. } => "fail-fast",
            StallStep::Waiting { .. } => "waiting",
            StallStep::TookOver { .. } => "took-over",
            StallStep::HolderWakes { .. } => "wakes",
            StallStep::HolderWrite { .. } => "write",
        })
        .collect();
    assert_eq!(names, ["stalls", "fail-fast", "waiting", "took-over", "wakes", "write"]);
    let took_over_at = steps[3].0;
    assert!(took_over_at >= STALLING_LEASE - Duration::from_millis(5), "took over at {took_over_at:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_and_waiting_variants() {
    let s = setup(1);
    let service = &s.replicas[0];
    service.inventory().restock(7, 10).await.unwrap();
    let other = LockClient::builder().url(s.server.url()).instance_id("pod-9").build().unwrap();
    let held = other.try_lock("lock:product:7", LockOptions::new()).await.unwrap();

    let err = service.place_order(Order::new(7, 1)).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_eq!(err.to_string(), "product is being processed, try again (held by another order)");

    // The waiting variant proceeds as soon as the holder releases.
    let waiter = tokio::spawn({
        let service = service.clone();
        async move { service.place_order_waiting(Order::new(7, 2)).await }
    });
    assert!(
        wait_until(Duration::from_secs(2), || service.locks().stats().waiters_on("lock:product:7") == 1)
            .await
    );
    held.release().await.unwrap();
    let receipt = tokio::time::timeout(Duration::from_secs(2), waiter).await.unwrap().unwrap().unwrap();
    assert_eq!((receipt.remaining, receipt.instance.as_str()), (8, "pod-1"));

    // ... and gives up with the same error after its 1 s bound.
    let held = other.try_lock("lock:product:7", LockOptions::new()).await.unwrap();
    let err = service.place_order_waiting(Order::new(7, 1)).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert!(err.to_string().contains("still held after waiting"), "{err}");

    // Out-of-stock, empty and unknown orders are reported as such.
    drop(held);
    let out = service.place_order_waiting(Order::new(7, 9)).await.unwrap_err();
    assert!(matches!(out, OrderError::OutOfStock { available: 8, requested: 9, .. }), "{out}");
    let empty = service.place_order_waiting(Order::new(7, 0)).await.unwrap_err();
    assert!(matches!(empty, OrderError::EmptyOrder), "{empty}");
    let unknown = service.place_order_waiting(Order::new(404, 1)).await.unwrap_err();
    assert!(matches!(unknown, OrderError::UnknownProduct(404)), "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_update_reports_why_nothing_was_written() {
    let dir = TempDir::with_prefix("order-service-test-").unwrap();
    let store = Inventory::open(dir.path().join("inventory.db")).unwrap();
    store.restock(1, 3).await.unwrap();

    let sale = store.sell_fenced(1, 1, 5, "pod-1").await.unwrap();
    assert_eq!(sale.remaining, 2);
    for stale in [5, 4, 1] {
        let err = store.sell_fenced(1, 1, stale, "pod-2").await.unwrap_err();
        assert!(
            matches!(err, OrderError::StaleFence { product_id: 1, fence, last_fence: 5 } if u64::try_from(fence) == Ok(stale)),
            "fence {stale}: {err}"
        );
    }
    let err = store.sell_fenced(1, 3, 6, "pod-2").await.unwrap_err();
    assert!(matches!(err, OrderError::OutOfStock { available: 2, requested: 3, .. }), "{err}");
    let err = store.sell_fenced(2, 1, 6, "pod-2").await.unwrap_err();
    assert!(matches!(err, OrderError::UnknownProduct(2)), "{err}");

    // Rejected writes changed nothing; a newer fence still goes through.
    assert_eq!(store.product(1).await.unwrap().map(|row| (row.stock, row.last_fence)), Some((2, 5)));
    assert_eq!(store.sold(1).await.unwrap(), 1);
    assert_eq!(store.sell_fenced(1, 2, 6, "pod-2").await.unwrap().remaining, 0);
    assert_eq!(store.sold(1).await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_products_are_not_serialised() {
    let s = setup(4);
    let (orders, concurrency) = (120, 16);
    let one = scenarios::throughput(&s.replicas, 100, 1, orders, concurrency).await.unwrap();
    let many = scenarios::throughput(&s.replicas, 1000, 100, orders, concurrency).await.unwrap();
    eprintln!(
        "1 product: {} orders in {:?} ({:.0}/s, {} gave up); 100 products: {} in {:?} ({:.0}/s)",
        one.accepted,
        one.elapsed,
        one.per_second(),
        one.busy,
        many.accepted,
        many.elapsed,
        many.per_second()
    );
    assert!(one.errors.is_empty() && many.errors.is_empty(), "{:?} {:?}", one.errors, many.errors);
    assert_eq!(many.accepted, orders, "with 100 products no order waits long");
    // One product: the orders' holds never overlap, so the run lasts at least their sum.
    let holds = HOLD * u32::try_from(one.accepted).unwrap();
    assert!(one.elapsed >= holds, "serialised: {:?} >= {holds:?}", one.elapsed);
    // 100 products: the holds overlap, so the run is shorter than their sum (serialised, it
    // could not be). How much faster than one product is a throughput figure, not a test's.
    let holds = HOLD * u32::try_from(many.accepted).unwrap();
    assert!(many.elapsed < holds, "not serialised: {:?} < {holds:?}", many.elapsed);
}

#[test]
fn the_examples_redis_is_reachable_and_a_private_one_stops_on_drop() {
    let redis = Redis::start_quiet().expect("REDIS_URL or redis-server on PATH");
    let mut con = lock_core::redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    let pong: String = lock_core::redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    drop(con);
    match redis.source().clone() {
        RedisSource::Private { pid } => {
            assert!(redis.to_string().contains("private redis-server"), "{redis}");
            let proc = format!("/proc/{pid}");
            assert!(std::path::Path::new(&proc).exists());
            drop(redis);
            // Killed and reaped by the drop: the process is gone.
            assert!(!std::path::Path::new(&proc).exists(), "redis-server {pid} still runs");
        }
        RedisSource::Env => assert!(redis.to_string().ends_with("from REDIS_URL"), "{redis}"),
        other => panic!("unexpected source {other:?}"),
    }
}
