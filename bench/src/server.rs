//! The server-side counters (`INFO commandstats`, `INFO cpu`) the scenarios read. The Redis
//! under test comes from the workspace's Redis fixture (`redis_fixture::Redis`).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use lock_core::redis::{self, aio::MultiplexedConnection};

/// Server and client counters at one moment: `INFO commandstats` as command name ->
/// (calls, usec), the server's CPU time (`INFO cpu`) and this process's CPU time.
#[derive(Debug, Clone, Default)]
pub(crate) struct CmdStats {
    commands: BTreeMap<String, (u64, u64)>,
    server_cpu_us: u64,
    client_cpu_us: u64,
    /// `total_reads_processed`: socket reads the server handled.
    reads: u64,
    /// `keyspace_hits` + `keyspace_misses`: keys looked up by reads.
    key_reads: u64,
}

/// User + system CPU time of this process (all threads), in µs, from `/proc/self/stat`
/// (clock ticks of 10 ms: measure over seconds).
pub(crate) fn process_cpu_us() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0 };
    // Fields after the command name, which is in parentheses: state is field 3, utime 14, stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) * 10_000
}

/// What the server ran between two [`CmdStats`] snapshots, without the benchmark's own
/// `INFO` / `CONFIG` calls. Commands run inside scripts are counted (Redis counts them).
#[derive(Debug, Clone, Default)]
pub(crate) struct CmdDelta {
    pub(crate) calls: u64,
    pub(crate) usec: u64,
    pub(crate) by_command: BTreeMap<String, u64>,
    /// Per command: usec spent executing it (a script's includes the commands it runs).
    pub(crate) usec_by_command: BTreeMap<String, u64>,
    /// CPU time redis-server used (all its work, not only command execution).
    pub(crate) server_cpu_us: u64,
    /// CPU time this process used.
    pub(crate) client_cpu_us: u64,
    /// Socket reads the server handled (fewer per command: the client batched more).
    pub(crate) reads: u64,
    /// Keys looked up by reads (`keyspace_hits` + `keyspace_misses`; a script's `GET`s and
    /// `SET … GET`s included).
    pub(crate) key_reads: u64,
}

impl CmdDelta {
    pub(crate) fn merge(&mut self, other: &CmdDelta) {
        self.calls += other.calls;
        self.usec += other.usec;
        self.server_cpu_us += other.server_cpu_us;
        self.client_cpu_us += other.client_cpu_us;
        self.reads += other.reads;
        self.key_reads += other.key_reads;
        for (k, v) in &other.by_command {
            *self.by_command.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.usec_by_command {
            *self.usec_by_command.entry(k.clone()).or_default() += v;
        }
    }

    /// Per-command usec per call, as `evalsha=3.10 set=0.80 ...`.
    pub(crate) fn usec_per_call(&self) -> String {
        self.by_command
            .iter()
            .map(|(k, calls)| {
                let usec = self.usec_by_command.get(k).copied().unwrap_or(0);
                format!("{k}={:.2}", usec as f64 / (*calls).max(1) as f64)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Per-command calls divided by `n`, as `evalsha=1.00 set=1.00 ...`.
    pub(crate) fn breakdown(&self, n: u64) -> String {
        let n = n.max(1) as f64;
        self.by_command.iter().map(|(k, v)| format!("{k}={:.2}", *v as f64 / n)).collect::<Vec<_>>().join(" ")
    }
}

impl CmdStats {
    pub(crate) async fn read(conn: &mut MultiplexedConnection) -> Result<Self> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .arg("stats")
            .query_async(conn)
            .await
            .context("INFO commandstats cpu stats")?;
        let client_cpu_us = process_cpu_us();
        let mut stats = BTreeMap::new();
        let mut server_cpu = 0.0;
        let (mut reads, mut key_reads) = (0, 0);
        for line in info.lines() {
            if let Some(v) = line.strip_prefix("total_reads_processed:") {
                reads = v.trim().parse().unwrap_or(0);
            }
            if let Some(v) =
                line.strip_prefix("keyspace_hits:").or_else(|| line.strip_prefix("keyspace_misses:"))
            {
                key_reads += v.trim().parse::<u64>().unwrap_or(0);
            }
            if let Some((name, v)) = line.split_once(':')
                && (name == "used_cpu_user" || name == "used_cpu_sys")
            {
                server_cpu += v.trim().parse::<f64>().unwrap_or(0.0);
            }
            let Some(rest) = line.strip_prefix("cmdstat_") else { continue };
            let Some((name, fields)) = rest.split_once(':') else { continue };
            let mut calls = 0;
            let mut usec = 0;
            for field in fields.split(',') {
                match field.split_once('=') {
                    Some(("calls", v)) => calls = v.trim().parse().unwrap_or(0),
                    Some(("usec", v)) => usec = v.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
            stats.insert(name.to_owned(), (calls, usec));
        }
        Ok(CmdStats {
            commands: stats,
            server_cpu_us: (server_cpu * 1e6) as u64,
            client_cpu_us,
            reads,
            key_reads,
        })
    }

    /// The counters of several servers (a cluster's masters), added up.
    pub(crate) fn sum(all: Vec<CmdStats>) -> CmdStats {
        let mut total = CmdStats::default();
        for stats in all {
            total.server_cpu_us += stats.server_cpu_us;
            total.reads += stats.reads;
            total.key_reads += stats.key_reads;
            total.client_cpu_us = stats.client_cpu_us;
            for (name, (calls, usec)) in stats.commands {
                let entry = total.commands.entry(name).or_default();
                entry.0 += calls;
                entry.1 += usec;
            }
        }
        total
    }

    pub(crate) fn since(&self, before: &CmdStats) -> CmdDelta {
        let mut delta = CmdDelta {
            server_cpu_us: self.server_cpu_us.saturating_sub(before.server_cpu_us),
            client_cpu_us: self.client_cpu_us.saturating_sub(before.client_cpu_us),
            reads: self.reads.saturating_sub(before.reads),
            key_reads: self.key_reads.saturating_sub(before.key_reads),
            ..CmdDelta::default()
        };
        for (name, &(calls, usec)) in &self.commands {
            if name == "info" || name.starts_with("config") {
                continue;
            }
            let (c0, u0) = before.commands.get(name).copied().unwrap_or((0, 0));
            let (dc, du) = (calls.saturating_sub(c0), usec.saturating_sub(u0));
            if dc > 0 {
                delta.calls += dc;
                delta.usec += du;
                delta.by_command.insert(name.clone(), dc);
                delta.usec_by_command.insert(name.clone(), du);
            }
        }
        delta
    }
}
