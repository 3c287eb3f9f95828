//! A member of a leader election until killed: the replica that is killed -9 in
//! `tests/election.rs`.
//!
//! Usage: `election_member <redis-url> <election> <instance> <liveness-ttl-ms>`; prints
//! `leader <term>` each time it is elected and `follower` each time it stops leading. On SIGTERM
//! it leaves the election (stepping down at once) and exits.

use std::io::Write;
use std::time::Duration;

use lock_core::{LockClient, Role};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, election, instance, liveness_ms] = args.as_slice() else {
        return Err("usage: election_member <redis-url> <election> <instance> <liveness-ttl-ms>".into());
    };
    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id(instance.as_str())
        .liveness_ttl(Duration::from_millis(liveness_ms.parse()?))
        .command_timeout(Duration::from_millis(500))
        .build()?;
    let candidacy = client.election(election).join().await?;
    let mut role = candidacy.watch();
    let mut leading = false;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let now = role.borrow_and_update().clone();
        match now {
            Role::Leader { term, .. } if !leading => {
                leading = true;
                println!("leader {term}");
            }
            Role::Follower { .. } if leading => {
                leading = false;
                println!("follower");
            }
            _ => {}
        }
        std::io::stdout().flush()?;
        tokio::select! {
            changed = role.changed() => if changed.is_err() {
                return Ok(());
            },
            _ = terminate.recv() => {
                candidacy.leave().await?;
                return Ok(());
            }
        }
    }
}
