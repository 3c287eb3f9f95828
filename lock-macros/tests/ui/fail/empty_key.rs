use lock_core::distributed_lock;

#[distributed_lock(key = "", skip_if_held)]
async fn job() {}

fn main() {}
