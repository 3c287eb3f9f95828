use lock_scheduler::singleton;

#[singleton]
fn not_async() {}

struct Service;

impl Service {
    #[singleton]
    async fn method(&self) {}
}

#[singleton]
async fn generic<T: Send>(value: T) {
    let _ = value;
}

#[singleton]
async fn impl_trait(value: impl Send) {
    let _ = value;
}

fn main() {}
