//! The scenarios of `examples/order_service`, as functions: the example prints their reports,
//! the tests assert on them.
//!
//! - [`rush`]: many concurrent orders for the last items, spread over the replicas, with or
//!   without the lock.
//! - [`stalled_holder`]: a holder stalls past its lease, another replica takes over with a
//!   higher fence, and the store rejects the stalled holder's late write.
//! - [`throughput`]: orders spread over 1 product vs many, to show that locks on different
//!   products don't serialise each other.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use lock_core::LockClient;
use tokio::sync::{Barrier, Notify};

use super::{Inventory, Order, OrderError, OrderService, ProductRow, Receipt, STALLING_LEASE, StallPoint};

/// How long any step of a scenario may take before it is reported as stuck.
const STEP_BOUND: Duration = Duration::from_secs(5);

/// Connects `count` replicas named `pod-1`, `pod-2`, ...: each with its own [`LockClient`]
/// (its own Redis pool and pub/sub connection) and its own connection to the SQLite file at
/// `db`, as separate pods would have.
pub fn connect_replicas(
    redis_url: &str,
    db: &Path,
    count: usize,
    processing: Duration,
) -> anyhow::Result<Vec<OrderService>> {
    ensure!(count > 0, "at least one replica is needed");
    (1..=count)
        .map(|i| {
            let locks = LockClient::builder()
                .url(redis_url)
                .instance_id(format!("pod-{i}"))
                .build()
                .context("building the lock client")?;
            let inventory = Inventory::open(db).with_context(|| format!("opening {}", db.display()))?;
            Ok(OrderService::new(locks, inventory, processing))
        })
        .collect()
}

/// Whether the orders of a [`rush`] take the product's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// [`OrderService::place_order_waiting`]: lock, fencing, wait up to 1 s.
    Locked,
    /// [`OrderService::place_order_unlocked`]: read, process, overwrite.
    Unlocked,
}

/// What a [`rush`] did.
#[derive(Debug)]
pub struct RushReport {
    /// With or without the lock.
    pub locking: Locking,
    /// The product.
    pub product_id: u32,
    /// Stock before the rush.
    pub initial_stock: i64,
    /// Orders fired.
    pub orders: usize,
    /// Accepted orders.
    pub accepted: Vec<Receipt>,
    /// Orders turned away for lack of stock.
    pub out_of_stock: usize,
    /// Orders turned away because the product stayed busy for the whole wait.
    pub busy: usize,
    /// Any other failure, as text.
    pub errors: Vec<String>,
    /// The product's row after the rush.
    pub final_row: ProductRow,
    /// Items sold according to the store's `orders` table.
    pub sold_in_store: i64,
    /// Wall time of the rush.
    pub elapsed: Duration,
}

impl RushReport {
    /// Items sold according to the accepted orders.
    pub fn sold(&self) -> i64 {
        self.accepted.iter().map(|r| i64::from(r.order.qty)).sum()
    }

    /// Items promised to customers that did not exist.
    pub fn oversold(&self) -> i64 {
        (self.sold() - self.initial_stock).max(0)
    }

    /// The lowest stock written by any accepted order, and the final stock.
    pub fn lowest_stock(&self) -> i64 {
        self.accepted.iter().map(|r| r.remaining).fold(self.final_row.stock, i64::min)
    }

    /// Accepted orders per replica.
    pub fn accepted_by_replica(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for receipt in &self.accepted {
            *by.entry(receipt.instance.clone()).or_default() += 1;
        }
        by
    }
}

/// Sets `product_id`'s stock to `stock`, then fires `orders` single-item orders for it at the
/// same instant, round-robin over `replicas`, and reports what happened.
pub async fn rush(
    replicas: &[OrderService],
    product_id: u32,
    stock: i64,
    orders: usize,
    locking: Locking,
) -> anyhow::Result<RushReport> {
    let first = replicas.first().context("at least one replica is needed")?;
    first.inventory().restock(product_id, stock).await?;
    let start = Arc::new(Barrier::new(orders));
    let started = Instant::now();
    let tasks: Vec<_> = (0..orders)
        .map(|i| {
            let service = replicas[i % replicas.len()].clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let order = Order::new(product_id, 1);
                match locking {
                    Locking::Locked => service.place_order_waiting(order).await,
                    Locking::Unlocked => service.place_order_unlocked(order).await,
                }
            })
        })
        .collect();
    let mut report = RushReport {
        locking,
        product_id,
        initial_stock: stock,
        orders,
        accepted: Vec::new(),
        out_of_stock: 0,
        busy: 0,
        errors: Vec::new(),
        final_row: ProductRow { stock: 0, last_fence: 0 },
        sold_in_store: 0,
        elapsed: Duration::ZERO,
    };
    for task in tasks {
        match tokio::time::timeout(STEP_BOUND, task).await.context("an order got stuck")?? {
            Ok(receipt) => report.accepted.push(receipt),
            Err(OrderError::OutOfStock { .. }) => report.out_of_stock += 1,
            Err(e) if e.is_busy() => report.busy += 1,
            Err(e) => report.errors.push(e.to_string()),
        }
    }
    report.elapsed = started.elapsed();
    report.final_row = first.inventory().product(product_id).await?.context("the product vanished")?;
    report.sold_in_store = first.inventory().sold(product_id).await?;
    Ok(report)
}

/// One step of [`stalled_holder`], reported as it happens.
#[derive(Debug)]
pub enum StallStep {
    /// The holder took the lock, read the stock, and now stalls.
    HolderStalls {
        /// The holder.
        instance: String,
        /// Its fencing token.
        fence: u64,
        /// The stock it read.
        stock: i64,
        /// Its fixed lease.
        lease: Duration,
    },
    /// Another replica's fail-fast order was turned away while the lock was held.
    FailFast {
        /// That replica.
        instance: String,
        /// The error it got.
        error: String,
    },
    /// That replica now waits for the lock.
    Waiting {
        /// That replica.
        instance: String,
    },
    /// It got the lock when the holder's lease ran out, and its write was accepted.
    TookOver {
        /// Its accepted order (with its fence).
        receipt: Receipt,
    },
    /// The stalled holder resumes.
    HolderWakes {
        /// The holder.
        instance: String,
        /// Whether it still believes it holds the lock (`is_held()`).
        still_held: bool,
    },
    /// The stalled holder's write, as the store answered it.
    HolderWrite {
        /// The holder.
        instance: String,
        /// The fencing token it wrote with (`None` if it never got the lock).
        fence: Option<u64>,
        /// Its receipt, or the store's rejection as text.
        result: Result<Receipt, String>,
    },
}

/// What [`stalled_holder`] did.
#[derive(Debug)]
pub struct StallReport {
    /// The product.
    pub product_id: u32,
    /// Stock before.
    pub initial_stock: i64,
    /// The stalled holder's fencing token.
    pub holder_fence: u64,
    /// What the other replica's fail-fast order got while the lock was held.
    pub fail_fast: Result<Receipt, OrderError>,
    /// The other replica's order, placed (with waiting) once the lease ran out.
    pub taker: Receipt,
    /// Whether the holder still believed it held the lock after its stall.
    pub holder_still_held: bool,
    /// The stalled holder's order.
    pub holder_result: Result<Receipt, OrderError>,
    /// The product's row afterwards.
    pub final_row: ProductRow,
    /// Items sold according to the store.
    pub sold_in_store: i64,
}

/// The stalled-holder scenario, with `holder` and `other` two replicas:
///
/// 1. `holder` takes `lock:product:<id>` with a fixed lease of [`STALLING_LEASE`] and fencing
///    token *f*, reads the stock, and stalls (`on_lost = "continue"`: nothing cancels it);
/// 2. `other`'s fail-fast order is turned away ("product is being processed, try again");
/// 3. `other` waits for the lock, gets it when the lease runs out with token *f + 1*, and
///    writes; the store records `last_fence = f + 1`;
/// 4. `holder` wakes (it is frozen until step 3 is done, so it always wakes after it) and
///    writes with *f*: the store's `last_fence < :fence` condition refuses it.
///
/// `on_step` is called with each step and the time since the start.
pub async fn stalled_holder(
    holder: &OrderService,
    other: &OrderService,
    product_id: u32,
    stock: i64,
    on_step: &(dyn Fn(Duration, StallStep) + Sync),
) -> anyhow::Result<StallReport> {
    holder.inventory().restock(product_id, stock).await?;
    let started = Instant::now();
    let step = |s: StallStep| on_step(started.elapsed(), s);
    // Shared by both sides; the inner `async move` blocks copy these references.
    let (acquired, written) = (Notify::new(), Notify::new());
    let (holder_fence, still_held) = (OnceLock::new(), OnceLock::new());
    let (acquired, written, holder_fence, still_held) = (&acquired, &written, &holder_fence, &still_held);

    let holder_side = async {
        let result = holder
            .place_order_stalling(Order::new(product_id, 1), move |at: StallPoint| async move {
                let _ = holder_fence.set(at.fence);
                step(StallStep::HolderStalls {
                    instance: holder.instance().to_owned(),
                    fence: at.fence,
                    stock: at.stock,
                    lease: STALLING_LEASE,
                });
                acquired.notify_one();
                // The stall: frozen until the other replica has taken over and written. That
                // can only happen after this holder's lease ran out.
                let _ = tokio::time::timeout(STEP_BOUND, written.notified()).await;
                let held = lock_core::current().is_some_and(|lock| lock.is_held());
                let _ = still_held.set(held);
                step(StallStep::HolderWakes { instance: holder.instance().to_owned(), still_held: held });
            })
            .await;
        // If the holder never got as far as stalling, don't leave the other side waiting.
        acquired.notify_one();
        result
    };

    let other_side = async {
        let result = async {
            if tokio::time::timeout(STEP_BOUND, acquired.notified()).await.is_err() {
                bail!("the holder did not take the lock within {STEP_BOUND:?}");
            }
            let order = Order::new(product_id, 1);
            let fail_fast = other.place_order(order).await;
            step(StallStep::FailFast {
                instance: other.instance().to_owned(),
                error: match &fail_fast {
                    Ok(_) => "none: the order went through".to_owned(),
                    Err(e) => e.to_string(),
                },
            });
            step(StallStep::Waiting { instance: other.instance().to_owned() });
            let taker = other.place_order_waiting(order).await.context("the other replica's order failed")?;
            step(StallStep::TookOver { receipt: taker.clone() });
            Ok((fail_fast, taker))
        }
        .await;
        written.notify_one();
        result
    };

    let (holder_result, other_result) = tokio::join!(holder_side, other_side);
    step(StallStep::HolderWrite {
        instance: holder.instance().to_owned(),
        fence: holder_fence.get().copied(),
        result: holder_result.as_ref().cloned().map_err(|e| e.to_string()),
    });
    let (fail_fast, taker) = other_result?;
    let holder_fence = *holder_fence.get().context("the holder never took the lock")?;
    Ok(StallReport {
        product_id,
        initial_stock: stock,
        holder_fence,
        fail_fast,
        taker,
        holder_still_held: still_held.get().copied().unwrap_or(true),
        holder_result,
        final_row: holder.inventory().product(product_id).await?.context("the product vanished")?,
        sold_in_store: holder.inventory().sold(product_id).await?,
    })
}

/// What a [`throughput`] run measured.
#[derive(Debug)]
pub struct ThroughputReport {
    /// Products the orders were spread over.
    pub products: u32,
    /// Orders placed.
    pub orders: usize,
    /// Orders in flight at once.
    pub concurrency: usize,
    /// Accepted orders.
    pub accepted: usize,
    /// Orders that found their product busy for the whole wait.
    pub busy: usize,
    /// Other failures, as text.
    pub errors: Vec<String>,
    /// Accepted orders per replica.
    pub accepted_by_replica: BTreeMap<String, usize>,
    /// Wall time.
    pub elapsed: Duration,
}

impl ThroughputReport {
    /// Accepted orders per second.
    pub fn per_second(&self) -> f64 {
        self.accepted as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Places `orders` single-item orders (waiting variant) from `concurrency` workers spread over
/// `replicas`, order *i* for product `first_product + i % products`, with stock enough for all.
pub async fn throughput(
    replicas: &[OrderService],
    first_product: u32,
    products: u32,
    orders: usize,
    concurrency: usize,
) -> anyhow::Result<ThroughputReport> {
    let first = replicas.first().context("at least one replica is needed")?;
    ensure!(products > 0 && concurrency > 0, "products and concurrency must be at least 1");
    let stock = i64::try_from(orders)?;
    first.inventory().restock_many((0..products).map(|p| (first_product + p, stock)).collect()).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let service = replicas[w % replicas.len()].clone();
            let next = next.clone();
            tokio::spawn(async move {
                let (mut accepted, mut busy, mut errors) = (0, 0, Vec::new());
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= orders {
                        break;
                    }
                    // `i % products` < products, a u32.
                    let product = first_product + u32::try_from(i % products as usize).unwrap_or(0);
                    match service.place_order_waiting(Order::new(product, 1)).await {
                        Ok(_) => accepted += 1,
                        Err(e) if e.is_busy() => busy += 1,
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (service.instance().to_owned(), accepted, busy, errors)
            })
        })
        .collect();
    let mut report = ThroughputReport {
        products,
        orders,
        concurrency,
        accepted: 0,
        busy: 0,
        errors: Vec::new(),
        accepted_by_replica: BTreeMap::new(),
        elapsed: Duration::ZERO,
    };
    for worker in workers {
        let (instance, accepted, busy, errors) = worker.await?;
        *report.accepted_by_replica.entry(instance).or_default() += accepted;
        report.accepted += accepted;
        report.busy += busy;
        report.errors.extend(errors);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
