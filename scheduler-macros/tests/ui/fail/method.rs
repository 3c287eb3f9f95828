use lock_scheduler::scheduled;

struct Reports;

impl Reports {
    #[scheduled(cron = "0 0 2 * * *")]
    async fn report(&self) {}
}

fn main() {}
