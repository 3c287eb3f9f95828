use lock_core::distributed_lock;

#[distributed_lock(crate = "lock_kore", key = "lock:job", wait = "1s", lease = "1s", client = client)]
async fn job(client: &lock_core::LockClient) -> Result<(), lock_core::LockError> {
    Ok(())
}

fn main() {}
