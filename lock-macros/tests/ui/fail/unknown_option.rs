use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", skip_if_held, retries = 3)]
async fn job() {}

fn main() {}
