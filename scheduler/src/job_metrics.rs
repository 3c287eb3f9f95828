//! A job's metrics: what every run records, registered once per job (and recorder) rather
//! than looked up by name and labels on every run, which costs more than the rest of a run's
//! bookkeeping when a thousand jobs fire in the same second.

use std::sync::Mutex;
use std::time::Duration;

use metrics::{Counter, Histogram};

use crate::report::RunOutcome;

/// The handles of a job's most frequent outcome (`ran`); other outcomes register by name.
#[derive(Default)]
pub(crate) struct JobMetrics {
    cached: Mutex<Option<Ran>>,
}

struct Ran {
    /// The recorder the handles belong to (by address): another one means registering anew.
    recorder: usize,
    runs: Counter,
    duration: Histogram,
    lag: Histogram,
}

impl Ran {
    fn register(job: &str, recorder: usize) -> Self {
        let (job, outcome) = (job.to_owned(), RunOutcome::Ran.metric_label());
        Ran {
            recorder,
            runs: metrics::counter!("scheduler_runs_total", "job_name" => job.clone(), "outcome" => outcome),
            duration: metrics::histogram!("scheduler_run_duration_seconds", "job_name" => job.clone(), "outcome" => outcome),
            lag: metrics::histogram!("scheduler_start_lag_seconds", "job_name" => job),
        }
    }
}

impl JobMetrics {
    /// Records a slot of `job` that ended with `outcome` after `duration`, `lateness` after
    /// its slot.
    /// `lateness` is `None` for a retry (its start lag is not recorded).
    pub(crate) fn record(
        &self,
        job: &str,
        outcome: &RunOutcome,
        duration: Duration,
        lateness: Option<Duration>,
    ) {
        if *outcome == RunOutcome::Ran {
            let recorder = metrics::with_recorder(|r| std::ptr::from_ref(r).cast::<()>() as usize);
            let mut cached = self.cached.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let ran = match cached.as_mut() {
                Some(ran) if ran.recorder == recorder => ran,
                _ => cached.insert(Ran::register(job, recorder)),
            };
            ran.runs.increment(1);
            ran.duration.record(duration.as_secs_f64());
            if let Some(lateness) = lateness {
                ran.lag.record(lateness.as_secs_f64());
            }
            return;
        }
        let name = job.to_owned();
        metrics::counter!("scheduler_runs_total", "job_name" => name.clone(), "outcome" => outcome.metric_label())
            .increment(1);
        match outcome {
            RunOutcome::Missed(n) => {
                metrics::counter!("scheduler_misfires_total", "job_name" => name).increment(*n)
            }
            o if o.ran_here() => {
                metrics::histogram!("scheduler_run_duration_seconds", "job_name" => name.clone(), "outcome" => o.metric_label())
                    .record(duration.as_secs_f64());
                if let Some(lateness) = lateness {
                    metrics::histogram!("scheduler_start_lag_seconds", "job_name" => name)
                        .record(lateness.as_secs_f64());
                }
            }
            _ => {}
        }
    }

    /// Counts a failed run whose next attempt was scheduled (`scheduler_retries_total`).
    pub(crate) fn retry_scheduled(&self, job: &str) {
        metrics::counter!("scheduler_retries_total", "job_name" => job.to_owned()).increment(1);
    }

    /// Counts a slot that failed for good, its attempts used up
    /// (`scheduler_retries_exhausted_total`).
    pub(crate) fn gave_up(&self, job: &str) {
        metrics::counter!("scheduler_retries_exhausted_total", "job_name" => job.to_owned()).increment(1);
    }

    /// Counts the job pausing itself after failed slots in a row
    /// (`scheduler_paused_on_failure_total`).
    pub(crate) fn paused_on_failure(&self, job: &str) {
        metrics::counter!("scheduler_paused_on_failure_total", "job_name" => job.to_owned()).increment(1);
    }
}
