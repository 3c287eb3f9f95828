use lock_core::distributed_lock;

#[distributed_lock(key = "lock:job", read = true)]
async fn job() -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
