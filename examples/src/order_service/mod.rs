//! The order service: the classic "last items in stock" problem, solved with a per-product
//! distributed lock and a fencing token checked by the database.
//!
//! Every replica runs an [`OrderService`] with its own [`LockClient`] (its own Redis pool) and
//! its own connection to the shared [`Inventory`]. An order for product 42 takes
//! `lock:product:42`, so orders for the same product are serialised across all replicas while
//! orders for different products run in parallel; the lock's fencing token goes into the
//! write, so a holder that stalled past its lease cannot overwrite a newer holder's work.
//!
//! The variants of [`OrderService::place_order`] differ only in their lock:
//!
//! | method | lock |
//! |---|---|
//! | [`place_order`](OrderService::place_order) | fail fast: a busy product is [`OrderError::Busy`] at once |
//! | [`place_order_waiting`](OrderService::place_order_waiting) | waits up to 1 s for the product |
//! | [`place_order_unlocked`](OrderService::place_order_unlocked) | none: shows the oversell |
//! | [`place_order_stalling`](OrderService::place_order_stalling) | short fixed lease, `on_lost = "continue"`, stalls mid-order |
//!
//! [`scenarios`] runs them the way the example and its tests do.

mod inventory;
pub mod scenarios;

use std::future::Future;
use std::time::Duration;

use lock_core::{LockClient, LockError, distributed_lock};

pub use inventory::{FENCED_SELL, Inventory, ProductRow, SCHEMA, Sale, UNFENCED_OVERWRITE};

/// The fixed lease of [`OrderService::place_order_stalling`]: the lock expires this long after
/// it was taken, whatever the holder is doing.
pub const STALLING_LEASE: Duration = Duration::from_millis(300);

/// A customer's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// What to buy.
    pub product_id: u32,
    /// How many (at least 1).
    pub qty: u32,
}

impl Order {
    /// An order for `qty` items of `product_id`.
    pub fn new(product_id: u32, qty: u32) -> Order {
        Order { product_id, qty }
    }
}

/// An accepted order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Its row in the `orders` table.
    pub order_id: i64,
    /// The order.
    pub order: Order,
    /// Stock left right after this order.
    pub remaining: i64,
    /// The fencing token the write was accepted with; `None` for an unlocked order.
    pub fence: Option<u64>,
    /// The replica that took the order.
    pub instance: String,
}

/// Why an order was not accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OrderError {
    /// Another order holds the product's lock (fail fast), or held it for the whole wait.
    #[error("product is being processed, try again ({reason})")]
    Busy {
        /// The lock's key, e.g. `lock:product:42`.
        key: String,
        /// "held by another order" or "still held after waiting 1s".
        reason: String,
    },
    /// Not enough stock.
    #[error("product {product_id} is out of stock: {requested} requested, {available} available")]
    OutOfStock {
        /// The product.
        product_id: u32,
        /// Items ordered.
        requested: u32,
        /// Items left.
        available: i64,
    },
    /// The store rejected the write because a newer lock holder has written since this one
    /// took its lock: this holder's lock had expired (it stalled past its lease).
    #[error(
        "write for product {product_id} rejected: fencing token {fence} is not newer than {last_fence}, \
         the last one the store accepted; this holder had lost its lock"
    )]
    StaleFence {
        /// The product.
        product_id: u32,
        /// This writer's fencing token.
        fence: i64,
        /// The newest token the store accepted.
        last_fence: i64,
    },
    /// No such product.
    #[error("there is no product {0}")]
    UnknownProduct(u32),
    /// An order for zero items.
    #[error("an order must be for at least one item")]
    EmptyOrder,
    /// The lock failed otherwise: Redis unreachable, lock lost mid-order, bad configuration.
    #[error(transparent)]
    Lock(LockError),
    /// The locked section ran without a fencing token (a bug in this example).
    #[error("the order ran without a fencing token")]
    MissingFence,
    /// A fencing token too large for an SQLite integer.
    #[error("fencing token {0} does not fit the store's 64-bit signed integer")]
    FenceOutOfRange(u64),
    /// The database failed.
    #[error("inventory database error: {0}")]
    Store(#[from] rusqlite::Error),
    /// A database call on the blocking pool panicked or was cancelled.
    #[error("inventory database task failed: {0}")]
    StoreTask(#[from] tokio::task::JoinError),
}

impl From<LockError> for OrderError {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Held { key, .. } => OrderError::Busy { key, reason: "held by another order".into() },
            LockError::Timeout { key, waited } => {
                OrderError::Busy { key, reason: format!("still held after waiting {waited:?}") }
            }
            other => OrderError::Lock(other),
        }
    }
}

impl OrderError {
    /// Whether trying again later may succeed (the product was busy).
    pub fn is_busy(&self) -> bool {
        matches!(self, OrderError::Busy { .. })
    }
}

/// What [`OrderService::place_order_stalling`] knows when it stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallPoint {
    /// The fencing token of the lock it holds (or held: it is about to stall past its lease).
    pub fence: u64,
    /// The stock it read under the lock.
    pub stock: i64,
}

/// One replica of the order service.
#[derive(Debug, Clone)]
pub struct OrderService {
    locks: LockClient,
    inventory: Inventory,
    processing: Duration,
}

impl OrderService {
    /// A replica taking its locks through `locks` and writing to `inventory`. Each order holds
    /// its product for `processing` (payment, reservation...) between reading the stock and
    /// writing it: the window in which unlocked orders race.
    pub fn new(locks: LockClient, inventory: Inventory, processing: Duration) -> OrderService {
        OrderService { locks, inventory, processing }
    }

    /// This replica's instance id (in every lock token and order row).
    pub fn instance(&self) -> &str {
        self.locks.instance_id()
    }

    /// Its lock client.
    pub fn locks(&self) -> &LockClient {
        &self.locks
    }

    /// Its connection to the inventory.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// Places an order under the product's lock, failing fast with [`OrderError::Busy`]
    /// ("product is being processed, try again") if another order — on any replica — holds it.
    ///
    /// The lease is fixed at 2 s; if it ran out mid-order the order would be cancelled
    /// (`on_lost = "cancel"`, the default) and any late write would still be refused by the
    /// fence.
    // ANCHOR: place_order
    #[distributed_lock(key = "lock:product:{order.product_id}", fencing, lease = "2s", client = self.locks)]
    pub async fn place_order(&self, order: Order) -> Result<Receipt, OrderError> {
        self.sell_locked(order).await
    }
    // ANCHOR_END: place_order

    /// Like [`place_order`](Self::place_order), but waits up to 1 s for a busy product (woken
    /// the moment the holder releases) before giving up with [`OrderError::Busy`].
    #[distributed_lock(
        key = "lock:product:{order.product_id}",
        fencing,
        lease = "2s",
        wait = "1s",
        client = self.locks
    )]
    pub async fn place_order_waiting(&self, order: Order) -> Result<Receipt, OrderError> {
        self.sell_locked(order).await
    }

    /// The same order with no lock: read the stock, process, write `stock = <read> - qty`.
    /// Concurrent orders all read the same stock and all succeed: the oversell.
    pub async fn place_order_unlocked(&self, order: Order) -> Result<Receipt, OrderError> {
        let available = self.check_stock(order).await?;
        tokio::time::sleep(self.processing).await;
        let sale = self
            .inventory
            .overwrite_unfenced(
                order.product_id,
                order.qty,
                available - i64::from(order.qty),
                self.instance(),
            )
            .await?;
        Ok(self.receipt(order, sale, None))
    }

    /// An order whose holder stalls after reading the stock: takes the lock with a fixed
    /// [`STALLING_LEASE`], reads the stock, runs `stall` (a GC pause, a stopped VM, a slow
    /// disk...), then writes with its fencing token.
    ///
    /// `on_lost = "continue"`: the body is *not* cancelled when its lease runs out during the
    /// stall, just like a process that was frozen cannot notice anything. If another replica
    /// took the lock meanwhile (with a higher fence) and wrote, the store rejects this write
    /// with [`OrderError::StaleFence`]: the fence stops even a holder that never learns it
    /// lost its lock.
    #[distributed_lock(
        key = "lock:product:{order.product_id}",
        fencing,
        lease = "300ms",
        on_lost = "continue",
        client = self.locks
    )]
    pub async fn place_order_stalling<S, F>(&self, order: Order, stall: S) -> Result<Receipt, OrderError>
    where
        S: FnOnce(StallPoint) -> F + Send,
        F: Future<Output = ()> + Send,
    {
        let fence = current_fence()?;
        let stock = self.check_stock(order).await?;
        stall(StallPoint { fence, stock }).await;
        let sale = self.inventory.sell_fenced(order.product_id, order.qty, fence, self.instance()).await?;
        Ok(self.receipt(order, sale, Some(fence)))
    }

    // ANCHOR: sell_locked
    /// The body of the locked variants: read, process, fenced write.
    async fn sell_locked(&self, order: Order) -> Result<Receipt, OrderError> {
        let fence = current_fence()?;
        self.check_stock(order).await?;
        tokio::time::sleep(self.processing).await;
        let sale = self.inventory.sell_fenced(order.product_id, order.qty, fence, self.instance()).await?;
        Ok(self.receipt(order, sale, Some(fence)))
    }
    // ANCHOR_END: sell_locked

    /// Reads the stock and rejects the order early if there is not enough; returns the stock.
    async fn check_stock(&self, order: Order) -> Result<i64, OrderError> {
        if order.qty == 0 {
            return Err(OrderError::EmptyOrder);
        }
        let row = self.inventory.product(order.product_id).await?;
        let available = row.ok_or(OrderError::UnknownProduct(order.product_id))?.stock;
        if available < i64::from(order.qty) {
            return Err(OrderError::OutOfStock {
                product_id: order.product_id,
                requested: order.qty,
                available,
            });
        }
        Ok(available)
    }

    fn receipt(&self, order: Order, sale: Sale, fence: Option<u64>) -> Receipt {
        Receipt {
            order_id: sale.order_id,
            order,
            remaining: sale.remaining,
            fence,
            instance: self.instance().to_owned(),
        }
    }
}

/// The fencing token of the lock the current locked section holds.
fn current_fence() -> Result<u64, OrderError> {
    lock_core::current().and_then(|lock| lock.fence()).ok_or(OrderError::MissingFence)
}
