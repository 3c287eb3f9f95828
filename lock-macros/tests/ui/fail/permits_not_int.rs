use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", permits = "4")]
async fn job() -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
