use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", skip_if_held)]
async fn job() -> u32 {
    7
}

fn main() {}
