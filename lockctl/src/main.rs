//! `lockctl`: the operators' tool for lock-core locks and scheduler jobs.
//!
//! ```text
//! lockctl [--url URL] [--json] <command>
//!   show <key>            holder(s), instance, TTL, fence, waiters, holder's client alive?
//!                         (a lock, a semaphore's permits, a read-write lock's readers/writer)
//!   list [pattern]        held locks, semaphores, read-write locks matching a glob (SCAN)
//!   unlock <key> [--yes] [--token T]
//!                         force-release a lock, or one permit/reader/writer named by its
//!                         token (asks first), says whom it was taken from
//!   jobs                  jobs with their pause flag and last run
//!   history <job> [-n N]  a job's last runs (attempts, retries), newest first; pending retries
//!   pause <job> [--force] pause a job on every replica (an unknown job only with --force)
//!   backfill <job> --from T --to T [--force]
//!                         run each slot between two instants once, as if on time
//!   resume <job>          resume it
//!   run <job>             one live replica runs the job once, now (through its lock)
//!   serve [--listen A] [--read-only] [--token-file F] [--allow-host NAME]... [--token-for-reads]
//!                         the admin console (web page + JSON API) on A (127.0.0.1:8088);
//!                         actions need a bearer token (LOCKCTL_ADMIN_TOKEN or the file)
//!   token                 print a new random admin token
//! ```
//!
//! Text output escapes control characters, terminal escape sequences and bidirectional-text
//! controls found in Redis values (`\u{1b}`), so a key or a job's error cannot retitle the
//! terminal, clear the screen or reorder what is shown.
//!
//! Exit codes: 0 done; 1 nothing there (`show`/`unlock`: the lock is free, `resume`: the job
//! was not paused, `history`: no runs recorded, `list`: no lock matched); 2 bad usage or
//! input; 3 Redis unreachable or failing; 4 `unlock` not confirmed.

mod format;

use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lock_console::json::{history_entry, kind_name, lock_info, lock_summary};
use lock_core::{ErrorChain, LockClient, LockError, inspect};
use lock_scheduler::control::{self, ControlError};
use serde_json::{Value, json};

use crate::format::{duration, slot_time, terminal_safe};

/// Exit code: the command did what was asked.
const OK: u8 = 0;
/// Exit code: there was nothing to act on (a free lock, a job not paused, no history).
const NOTHING: u8 = 1;
/// Exit code: bad usage or input (clap's own usage errors also exit with 2).
const USAGE: u8 = 2;
/// Exit code: Redis unreachable or failing.
const REDIS: u8 = 3;
/// Exit code: `unlock` was not confirmed.
const ABORTED: u8 = 4;

/// Inspect and operate lock-core locks and scheduler jobs in Redis.
///
/// Exit codes: 0 done; 1 nothing there (lock free, job not paused, no history, no match);
/// 2 bad usage or input; 3 Redis unreachable or failing; 4 unlock not confirmed.
// No `Debug`: it would show the URL, password included.
#[derive(Parser)]
#[command(name = "lockctl", version)]
struct Cli {
    /// Redis URL, e.g. `redis://user:password@host:6379/0`,
    /// `redis+sentinel://host1:26379,host2:26379/mymaster` or
    /// `redis+cluster://host1:6379,host2:6379` (`rediss...` for TLS); the password is never
    /// printed.
    #[arg(long, env = "REDIS_URL", hide_env_values = true, global = true)]
    url: Option<String>,
    /// Print JSON (one document) instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show one lock: holder, instance, TTL, fence, waiters, whether the holder is alive.
    Show {
        /// The lock key, e.g. lock:daily-report.
        key: String,
    },
    /// List held locks whose key matches a glob pattern.
    List {
        /// Glob pattern (Redis MATCH syntax).
        #[arg(default_value = "*")]
        pattern: String,
        /// At most this many locks.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Force-release a lock, whoever holds it, or one hold of a semaphore or read-write lock
    /// named by --token (the next waiter gets it).
    Unlock {
        /// The lock key (a semaphore's or read-write lock's name).
        key: String,
        /// The holder's token: which permit, reader or writer to release (required for a
        /// semaphore or a read-write lock with readers; see `lockctl show`).
        #[arg(long)]
        token: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// List jobs (those with a run history or a pause flag) and their last run.
    Jobs,
    /// List the scheduler replicas announced in Redis: group, instance, version, host, how
    /// long they have been up and the jobs they are running.
    Replicas,
    /// List leader elections (those whose leader wrote its record in the last hour): leader,
    /// term, since when, lease left, and the live candidates in the order they would be elected.
    Elections {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// A job's last runs, newest first.
    History {
        /// The job's name.
        job: String,
        /// How many runs.
        #[arg(short = 'n', long, default_value_t = 20)]
        count: usize,
    },
    /// Pause a job on every replica: its slots are skipped (recorded as "skipped: paused").
    /// A job no running scheduler registers and with no history is refused (a typo would
    /// leave a flag nothing reads), unless --force.
    Pause {
        /// The job's name.
        job: String,
        /// Pause it even if no scheduler knows it yet (e.g. before it is deployed).
        #[arg(long)]
        force: bool,
    },
    /// Resume a paused job.
    Resume {
        /// The job's name.
        job: String,
    },
    /// Run a job once now: exactly one live replica of its scheduler group takes the request
    /// (at once: the replicas are told on their group's channel) and runs it through the
    /// job's lock; recorded in its history as a manual run by you.
    Run {
        /// The job's name.
        job: String,
    },
    /// Run every slot of a job between two instants once, as if on time, on the live replicas
    /// of its group; slots its history shows already ran are refused unless --force. Recorded
    /// in its history as backfill.
    Backfill {
        /// The job's name.
        job: String,
        /// The first instant (RFC 3339, e.g. 2026-12-01T00:00:00Z).
        #[arg(long)]
        from: String,
        /// The last instant, included (RFC 3339).
        #[arg(long)]
        to: String,
        /// Run slots that already ran, too.
        #[arg(long)]
        force: bool,
    },
    /// Serve the admin console: a web page and a JSON API (GET /api/openapi.json) for locks,
    /// jobs and replicas. Reads are open to loopback hosts (and --allow-host names); actions
    /// (unlock, pause, resume, run) need `Authorization: Bearer <token>` with a token from
    /// LOCKCTL_ADMIN_TOKEN or --token-file, and are refused without one.
    Serve(ServeArgs),
    /// Print a new admin token: 32 bytes from the operating system's secure random source, as
    /// 64 hex digits.
    Token,
}

/// `lockctl serve`'s options.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The address to listen on. Loopback by default: expose it only behind a proxy that
    /// adds TLS and access control.
    #[arg(long, default_value = "127.0.0.1:8088")]
    listen: SocketAddr,
    /// Refuse every action (403), token or not.
    #[arg(long)]
    read_only: bool,
    /// The bearer token actions need (at least 16 characters, 8 of them different). Prefer the
    /// environment variable or --token-file: a flag shows in `ps`.
    #[arg(long, env = "LOCKCTL_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file of tokens, one a line: `<token>`, or `<name> <token>` to have the history say
    /// `<name>` did what the token did, or `<name> <token> read` for a token that may only read
    /// (with --token-for-reads; its actions are refused); `#` starts a comment line.
    #[arg(long, env = "LOCKCTL_ADMIN_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Also answer requests whose Host is NAME (any port), e.g. the name a reverse proxy
    /// forwards; repeatable. Loopback hosts are always answered; others get 421.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_host: Vec<String>,
    /// Answer whatever Host a request names (the proxy in front checks it).
    #[arg(long, conflicts_with = "allow_host")]
    allow_any_host: bool,
    /// Reads (the pages and GET /api/...) need the bearer token too.
    #[arg(long)]
    token_for_reads: bool,
    /// How long a client has to send a request's headers (also the idle timeout of a
    /// kept-alive connection), e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    header_read_timeout: Duration,
    /// How long shutdown (SIGINT, SIGTERM) waits for requests in flight before closing every
    /// connection, e.g. 5s.
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    shutdown_grace: Duration,
    /// The locks page's default pattern.
    #[arg(long, default_value = "*")]
    lock_pattern: String,
}

/// A duration flag: `500ms`, `10s`, `2m`.
fn duration_arg(text: &str) -> Result<Duration, String> {
    lock_schedule::parse_duration(text).map_err(|e| e.to_string())
}

/// Why a command failed, with its exit code. Printed with its whole chain of causes, each
/// once ([`ErrorChain`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
enum CtlError {
    /// Bad input.
    #[error("{0}")]
    Usage(String),
    /// The lock client failed or refused the input.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A job command failed or refused the input.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The runtime could not start.
    #[error("cannot start the runtime")]
    Runtime(#[source] std::io::Error),
    /// The console's configuration was refused.
    #[error(transparent)]
    Console(#[from] lock_console::ConsoleError),
    /// The operating system's random source failed.
    #[error("the operating system's random source failed: {0}")]
    Random(String),
    /// The console could not listen or serve.
    #[error("the console on {addr} failed")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl CtlError {
    fn code(&self) -> u8 {
        match self {
            CtlError::Usage(_)
            | CtlError::Lock(
                LockError::InvalidKey { .. }
                | LockError::Config(_)
                | LockError::InvalidOptions(_)
                | LockError::NotALock { .. },
            )
            | CtlError::Control(ControlError::InvalidJob(_) | ControlError::UnknownJob { .. })
            | CtlError::Console(_) => USAGE,
            _ => REDIS,
        }
    }
}

/// What a command prints, and its exit code.
struct Output {
    json: Value,
    text: String,
    code: u8,
}

fn main() -> ExitCode {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if token_on_command_line(&matches) {
        eprintln!(
            "lockctl: warning: --token on the command line shows in `ps` to every user of this machine; use LOCKCTL_ADMIN_TOKEN or --token-file"
        );
    }
    let json = cli.json;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(json, &CtlError::Runtime(e)),
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            if json {
                emit(&format!("{}\n", out.json));
            } else if !out.text.is_empty() {
                emit(&terminal_safe(&out.text));
            }
            ExitCode::from(out.code)
        }
        Err(e) => fail(json, &e),
    }
}

/// Whether `serve --token` was given as a flag rather than through the environment.
fn token_on_command_line(matches: &clap::ArgMatches) -> bool {
    matches.subcommand_matches("serve").and_then(|serve| serve.value_source("token"))
        == Some(clap::parser::ValueSource::CommandLine)
}

/// Writes `text` to stdout. A reader that went away (`lockctl history job | head`) is not an
/// error: the rest is dropped, as `println!` would panic instead.
fn emit(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("lockctl: cannot write the output: {e}");
    }
}

fn fail(json: bool, e: &CtlError) -> ExitCode {
    let message = ErrorChain(e).to_string();
    if json {
        emit(&format!("{}\n", json!({ "error": message, "exit_code": e.code() })));
    }
    eprintln!("lockctl: {}", terminal_safe(&message));
    ExitCode::from(e.code())
}

async fn run(cli: Cli) -> Result<Output, CtlError> {
    if let Command::Token = cli.command {
        return new_token();
    }
    let url = cli.url.ok_or_else(|| {
        CtlError::Usage("no Redis URL: pass --url or set REDIS_URL (e.g. redis://127.0.0.1:6379/)".into())
    })?;
    let client = LockClient::builder()
        .url(url)
        .instance_id("lockctl")
        .command_timeout(Duration::from_secs(2))
        .build()?;
    match cli.command {
        Command::Show { key } => show(&client, &key).await,
        Command::List { pattern, limit } => list(&client, &pattern, limit).await,
        Command::Unlock { key, yes, token } => unlock(&client, &key, token.as_deref(), yes, cli.json).await,
        Command::Jobs => jobs(&client).await,
        Command::Replicas => replicas(&client).await,
        Command::Elections { limit } => elections(&client, limit).await,
        Command::History { job, count } => history(&client, &job, count).await,
        Command::Pause { job, force } => pause(&client, &job, force).await,
        Command::Backfill { job, from, to, force } => backfill(&client, &job, &from, &to, force).await,
        Command::Run { job } => run_now(&client, &job).await,
        Command::Serve(args) => serve(client, args).await,
        Command::Token => new_token(),
        Command::Resume { job } => {
            let was_paused = control::resume(&client, &job).await?;
            Ok(Output {
                json: json!({ "job": job, "paused": false, "was_paused": was_paused }),
                text: if was_paused { format!("resumed {job}\n") } else { format!("{job} was not paused\n") },
                code: if was_paused { OK } else { NOTHING },
            })
        }
    }
}

fn alive_text(holder: &inspect::Holder) -> String {
    match (holder.alive, &holder.liveness_key) {
        (Some(true), Some(k)) => format!("yes ({k})"),
        (Some(false), Some(k)) => format!("NO: {k} is gone; the next caller takes the hold over"),
        _ => "unknown".into(),
    }
}

async fn show(client: &LockClient, key: &str) -> Result<Output, CtlError> {
    let info = client.inspect(key).await?;
    let permits = match info.kind {
        inspect::LockKind::Semaphore { permits } => permits,
        _ => None,
    };
    let json = lock_info(&info);
    let mut text = String::new();
    let line = |text: &mut String, name: &str, value: &str| text.push_str(&format!("{name:<11}{value}\n"));
    line(&mut text, "key:", &info.key);
    let kind = match (info.kind, permits) {
        (inspect::LockKind::Semaphore { .. }, Some(n)) => format!("semaphore of {n} permits"),
        (kind, _) => kind_name(kind).to_owned(),
    };
    line(&mut text, "kind:", &kind);
    if !info.holders.is_empty() {
        let what = if permits.is_some() { "permits" } else { "readers" };
        line(&mut text, &format!("{what}:"), &info.holders.len().to_string());
        for (i, h) in info.holders.iter().enumerate() {
            let left = h.expires_in.map_or_else(|| "?".into(), duration);
            text.push_str(&format!("  {}. {}  {left} left  alive: {}\n", i + 1, h.token, alive_text(h)));
        }
    }
    match &info.holder {
        None if !info.holders.is_empty() => {}
        None => line(&mut text, "holder:", "(free)"),
        Some(holder) => {
            let kept = if holder.released { "  (released; kept for its minimum hold)" } else { "" };
            line(&mut text, "holder:", &format!("{}{kept}", holder.token));
            line(&mut text, "instance:", holder.instance.as_deref().unwrap_or("(not a lock-core token)"));
            line(&mut text, "alive:", &alive_text(holder));
            line(&mut text, "ttl:", &info.ttl.map_or_else(|| "none".into(), duration));
        }
    }
    line(&mut text, "fence:", &info.fence.map_or_else(|| "-".into(), |f| f.to_string()));
    line(
        &mut text,
        "last tick:",
        &info.last_tick.map_or_else(|| "-".into(), |t| format!("{} ({t})", slot_time(t))),
    );
    let live = info.live_waiters();
    let waiters = match info.waiters.len() - live {
        0 => info.waiters.len().to_string(),
        lapsed => format!("{} ({live} live, {lapsed} lapsed: dropped when reached)", info.waiters.len()),
    };
    line(&mut text, "waiters:", &waiters);
    for (i, w) in info.waiters.iter().enumerate() {
        let ticket =
            w.ticket_remaining.map_or_else(|| "no ticket".into(), |d| format!("ticket {} left", duration(d)));
        let lapsed = if w.live { "" } else { "  (lapsed)" };
        text.push_str(&format!("  {}. {}  {ticket}{lapsed}\n", i + 1, w.token));
    }
    for h in info.handoffs.iter().filter(|h| h.lapsed) {
        text.push_str(&format!(
            "  client {} let a hand-off lapse at {}: its waiters are skipped until it shows it is alive\n",
            h.client_id,
            slot_time(h.deadline_ms)
        ));
    }
    Ok(Output { json, text, code: if info.is_held() { OK } else { NOTHING } })
}

async fn list(client: &LockClient, pattern: &str, limit: usize) -> Result<Output, CtlError> {
    if pattern.is_empty() || pattern.chars().any(char::is_control) {
        return Err(CtlError::Usage("the pattern is empty or contains control characters".into()));
    }
    let locks = client.list_locks(pattern, limit).await?;
    let json = Value::Array(locks.iter().map(lock_summary).collect());
    let rows: Vec<Vec<String>> = locks
        .iter()
        .map(|l| {
            vec![
                l.key.clone(),
                kind_name(l.kind).to_owned(),
                l.holders.to_string(),
                l.holder.instance.clone().unwrap_or_default(),
                l.ttl.map_or_else(|| "none".into(), duration),
                l.holder.token.clone(),
            ]
        })
        .collect();
    let text = format::table(&["KEY", "KIND", "HOLDERS", "INSTANCE", "TTL", "HOLDER"], &rows);
    Ok(Output { json, text, code: if locks.is_empty() { NOTHING } else { OK } })
}

async fn unlock(
    client: &LockClient,
    key: &str,
    token: Option<&str>,
    yes: bool,
    json_out: bool,
) -> Result<Output, CtlError> {
    let info = client.inspect(key).await?;
    if let Some(token) = token {
        return release_one(client, &info, token, yes, json_out).await;
    }
    if !info.holders.is_empty() {
        return Err(CtlError::Usage(format!(
            "{key} is a {} with {} holder(s): name the one to release with --token <token> (see `lockctl show {key}`)",
            kind_name(info.kind),
            info.holders.len()
        )));
    }
    let Some(holder) = info.holder else {
        return Ok(Output {
            json: json!({ "key": key, "released": false, "holder": null }),
            text: format!("{key} is not held; nothing to do\n"),
            code: NOTHING,
        });
    };
    if !yes {
        let alive = match holder.alive {
            Some(true) => "alive",
            Some(false) => "dead",
            None => "unknown",
        };
        let prompt = format!(
            "Force-release {key}, held by {} (instance {}, client {alive}, {} left)? Its holder is not told and may still write. [y/N] ",
            holder.token,
            holder.instance.as_deref().unwrap_or("?"),
            info.ttl.map_or_else(|| "no expiry".into(), duration),
        );
        if !confirm(&prompt, json_out) {
            return Ok(Output {
                json: json!({ "key": key, "released": false, "aborted": true }),
                text: "not confirmed; the lock was left alone (pass --yes to skip the question)\n".into(),
                code: ABORTED,
            });
        }
    }
    let taken = client.force_unlock(key).await?;
    Ok(match taken {
        Some(token) => {
            let instance = inspect::parse_token(&token).and_then(|h| h.instance);
            Output {
                json: json!({ "key": key, "released": true, "holder": token, "instance": instance }),
                text: format!(
                    "released {key}, taken from {token} (instance {})\n",
                    instance.as_deref().unwrap_or("?")
                ),
                code: OK,
            }
        }
        None => Output {
            json: json!({ "key": key, "released": false, "holder": null }),
            text: format!("{key} was released meanwhile; nothing to do\n"),
            code: NOTHING,
        },
    })
}

/// `unlock --token`: force-releases the one hold of `info` that `token` names.
async fn release_one(
    client: &LockClient,
    info: &inspect::LockInfo,
    token: &str,
    yes: bool,
    json_out: bool,
) -> Result<Output, CtlError> {
    let key = &info.key;
    let Some(holder) = info.holder.iter().chain(&info.holders).find(|h| h.token == token) else {
        return Ok(Output {
            json: json!({ "key": key, "released": false, "holder": null }),
            text: format!("{token} holds nothing of {key}; nothing to do\n"),
            code: NOTHING,
        });
    };
    if !yes {
        let prompt = format!(
            "Force-release the hold of {token} on {key} (instance {}, client alive: {})? Its holder is not told and may still write. [y/N] ",
            holder.instance.as_deref().unwrap_or("?"),
            alive_text(holder),
        );
        if !confirm(&prompt, json_out) {
            return Ok(Output {
                json: json!({ "key": key, "released": false, "aborted": true }),
                text: "not confirmed; the hold was left alone (pass --yes to skip the question)\n".into(),
                code: ABORTED,
            });
        }
    }
    let released = client.force_release(key, token).await?;
    Ok(Output {
        json: json!({ "key": key, "released": released, "holder": token, "instance": holder.instance }),
        text: if released {
            format!("released the hold of {token} on {key}\n")
        } else {
            format!("{token} gave {key} back meanwhile; nothing to do\n")
        },
        code: if released { OK } else { NOTHING },
    })
}

/// Asks on stderr, reads a line from stdin: only "y" or "yes" confirms (end of input does not).
fn confirm(prompt: &str, json_out: bool) -> bool {
    let mut err = std::io::stderr();
    let _ = write!(err, "{}", terminal_safe(prompt));
    let _ = err.flush();
    let mut answer = String::new();
    let stdin = std::io::stdin();
    if stdin.lock().read_line(&mut answer).is_err() {
        return false;
    }
    if !stdin.is_terminal() && !json_out {
        let _ = writeln!(err);
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

async fn jobs(client: &LockClient) -> Result<Output, CtlError> {
    let names = control::jobs(client).await?;
    let registered = control::registered_jobs(client).await?;
    let retries = control::all_pending_retries(client).await?;
    let mut json = Vec::new();
    let mut rows = Vec::new();
    for name in &names {
        let paused = control::pause_state(client, name).await?;
        let last = control::history(client, name, 1).await?.into_iter().next();
        let job = registered.iter().find(|j| j.name == *name);
        // Soonest first: the first one of the job is its next.
        let next_retry = retries.iter().find(|r| r.job == *name);
        json.push(json!({
            "job": name,
            "schedule": job.map(|j| &j.cron),
            "time_zone": job.map(|j| &j.time_zone),
            "schedule_origin": job.map(|j| j.origin.to_string()),
            "paused": paused.paused.is_some(),
            "paused_info": paused.paused,
            "last_run": last.as_ref().map(history_entry),
            "next_retry": next_retry.map(lock_console::json::pending_retry),
        }));
        rows.push(vec![
            name.clone(),
            job.map_or_else(|| "-".into(), schedule_in_force),
            if paused.paused.is_some() { "yes".into() } else { "no".into() },
            last.as_ref().map_or_else(|| "-".into(), |e| slot_time(e.tick)),
            last.as_ref().map_or_else(|| "-".into(), |e| e.instance.clone()),
            last.as_ref().map_or_else(|| "-".into(), |e| e.outcome.clone()),
            last.as_ref().map_or_else(|| "-".into(), |e| duration(e.duration)),
            next_retry.map_or_else(
                || "-".into(),
                |r| format!("#{} at {}", r.attempt, slot_time(r.due.timestamp_millis())),
            ),
        ]);
    }
    let text = format::table(
        &["JOB", "SCHEDULE (FROM)", "PAUSED", "LAST SLOT", "INSTANCE", "OUTCOME", "DURATION", "NEXT RETRY"],
        &rows,
    );
    Ok(Output { json: Value::Array(json), text, code: if names.is_empty() { NOTHING } else { OK } })
}

async fn replicas(client: &LockClient) -> Result<Output, CtlError> {
    let replicas = control::replicas(client).await?;
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|r| {
            let about = r.about.as_ref();
            let or_dash = |t: Option<&str>| t.filter(|t| !t.is_empty()).unwrap_or("-").to_owned();
            vec![
                r.group.clone(),
                r.instance.clone(),
                if r.is_live() { "yes".into() } else { "no (lapsed)".into() },
                or_dash(about.map(|a| a.version.as_str())),
                or_dash(about.map(|a| a.host.as_str())),
                about.map_or_else(
                    || "-".into(),
                    |a| duration((now - a.started_at).to_std().unwrap_or_default()),
                ),
                about.map_or_else(
                    || "-".into(),
                    |a| if a.running.is_empty() { "-".into() } else { a.running.join(", ") },
                ),
            ]
        })
        .collect();
    let text = format::table(&["GROUP", "INSTANCE", "LIVE", "VERSION", "HOST", "UP FOR", "RUNNING"], &rows);
    let json = Value::Array(replicas.iter().map(lock_console::json::replica).collect());
    Ok(Output { json, text, code: if replicas.is_empty() { NOTHING } else { OK } })
}

async fn elections(client: &LockClient, limit: usize) -> Result<Output, CtlError> {
    let elections = client.elections(limit).await?;
    let since = |t: Option<std::time::SystemTime>| {
        t.map_or_else(
            || "-".into(),
            |t| chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
    };
    let rows: Vec<Vec<String>> = elections
        .iter()
        .map(|e| {
            let leader = e.leader.as_ref();
            vec![
                e.name.clone(),
                leader.map_or_else(|| "(none)".into(), |l| l.instance.clone()),
                leader.and_then(|l| l.term).map_or_else(|| "-".into(), |t| t.to_string()),
                since(leader.and_then(|l| l.since)),
                e.lease_remaining.map_or_else(|| "-".into(), duration),
                if e.candidates.is_empty() { "-".into() } else { e.candidates.join(", ") },
            ]
        })
        .collect();
    let text = format::table(&["ELECTION", "LEADER", "TERM", "SINCE", "LEASE LEFT", "CANDIDATES"], &rows);
    let json = Value::Array(elections.iter().map(lock_console::json::election).collect());
    Ok(Output { json, text, code: if elections.is_empty() { NOTHING } else { OK } })
}

/// `*/2 * * * * * UTC (env SCHEDULE_DAILY_REPORT)`: a registered job's schedule in force and
/// where it came from.
fn schedule_in_force(job: &control::RegisteredJob) -> String {
    format!("{} {} ({})", job.cron, job.time_zone, job.origin)
}

async fn history(client: &LockClient, job: &str, count: usize) -> Result<Output, CtlError> {
    let entries = control::history(client, job, count).await?;
    // The schedule the running replicas use now, and where it came from (code, config or an
    // environment variable), above the runs it produced.
    let registered = control::registered_jobs(client).await?.into_iter().find(|j| j.name == job);
    let retries = control::pending_retries(client, job).await?;
    let paused = control::pause_state(client, job).await?.paused;
    let run_count = control::run_count(client, job).await?;
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                slot_time(e.tick),
                e.attempt.map_or_else(|| "-".into(), |a| a.to_string()),
                e.instance.clone(),
                outcome_column(e),
                duration(e.duration),
                retry_column(e),
                e.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut text = match &registered {
        Some(r) => format!("schedule: {}\n", schedule_in_force(r)),
        None => "schedule: - (no running scheduler registers this job)\n".to_owned(),
    };
    text.push_str(&format::table(
        &["SLOT", "ATTEMPT", "INSTANCE", "OUTCOME", "DURATION", "RETRY", "ERROR"],
        &rows,
    ));
    if let Some(paused) = &paused {
        // Who paused it and why: an operator, or the job itself after failed slots in a row.
        text.push_str(&format!("paused: {paused}\n"));
    }
    if let Some(count) = run_count {
        // A job with `max_runs`: its slots stop once the count reaches it (`skipped: max runs`).
        text.push_str(&format!("runs counted (max_runs): {count}\n"));
    }
    for retry in &retries {
        text.push_str(&format!(
            "pending: attempt {} of slot {} due at {} (group {})\n",
            retry.attempt,
            slot_time(retry.tick),
            slot_time(retry.due.timestamp_millis()),
            retry.group
        ));
    }
    Ok(Output {
        json: json!({
            "job": job,
            "schedule": registered.as_ref().map(|r| &r.cron),
            "time_zone": registered.as_ref().map(|r| &r.time_zone),
            "schedule_origin": registered.as_ref().map(|r| r.origin.to_string()),
            "runs": entries.iter().map(history_entry).collect::<Vec<_>>(),
            "pending_retries": retries.iter().map(lock_console::json::pending_retry).collect::<Vec<_>>(),
            "paused_info": paused,
            "run_count": run_count,
        }),
        text,
        code: if entries.is_empty() { NOTHING } else { OK },
    })
}

/// A history entry's outcome, with what started the run when it was not its schedule: a
/// backfill, or a run-now and who asked for it (a console token's name, `lockctl@$USER`).
fn outcome_column(e: &control::HistoryEntry) -> String {
    match &e.manual_by {
        Some(by) => format!("{} (run now by {by})", e.outcome),
        None if e.backfill => format!("{} (backfill)", e.outcome),
        None => e.outcome.clone(),
    }
}

/// `lockctl pause <job> [--force]`.
async fn pause(client: &LockClient, job: &str, force: bool) -> Result<Output, CtlError> {
    if !force {
        let registered = control::registered_jobs(client).await?.iter().any(|j| j.name == job);
        if !registered && !control::has_history_or_pause_flag(client, job).await? {
            return Err(CtlError::Usage(format!(
                "no job `{job}`: no running scheduler registers it and it has no history or pause flag; \
                 check the name (`lockctl jobs`), or pass --force to pause it before it is deployed"
            )));
        }
    }
    let was_paused = control::pause_by(client, job, &operator()).await?;
    let already = if was_paused { " (it was paused already; the flag now names you)" } else { "" };
    Ok(Output {
        json: json!({ "job": job, "paused": true, "was_paused": was_paused }),
        text: format!("paused {job}{already}: every replica skips its slots until `lockctl resume {job}`\n"),
        code: OK,
    })
}

/// `lockctl token`: 32 random bytes as hex.
fn new_token() -> Result<Output, CtlError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| CtlError::Random(e.to_string()))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Output { json: json!({ "token": token }), text: format!("{token}\n"), code: OK })
}

/// What a history entry says of retries: when the next attempt was due, or that the slot
/// failed for good.
fn retry_column(e: &control::HistoryEntry) -> String {
    match (e.retry_at, e.gave_up) {
        (Some(at), _) => format!("at {}", slot_time(at.timestamp_millis())),
        (None, true) => "gave up".into(),
        (None, false) => "-".into(),
    }
}

/// `lockctl backfill <job> --from <t> --to <t> [--force]`.
async fn backfill(
    client: &LockClient,
    job: &str,
    from: &str,
    to: &str,
    force: bool,
) -> Result<Output, CtlError> {
    let instant = |text: &str, which: &str| {
        chrono::DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&chrono::Utc)).map_err(|e| {
            CtlError::Usage(format!(
                "--{which} {text:?} is not an RFC 3339 time ({e}): e.g. 2026-12-01T00:00:00Z"
            ))
        })
    };
    let (from, to) = (instant(from, "from")?, instant(to, "to")?);
    let done = control::backfill(client, job, from, to, force).await?;
    let times = |slots: &[chrono::DateTime<chrono::Utc>]| {
        slots.iter().map(|t| slot_time(t.timestamp_millis())).collect::<Vec<_>>()
    };
    let mut text = format!(
        "queued {} slot(s) of {job} for group {}; `lockctl history {job}` shows their runs\n",
        done.queued.len(),
        done.group
    );
    if !done.refused.is_empty() {
        text.push_str(&format!(
            "refused {} slot(s) that already ran (--force to run them again): {}\n",
            done.refused.len(),
            times(&done.refused).join(", ")
        ));
    }
    Ok(Output {
        json: json!({
            "job": job,
            "group": done.group,
            "queued": times(&done.queued),
            "refused": times(&done.refused),
        }),
        text,
        code: if done.queued.is_empty() { NOTHING } else { OK },
    })
}

/// `lockctl run <job>`.
async fn run_now(client: &LockClient, job: &str) -> Result<Output, CtlError> {
    let request = control::run_now(client, job, &operator()).await?;
    Ok(Output {
        json: lock_console::json::run_request(&request),
        text: format!(
            "a replica of group {} took the request {} to run {job}; `lockctl history {job}` shows the run\n",
            request.group, request.id
        ),
        code: OK,
    })
}

/// Who the pause flag and the history say acted: `lockctl@$USER`.
fn operator() -> String {
    format!("lockctl@{}", std::env::var("USER").unwrap_or_else(|_| "operator".into()))
}

/// `lockctl serve`: the console until SIGINT or SIGTERM.
async fn serve(client: LockClient, args: ServeArgs) -> Result<Output, CtlError> {
    // The audit trail (every action, every refused token) and warnings go to stderr; RUST_LOG
    // overrides what is shown. No colours: the lines go to log collectors.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lock_console::audit=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
    let mut console = lock_console::Console::new(client)
        .read_only(args.read_only)
        .lock_pattern(args.lock_pattern)
        .require_token_for_reads(args.token_for_reads);
    let mut tokens = Vec::new();
    if let Some(path) = &args.token_file {
        tokens.extend(read_token_file(path)?);
    }
    if let Some(token) = args.token.filter(|t| !t.is_empty()) {
        tokens.push((None, token, lock_console::Role::Admin));
    }
    for (name, token, role) in tokens {
        let name = name.as_deref().unwrap_or(lock_console::DEFAULT_TOKEN_NAME);
        console = console.token_with_role(name, token, role)?;
    }
    for host in &args.allow_host {
        console = console.allow_host(host)?;
    }
    if args.allow_any_host {
        console = console.allow_any_host();
    }
    let listen = args.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| CtlError::Serve { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| CtlError::Serve { addr: listen, source })?;
    let actions = if args.read_only {
        "read-only: actions refused"
    } else if console.actions_enabled() {
        "actions need a bearer token"
    } else {
        "actions disabled: set LOCKCTL_ADMIN_TOKEN or --token-file to enable them"
    };
    eprintln!("lockctl: console on http://{addr}/ ({actions}); Ctrl-C stops it");
    if !addr.ip().is_loopback() && !args.token_for_reads {
        eprintln!(
            "lockctl: warning: {addr} is not a loopback address; reads are open to anyone who reaches it (put TLS and access control in front, or pass --token-for-reads)"
        );
    }
    let stop = lock_scheduler::shutdown_signal().map_err(|source| CtlError::Serve { addr, source })?;
    let options = lock_console::ServeOptions::default()
        .header_read_timeout(args.header_read_timeout)
        .shutdown_grace(args.shutdown_grace);
    lock_console::serve(listener, console.router(), options, async move {
        stop.await;
    })
    .await;
    Ok(Output { json: json!({ "stopped": true }), text: "lockctl: console stopped\n".into(), code: OK })
}

/// The tokens of a token file: one a line, `<token>` or `<name> <token>`; blank lines and
/// lines starting with `#` skipped. Errors name the line, never the token.
fn read_token_file(path: &Path) -> Result<Vec<(Option<String>, String, lock_console::Role)>, CtlError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CtlError::Usage(format!("cannot read the token file {shown}: {e}")))?;
    warn_if_readable_by_others(path);
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let admin = lock_console::Role::Admin;
        match fields.as_slice() {
            [token] => tokens.push((None, (*token).to_owned(), admin)),
            [name, token] => tokens.push((Some((*name).to_owned()), (*token).to_owned(), admin)),
            [name, token, "admin"] => tokens.push((Some((*name).to_owned()), (*token).to_owned(), admin)),
            [name, token, "read"] => {
                tokens.push((Some((*name).to_owned()), (*token).to_owned(), lock_console::Role::Read));
            }
            _ => {
                return Err(CtlError::Usage(format!(
                    "line {} of the token file {shown}: expected `<token>`, `<name> <token>` or `<name> <token> \
                     read|admin`",
                    i + 1
                )));
            }
        }
    }
    if tokens.is_empty() {
        return Err(CtlError::Usage(format!("the token file {shown} holds no token")));
    }
    Ok(tokens)
}

/// Warns when a token file can be read by other users (its tokens are secrets).
#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
        eprintln!(
            "lockctl: warning: the token file {} can be read by other users; `chmod 600` it",
            path.display()
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}
