use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", wait = "1s", wait = "2s")]
async fn job() -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
