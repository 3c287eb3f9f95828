use lock_scheduler::scheduled;

#[scheduled(name = "report")]
async fn report() {}

fn main() {}
