//! Replica acknowledgement after an acquisition, when opted in (`ReplicaAck`): `WAIT` for
//! the replicas, and on a shortfall release the lock and fail, or warn and keep it.

use crate::acquire::Core;
use crate::error::{LockError, Result};
use crate::held::guard::LockGuard;
use crate::replica_ack::AckShortfall;

impl Core {
    /// With replica acknowledgement on: `WAIT`s for the replicas after an acquisition, and
    /// on a shortfall releases the lock and fails, or warns and keeps it (`ReplicaAck`).
    pub(crate) async fn acknowledged(&self, key: &str, guard: LockGuard) -> Result<LockGuard> {
        let Some(ack) = self.config.replica_ack else { return Ok(guard) };
        let (got, error) = match self.conn.wait_replicas(key, ack.replicas, ack.timeout).await {
            Ok(got) => (got, None),
            Err(e) => (0, Some(e)),
        };
        if got >= ack.replicas {
            tracing::trace!(replicas = got, "replicas acknowledged the lock");
            return Ok(guard);
        }
        match ack.on_shortfall {
            AckShortfall::Warn => {
                tracing::warn!(
                    wanted = ack.replicas,
                    got,
                    error = error.as_ref().map(tracing::field::display),
                    "fewer replicas than wanted acknowledged the lock; keeping it (a failover now could lose it)"
                );
                Ok(guard)
            }
            _ => {
                tracing::warn!(
                    wanted = ack.replicas,
                    got,
                    "fewer replicas than wanted acknowledged the lock; releasing it"
                );
                if let Err(e) = guard.release().await {
                    tracing::debug!(error = %crate::error::ErrorChain(&e), "release after a replica shortfall failed; the lock expires with its lease");
                }
                Err(match error {
                    Some(e) => e,
                    None => LockError::ReplicaAck { key: key.to_owned(), wanted: ack.replicas, got },
                })
            }
        }
    }
}
