//! `order_service`: the "last items in stock" problem across replicas, solved with a
//! per-product distributed lock and a fencing token the database checks.
//!
//! ```text
//! cargo run -p examples --example order_service                   # every scenario, a few seconds
//! cargo run -p examples --example order_service -- rush           # the last items, with the lock
//! cargo run -p examples --example order_service -- --no-lock      # the same without it: oversold
//! cargo run -p examples --example order_service -- stalled-holder # why the fencing token matters
//! cargo run -p examples --example order_service -- throughput     # 1 product vs 100 products
//! ```
//!
//! Options: `--replicas N` (4), `--stock N` (5), `--orders N` (40), `--hold MS` (5: the time an
//! order spends between reading and writing the stock), `--db PATH` (an SQLite file to use
//! instead of a temporary one). Redis: `REDIS_URL`, else a private `redis-server` from PATH.
//!
//! The replicas run in this process, each with its own lock client (its own Redis connections)
//! and its own connection to the shared SQLite file: to Redis and to the database they are as
//! separate as pods. The service itself is `examples::order_service`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use examples::order_service::scenarios::{
    self, Locking, RushReport, StallReport, StallStep, ThroughputReport, connect_replicas,
};
use examples::order_service::{OrderService, STALLING_LEASE};
use redis_fixture::Redis;

/// Products used by each scenario, so that they don't disturb each other.
const RUSH_PRODUCT: u32 = 1;
const NO_LOCK_PRODUCT: u32 = 2;
const STALL_PRODUCT: u32 = 3;
const ONE_PRODUCT: u32 = 100;
const MANY_PRODUCTS_FIRST: u32 = 1000;
const MANY_PRODUCTS: u32 = 100;
/// The throughput runs: orders placed and orders in flight at once.
const THROUGHPUT_ORDERS: usize = 160;
const THROUGHPUT_CONCURRENCY: usize = 16;

/// The "last items in stock" problem across replicas, solved with a per-product distributed
/// lock and a fencing token the database checks.
#[derive(Debug, Parser)]
#[command(
    name = "order_service",
    after_help = "Redis: REDIS_URL if set, else a private redis-server started from PATH."
)]
struct Cli {
    /// the scenario to run (default: all)
    #[arg(value_enum, value_name = "SCENARIO")]
    scenario: Option<ScenarioName>,
    /// the rush without the lock: the oversell (`--no-lock` alone means `rush --no-lock`)
    #[arg(long)]
    no_lock: bool,
    /// replicas taking orders
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=64)
    )]
    replicas: usize,
    /// items in stock before the rush
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        value_parser = clap::value_parser!(i64).range(0..=1_000_000)
    )]
    stock: i64,
    /// orders in the rush
    #[arg(
        long,
        value_name = "N",
        default_value_t = 40,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=10_000)
    )]
    orders: usize,
    /// ms an order spends between reading and writing the stock
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(0..=500)
    )]
    hold: u64,
    /// SQLite file for the inventory (default: a temporary file)
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
}

/// The scenarios, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ScenarioName {
    /// every scenario below (the default)
    All,
    /// ORDERS concurrent orders for the last STOCK items, with the lock (with `--no-lock`: the
    /// same without the lock, the oversell)
    Rush,
    /// a holder stalls past its lease; the store rejects its late write
    StalledHolder,
    /// orders spread over 1 product vs 100 products
    Throughput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    All,
    Rush(Locking),
    StalledHolder,
    Throughput,
}

#[derive(Debug)]
struct Args {
    scenario: Scenario,
    replicas: usize,
    stock: i64,
    orders: usize,
    hold: Duration,
    db: Option<PathBuf>,
}

impl Args {
    /// Parses the command line; on bad usage (and for `--help`), prints clap's message and
    /// exits (2 for bad usage).
    fn parse() -> Args {
        let cli = Cli::parse();
        let scenario = match (cli.scenario, cli.no_lock) {
            (None | Some(ScenarioName::All), false) => Scenario::All,
            (None | Some(ScenarioName::Rush), true) => Scenario::Rush(Locking::Unlocked),
            (Some(ScenarioName::Rush), false) => Scenario::Rush(Locking::Locked),
            (Some(ScenarioName::StalledHolder), false) => Scenario::StalledHolder,
            (Some(ScenarioName::Throughput), false) => Scenario::Throughput,
            (Some(other), true) => {
                let name = other.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
                Cli::command()
                    .error(
                        ErrorKind::ArgumentConflict,
                        format!("`--no-lock` applies to the rush scenario, not to `{name}`"),
                    )
                    .exit()
            }
        };
        Args {
            scenario,
            replicas: cli.replicas,
            stock: cli.stock,
            orders: cli.orders,
            hold: Duration::from_millis(cli.hold),
            db: cli.db,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // Bad usage: clap's message and exit code 2.
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", lock_core::ErrorChain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Library logs (lock lost, release failures) only when asked for: RUST_LOG=info.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    // Colours only on a terminal, not in a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();

    let redis = Redis::start()?;
    let temp;
    let db = match &args.db {
        Some(path) => path.clone(),
        None => {
            temp =
                tempfile::TempDir::with_prefix("order-service-").context("creating a temporary directory")?;
            temp.path().join("inventory.db")
        }
    };
    let replicas = connect_replicas(redis.url(), &db, args.replicas, args.hold)?;
    println!("Inventory: SQLite file {}", db.display());
    println!(
        "Replicas: {} (pod-1..pod-{}), each with its own lock client and database connection",
        replicas.len(),
        replicas.len()
    );

    match args.scenario {
        Scenario::All => {
            rush(&replicas, &args, Locking::Locked).await?;
            rush(&replicas, &args, Locking::Unlocked).await?;
            stalled_holder(&replicas).await?;
            throughput(&replicas).await?;
        }
        Scenario::Rush(locking) => rush(&replicas, &args, locking).await?,
        Scenario::StalledHolder => stalled_holder(&replicas).await?,
        Scenario::Throughput => throughput(&replicas).await?,
    }
    Ok(())
}

async fn rush(replicas: &[OrderService], args: &Args, locking: Locking) -> anyhow::Result<()> {
    let (product, title) = match locking {
        Locking::Locked => (RUSH_PRODUCT, "with the lock"),
        Locking::Unlocked => (NO_LOCK_PRODUCT, "WITHOUT the lock (--no-lock)"),
    };
    println!("\n== Rush for the last items, {title} ==");
    println!(
        "{} customers order 1 item of product {product} ({} in stock) at the same instant, through {} replicas.",
        args.orders,
        args.stock,
        replicas.len()
    );
    let hold = args.hold.as_millis();
    match locking {
        Locking::Locked => println!(
            "Each order: take lock:product:{product} (fencing, wait up to 1 s) -> read stock -> {hold} ms of \
             processing ->\n  UPDATE inventory SET stock = stock - 1, last_fence = <fence>\n  \
             WHERE product_id = {product} AND last_fence < <fence> AND stock >= 1"
        ),
        Locking::Unlocked => println!(
            "Each order: read stock -> {hold} ms of processing -> \
             UPDATE inventory SET stock = <stock read> - 1 (no lock, no fence)"
        ),
    }
    let report = scenarios::rush(replicas, product, args.stock, args.orders, locking).await?;
    print_rush(&report);
    Ok(())
}

fn print_rush(r: &RushReport) {
    let by_replica: Vec<String> =
        r.accepted_by_replica().iter().map(|(pod, n)| format!("{pod}: {n}")).collect();
    println!("  accepted      {:>4}   ({})", r.accepted.len(), by_replica.join(", "));
    println!("  out of stock  {:>4}", r.out_of_stock);
    if r.busy > 0 {
        println!("  still busy    {:>4}   (product busy for the whole 1 s wait)", r.busy);
    }
    for e in &r.errors {
        println!("  failed: {e}");
    }
    println!(
        "  final stock   {:>4}   (the orders table records {} sold; lowest stock written: {})",
        r.final_row.stock,
        r.sold_in_store,
        r.lowest_stock()
    );
    println!("  took {} ms", r.elapsed.as_millis());
    if r.oversold() > 0 {
        println!(
            "  => OVERSOLD by {}: {} orders accepted for {} items. The orders read the same stock during the \
             read-to-write\n     window and each wrote <read> - 1 over the others' writes (lost updates).",
            r.oversold(),
            r.sold(),
            r.initial_stock,
        );
    } else if r.sold() == r.initial_stock && r.lowest_stock() >= 0 {
        println!(
            "  => OK: exactly the {} items in stock were sold, and the stock never went below zero.",
            r.initial_stock
        );
    } else {
        println!("  => {} of {} items sold.", r.sold(), r.initial_stock);
    }
}

async fn stalled_holder(replicas: &[OrderService]) -> anyhow::Result<()> {
    let (holder, other) = match replicas {
        [holder, other, ..] => (holder, other),
        [only] => (only, only),
        [] => bail!("no replicas"),
    };
    let stock = 3;
    println!("\n== A stalled holder, stopped by the fencing token ==");
    println!(
        "{} orders product {STALL_PRODUCT} under lock:product:{STALL_PRODUCT} with a fixed lease of {} ms and \
         `on_lost = \"continue\"`,\nthen freezes (a GC pause, a stopped VM, a slow disk) before writing.",
        holder.instance(),
        STALLING_LEASE.as_millis()
    );
    let report = scenarios::stalled_holder(holder, other, STALL_PRODUCT, stock, &print_stall_step).await?;
    print_stall_summary(&report);
    Ok(())
}

fn print_stall_step(at: Duration, step: StallStep) {
    let t = format!("+{:>3} ms", at.as_millis());
    let pad = " ".repeat(t.len() + 4);
    match step {
        StallStep::HolderStalls { instance, fence, stock, lease } => println!(
            "  {t}  {instance} takes the lock with fencing token {fence}, reads stock = {stock}, and stalls\n\
             {pad}(its lease ends at +{} ms; nothing will cancel it)",
            lease.as_millis()
        ),
        StallStep::FailFast { instance, error } => {
            println!("  {t}  {instance} place_order (fail fast): {error}")
        }
        StallStep::Waiting { instance } => {
            println!("  {t}  {instance} place_order_waiting: waits for the lock (up to 1 s)")
        }
        StallStep::TookOver { receipt } => {
            let fence = receipt.fence.unwrap_or_default();
            println!(
                "  {t}  the lease ran out: {} gets the lock with fencing token {fence} and writes\n\
                 {pad}accepted: stock now {}, last_fence = {fence}",
                receipt.instance, receipt.remaining
            )
        }
        StallStep::HolderWakes { instance, still_held } => println!(
            "  {t}  {instance} wakes up. Its lock is gone (is_held() = {still_held}), but a frozen process\n\
             {pad}could not notice, and this code does not check: it goes on and writes"
        ),
        StallStep::HolderWrite { instance, fence, result } => {
            let fence = fence.map_or_else(|| "?".to_owned(), |f| f.to_string());
            match result {
                Ok(receipt) => println!(
                    "  {t}  {instance} writes with fencing token {fence}: ACCEPTED (stock {}). This must not \
                     happen.",
                    receipt.remaining
                ),
                Err(error) => println!(
                    "  {t}  {instance} writes with fencing token {fence}: REJECTED by the store:\n{pad}{error}"
                ),
            }
        }
    }
}

fn print_stall_summary(r: &StallReport) {
    println!(
        "  result: stock {} -> {}, {} item sold (the orders table has {}), last_fence = {}",
        r.initial_stock, r.final_row.stock, r.taker.order.qty, r.sold_in_store, r.final_row.last_fence
    );
    if r.holder_result.is_err() {
        println!(
            "  => `last_fence < :fence` was false for token {} once the store had accepted {}. The lock alone\n     \
             could not stop the stalled holder (its lease expired while it was frozen); the fencing token,\n     \
             checked by the store itself, did.",
            r.holder_fence,
            r.taker.fence.unwrap_or_default()
        );
    }
}

async fn throughput(replicas: &[OrderService]) -> anyhow::Result<()> {
    println!("\n== Different products proceed in parallel ==");
    println!(
        "{THROUGHPUT_ORDERS} orders, {THROUGHPUT_CONCURRENCY} in flight at once across {} replicas, each \
         holding its product's lock while it works:",
        replicas.len()
    );
    let one =
        scenarios::throughput(replicas, ONE_PRODUCT, 1, THROUGHPUT_ORDERS, THROUGHPUT_CONCURRENCY).await?;
    print_throughput(&one, "every order waits for the one before it");
    let many = scenarios::throughput(
        replicas,
        MANY_PRODUCTS_FIRST,
        MANY_PRODUCTS,
        THROUGHPUT_ORDERS,
        THROUGHPUT_CONCURRENCY,
    )
    .await?;
    print_throughput(&many, "orders for different products don't wait for each other");
    println!(
        "  => {:.1}x the throughput: lock:product:{} never blocks lock:product:{}.",
        many.per_second() / one.per_second().max(f64::MIN_POSITIVE),
        MANY_PRODUCTS_FIRST,
        MANY_PRODUCTS_FIRST + 1
    );
    Ok(())
}

fn print_throughput(r: &ThroughputReport, note: &str) {
    let products = if r.products == 1 { "product: " } else { "products:" };
    let by_replica: Vec<String> =
        r.accepted_by_replica.iter().map(|(pod, n)| format!("{pod}: {n}")).collect();
    println!(
        "  {:>3} {products} {} orders in {:>4} ms = {:>5.0} orders/s  ({note})\n                 ({})",
        r.products,
        r.accepted,
        r.elapsed.as_millis(),
        r.per_second(),
        by_replica.join(", ")
    );
    if r.busy > 0 {
        println!("                 ({} gave up after waiting 1 s for the product)", r.busy);
    }
    for e in &r.errors {
        println!("                 failed: {e}");
    }
}
