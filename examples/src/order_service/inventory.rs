//! The inventory: a real SQL store (an SQLite file) that every replica opens with its own
//! connection, and the fenced write that makes a stalled lock holder harmless.
//!
//! SQLite stands in for the service's database. Each [`Inventory`] is one connection (one per
//! replica, like one pool per pod); calls run on tokio's blocking pool so a busy database never
//! stalls the async workers. The file uses WAL, so readers don't block the writer, and a busy
//! timeout, so concurrent writers queue instead of failing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, named_params, params};

use super::OrderError;

/// The tables. `last_fence` is the highest fencing token a write for the product was accepted
/// with; the fenced update only goes through with a strictly higher one.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS inventory (
    product_id INTEGER PRIMARY KEY,
    stock      INTEGER NOT NULL,
    last_fence INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS orders (
    order_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    product_id INTEGER NOT NULL,
    qty        INTEGER NOT NULL,
    instance   TEXT    NOT NULL,
    fence      INTEGER            -- NULL: written without a lock
);";

/// The write of a locked order, exactly as the store runs it: decrement only if this writer's
/// fence is newer than every fence accepted so far, and only if there is enough stock.
pub const FENCED_SELL: &str = "UPDATE inventory SET stock = stock - :qty, last_fence = :fence \
     WHERE product_id = :id AND last_fence < :fence AND stock >= :qty RETURNING stock";

/// The write of an unlocked order: the classic read-modify-write, `stock = <value read> - qty`.
pub const UNFENCED_OVERWRITE: &str = "UPDATE inventory SET stock = :stock WHERE product_id = :id";

/// How long a write waits for another connection's write to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A product's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProductRow {
    /// Items left.
    pub stock: i64,
    /// Highest fencing token a write was accepted with (0: none yet).
    pub last_fence: i64,
}

/// What a successful sale wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sale {
    /// The new row's id in `orders`.
    pub order_id: i64,
    /// Stock left after this sale.
    pub remaining: i64,
}

/// One connection to the shared inventory database. Cheap to clone (clones share the
/// connection); open one per replica.
#[derive(Debug, Clone)]
pub struct Inventory {
    conn: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
}

impl Inventory {
    /// Opens (creating if needed) the database at `path`: WAL, a 5 s busy timeout, the schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Inventory, OrderError> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // `PRAGMA journal_mode` answers with the mode now in force.
        let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        // With WAL, NORMAL stays consistent after a crash and skips an fsync per commit.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Inventory { conn: Arc::new(Mutex::new(conn)), path: Arc::new(path) })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection on the blocking pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T, OrderError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, OrderError> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            // A panic inside `f` leaves no half-done transaction behind (it rolls back on drop),
            // so a poisoned connection is still usable.
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut conn)
        })
        .await?
    }

    /// Scenario setup: starts a product afresh with `stock` items, no orders and `last_fence`
    /// 0, so that a reused database (`--db`) works with a fresh Redis whose fence counters
    /// start again at 1.
    ///
    /// Never do this to a product that may have orders in flight: a store must only ever raise
    /// `last_fence`, and a fence counter that went backwards (a Redis that lost its data) is
    /// exactly what the fenced write then refuses, safely, until the counter catches up.
    pub async fn restock(&self, product_id: u32, stock: i64) -> Result<(), OrderError> {
        self.restock_many(vec![(product_id, stock)]).await
    }

    /// [`restock`](Self::restock) for several products in one transaction.
    pub async fn restock_many(&self, products: Vec<(u32, i64)>) -> Result<(), OrderError> {
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (id, stock) in products {
                tx.execute(
                    "INSERT INTO inventory (product_id, stock) VALUES (?1, ?2)
                     ON CONFLICT (product_id) DO UPDATE SET stock = excluded.stock, last_fence = 0",
                    params![id, stock],
                )?;
                tx.execute("DELETE FROM orders WHERE product_id = ?1", params![id])?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// A product's row, `None` if there is no such product.
    pub async fn product(&self, product_id: u32) -> Result<Option<ProductRow>, OrderError> {
        self.with_conn(move |conn| Ok(read_product(conn, product_id)?)).await
    }

    /// Items of a product sold, as the `orders` table records them.
    pub async fn sold(&self, product_id: u32) -> Result<i64, OrderError> {
        self.with_conn(move |conn| {
            Ok(conn.query_row(
                "SELECT COALESCE(SUM(qty), 0) FROM orders WHERE product_id = ?1",
                params![product_id],
                |row| row.get(0),
            )?)
        })
        .await
    }

    /// The fenced sale ([`FENCED_SELL`]) and its order row, in one transaction.
    ///
    /// Zero rows updated is never ignored: it is reported as [`OrderError::StaleFence`] (a newer
    /// lock holder has written since this one took its lock), [`OrderError::OutOfStock`] or
    /// [`OrderError::UnknownProduct`], checked in that order.
    pub async fn sell_fenced(
        &self,
        product_id: u32,
        qty: u32,
        fence: u64,
        instance: &str,
    ) -> Result<Sale, OrderError> {
        let fence = i64::try_from(fence).map_err(|_| OrderError::FenceOutOfRange(fence))?;
        let instance = instance.to_owned();
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let remaining: Option<i64> = tx
                .query_row(
                    FENCED_SELL,
                    named_params! { ":qty": qty, ":fence": fence, ":id": product_id },
                    |row| row.get(0),
                )
                .optional()?;
            let Some(remaining) = remaining else {
                // Nothing written: say why. The transaction is dropped, i.e. rolled back.
                return Err(match read_product(&tx, product_id)? {
                    None => OrderError::UnknownProduct(product_id),
                    Some(row) if row.last_fence >= fence => {
                        OrderError::StaleFence { product_id, fence, last_fence: row.last_fence }
                    }
                    Some(row) => OrderError::OutOfStock { product_id, requested: qty, available: row.stock },
                });
            };
            tx.execute(
                "INSERT INTO orders (product_id, qty, instance, fence) VALUES (?1, ?2, ?3, ?4)",
                params![product_id, qty, instance, fence],
            )?;
            let order_id = tx.last_insert_rowid();
            tx.commit()?;
            Ok(Sale { order_id, remaining })
        })
        .await
    }

    /// The unlocked write ([`UNFENCED_OVERWRITE`]): sets the stock to `new_stock`, computed by
    /// the caller from an earlier read, and records the order. No lock, no fence, no condition:
    /// this is the bug the lock fixes.
    pub async fn overwrite_unfenced(
        &self,
        product_id: u32,
        qty: u32,
        new_stock: i64,
        instance: &str,
    ) -> Result<Sale, OrderError> {
        let instance = instance.to_owned();
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let updated =
                tx.execute(UNFENCED_OVERWRITE, named_params! { ":stock": new_stock, ":id": product_id })?;
            if updated == 0 {
                return Err(OrderError::UnknownProduct(product_id));
            }
            tx.execute(
                "INSERT INTO orders (product_id, qty, instance, fence) VALUES (?1, ?2, ?3, NULL)",
                params![product_id, qty, instance],
            )?;
            let order_id = tx.last_insert_rowid();
            tx.commit()?;
            Ok(Sale { order_id, remaining: new_stock })
        })
        .await
    }
}

fn read_product(conn: &Connection, product_id: u32) -> rusqlite::Result<Option<ProductRow>> {
    conn.query_row(
        "SELECT stock, last_fence FROM inventory WHERE product_id = ?1",
        params![product_id],
        |row| Ok(ProductRow { stock: row.get(0)?, last_fence: row.get(1)? }),
    )
    .optional()
}
