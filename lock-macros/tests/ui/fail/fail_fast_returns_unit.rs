use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job")]
async fn job() {}

fn main() {}
