//! Pause points for deterministic tests of races (feature `test-hooks`; not for applications).
//!
//! A test arms a point for one key: the `nth` task to reach that point with that key waits
//! there until the test resumes it, so a stall can be placed exactly between two steps of the
//! protocol (say, after a waiter subscribed and before its next try reads the clock), which
//! no timing can do reliably. Without the feature the points compile to nothing.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// Where a task can be paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Point {
    /// A waiting acquisition, before it reads the clock for its next try (its first one
    /// included).
    BeforeWaiterTry,
    /// A batched claim whose reply was lost, before it sends the claims again (the key of its
    /// first claim).
    BeforeClaimResend,
}

struct Armed {
    id: u64,
    point: Point,
    key: String,
    /// Tasks still to let through before the one that pauses.
    skip: usize,
    reached: watch::Sender<bool>,
    resume: watch::Receiver<bool>,
}

static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn armed() -> std::sync::MutexGuard<'static, Vec<Armed>> {
    ARMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An armed pause point. Dropping it resumes the task paused there, if any, and disarms it.
#[derive(Debug)]
pub struct Pause {
    id: u64,
    reached: watch::Receiver<bool>,
    resume: watch::Sender<bool>,
}

/// Arms `point` for `key`: the `nth` task (1: the next) to reach it with that key pauses there.
pub fn arm(point: Point, key: &str, nth: usize) -> Pause {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let (reached_tx, reached) = watch::channel(false);
    let (resume, resume_rx) = watch::channel(false);
    armed().push(Armed {
        id,
        point,
        key: key.to_owned(),
        skip: nth.saturating_sub(1),
        reached: reached_tx,
        resume: resume_rx,
    });
    Pause { id, reached, resume }
}

impl Pause {
    /// Resolves once a task is paused at the point.
    pub async fn reached(&mut self) {
        let _ = self.reached.wait_for(|reached| *reached).await;
    }

    /// Lets the paused task (or the one that will reach the point) go on.
    pub fn resume(&self) {
        self.resume.send_replace(true);
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        armed().retain(|a| a.id != self.id);
        self.resume.send_replace(true);
    }
}

/// A task reaching `point` with `key`: pauses if a test armed it for this task.
pub(crate) async fn pass(point: Point, key: &str) {
    let resume = {
        let mut armed = armed();
        let Some(i) = armed.iter().position(|a| a.point == point && a.key == key) else { return };
        if armed[i].skip > 0 {
            armed[i].skip -= 1;
            return;
        }
        let a = armed.remove(i);
        a.reached.send_replace(true);
        a.resume
    };
    let mut resume = resume;
    let _ = resume.wait_for(|go| *go).await;
}
