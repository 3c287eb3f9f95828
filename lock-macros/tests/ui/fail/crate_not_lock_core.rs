use lock_core::distributed_lock;

// A path that resolves, but not to lock-core.
#[distributed_lock(crate = "std::time", key = "lock:job", skip_if_held, on_lost = "continue")]
async fn job() {}

fn main() {}
