use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", skip_if_held, on_lost = "ignore")]
async fn job() {}

fn main() {}
