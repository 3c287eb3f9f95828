use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", permits = 2, read)]
async fn job() -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
