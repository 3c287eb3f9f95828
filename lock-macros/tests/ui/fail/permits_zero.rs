use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", permits = 0)]
async fn job() -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
