use lock_core::distributed_lock;

#[distributed_lock(crate = lock_core, key = "lock:job", skip_if_held)]
async fn job() {}

fn main() {}
