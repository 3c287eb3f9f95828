use lock_core::distributed_lock;

#[distributed_lock(key = "lock:order:{id", skip_if_held)]
async fn job(id: u64) {
    let _ = id;
}

fn main() {}
