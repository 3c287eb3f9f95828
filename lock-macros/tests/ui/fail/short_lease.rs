use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", skip_if_held, lease = "5ms")]
async fn job() {}

fn main() {}
