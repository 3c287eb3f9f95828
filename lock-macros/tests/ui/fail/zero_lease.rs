use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", skip_if_held, lease = "0s")]
async fn job() {}

fn main() {}
