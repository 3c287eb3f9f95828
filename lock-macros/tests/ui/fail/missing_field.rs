use lock_core::distributed_lock;

struct Order {
    id: u64,
}

#[distributed_lock(key = "lock:order:{order.product_id}", skip_if_held)]
async fn job(order: Order) {
    let _ = order.id;
}

fn main() {}
