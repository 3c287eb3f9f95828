//! The primitives beside the lock, on the same machinery: a [`Semaphore`](semaphore::Semaphore)
//! (N holders at once) and a [`RwLock`](rw_lock::RwLock) (many readers or one writer).

pub(crate) mod rw_lock;
pub(crate) mod semaphore;
