use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", skip_if_held, wait = "5s")]
async fn job() {}

fn main() {}
