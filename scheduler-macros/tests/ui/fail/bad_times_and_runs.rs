use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", start_at = "2026-01-01 00:00:00")]
async fn not_rfc3339() {}

#[scheduled(cron = "0 0 2 * * *", end_at = "2026-13-01T00:00:00Z")]
async fn no_such_month() {}

#[scheduled(cron = "0 0 2 * * *", start_at = "2026-01-01T00:00:00")]
async fn no_offset() {}

#[scheduled(cron = "0 0 2 * * *", start_at = "2026-06-01T00:00:00Z", end_at = "2026-01-01T00:00:00+01:00")]
async fn ends_before_it_starts() {}

#[scheduled(cron = "0 0 2 * * *", max_runs = 0)]
async fn never_runs() {}

#[scheduled(cron = "0 0 2 * * *", max_runs = "three")]
async fn not_a_number() {}

#[scheduled(cron = "0 0 2 * * *", max_runs = -1)]
async fn negative() {}

#[scheduled(cron = "0 0 2 * * *", start_at = 2026)]
async fn not_a_string() {}

fn main() {}
