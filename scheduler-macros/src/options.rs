//! Parsing and validating the attribute's arguments: every problem collected, each spanned on
//! the offending tokens, before anything is expanded. Schedules, zones and durations are checked
//! by `lock-schedule`, the parser the scheduler itself uses, so the compile-time verdict and
//! the run-time one are the same.

use std::time::Duration;

use lock_schedule::{Every, job_name_problem, parse_cron, parse_duration, parse_zone};
use proc_macro2::Span;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Meta, Path, Token};

const OPTIONS: &str = "cron, every, offset, zone, name, lock, lease, wait, at_least, fencing, on_lost, \
                       catch_up, max_run_time, retry, pause_after_failures, overlap, jitter, start_at, end_at, \
                       max_runs, group, crate";

/// The options that configure the lock the scheduler takes, which a `#[distributed_lock]` fn
/// does not have (it takes its own).
const LOCK_OPTIONS: [&str; 6] = ["lock", "lease", "wait", "at_least", "fencing", "overlap"];

/// Most attempts of a retry policy (the scheduler's `MAX_ATTEMPTS`).
const MAX_ATTEMPTS: u32 = 100;

/// When the job fires.
pub(crate) enum When {
    /// The expression (checked), and its zone.
    Cron { expr: LitStr, zone: Option<LitStr> },
    /// The period and offset (checked), as written.
    Every { period: LitStr, offset: Option<LitStr> },
}

/// The catch-up policy, as the scheduler's `CatchUp`.
pub(crate) enum CatchUp {
    Never,
    Latest(Option<Duration>),
    Each(u32),
}

/// A retry policy as written: `"<attempts> [every <base>] [x<factor>] [max <duration>]
/// [jitter <fraction>]"`; what is left out keeps the scheduler's default.
pub(crate) struct Retry {
    pub(crate) attempts: u32,
    pub(crate) base: Option<Duration>,
    pub(crate) factor: Option<f64>,
    pub(crate) max: Option<Duration>,
    pub(crate) jitter: Option<f64>,
}

/// The overlap policy, as the scheduler's `Overlap`.
pub(crate) enum Overlap {
    Skip,
    Allow,
    BufferOne,
    Replace,
}

/// The validated arguments.
pub(crate) struct Options {
    pub(crate) when: When,
    pub(crate) name: Option<LitStr>,
    pub(crate) lock: Option<LitStr>,
    pub(crate) lease: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) at_least: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) on_lost_continue: Option<bool>,
    pub(crate) catch_up: Option<CatchUp>,
    pub(crate) max_run_time: Option<Duration>,
    pub(crate) retry: Option<Retry>,
    pub(crate) pause_after_failures: Option<u32>,
    pub(crate) overlap: Option<Overlap>,
    pub(crate) jitter: Option<Duration>,
    /// `start_at` and `end_at`, as epoch milliseconds (checked RFC 3339 times).
    pub(crate) start_at: Option<i64>,
    pub(crate) end_at: Option<i64>,
    pub(crate) max_runs: Option<u32>,
    pub(crate) group: Option<LitStr>,
    pub(crate) krate: Option<Path>,
    /// Where each lock option was given, to refuse them on a `#[distributed_lock]` fn.
    pub(crate) lock_option_spans: Vec<(&'static str, Span)>,
}

#[derive(Default)]
struct Builder {
    cron: Option<LitStr>,
    every: Option<LitStr>,
    offset: Option<LitStr>,
    zone: Option<LitStr>,
    name: Option<LitStr>,
    lock: Option<LitStr>,
    lease: Option<Duration>,
    wait: Option<Duration>,
    at_least: Option<Duration>,
    fencing: bool,
    on_lost: Option<bool>,
    catch_up: Option<CatchUp>,
    max_run_time: Option<Duration>,
    retry: Option<Retry>,
    pause_after_failures: Option<u32>,
    overlap: Option<Overlap>,
    jitter: Option<Duration>,
    start_at: Option<(i64, LitStr)>,
    end_at: Option<(i64, LitStr)>,
    max_runs: Option<u32>,
    group: Option<LitStr>,
    krate: Option<Path>,
    seen: Vec<String>,
    lock_option_spans: Vec<(&'static str, Span)>,
}

/// Parses the attribute's arguments; `attr_span` is used when something is missing.
pub(crate) fn parse(args: proc_macro2::TokenStream, attr_span: Span) -> syn::Result<Options> {
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    let mut b = Builder::default();
    let mut errors: Option<syn::Error> = None;
    for meta in metas {
        if let Err(e) = b.add(meta) {
            combine(&mut errors, e);
        }
    }
    // The schedule's own rules, unless an option already failed (a bad `cron` would otherwise
    // be reported twice, once as missing).
    let when = b.when(attr_span);
    if let (Err(e), None) = (&when, &errors) {
        combine(&mut errors, e.clone());
    }
    if let (Some((start, start_lit)), Some((end, end_lit))) = (&b.start_at, &b.end_at)
        && end < start
    {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                end_lit,
                format!(
                    "`end_at` ({}) is before `start_at` ({}): the job would never fire; swap or fix them",
                    end_lit.value(),
                    start_lit.value()
                ),
            ),
        );
    }
    if let Some(e) = errors {
        return Err(e);
    }
    Ok(Options {
        when: when?,
        name: b.name,
        lock: b.lock,
        lease: b.lease,
        wait: b.wait,
        at_least: b.at_least,
        fencing: b.fencing,
        on_lost_continue: b.on_lost,
        catch_up: b.catch_up,
        max_run_time: b.max_run_time,
        retry: b.retry,
        pause_after_failures: b.pause_after_failures,
        overlap: b.overlap,
        jitter: b.jitter,
        start_at: b.start_at.map(|(ms, _)| ms),
        end_at: b.end_at.map(|(ms, _)| ms),
        max_runs: b.max_runs,
        group: b.group,
        krate: b.krate,
        lock_option_spans: b.lock_option_spans,
    })
}

pub(crate) fn combine(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(errors) => errors.combine(e),
        None => *errors = Some(e),
    }
}

impl Builder {
    fn add(&mut self, meta: Meta) -> syn::Result<()> {
        let path = meta.path();
        let name = path.get_ident().map(ToString::to_string).unwrap_or_default();
        if !OPTIONS.split(", ").any(|o| o.trim() == name) {
            return Err(syn::Error::new_spanned(
                path,
                format!("unknown option `{}`; valid options: {OPTIONS}", quote::quote!(#path)),
            ));
        }
        if self.seen.contains(&name) {
            return Err(syn::Error::new_spanned(path, format!("duplicate option `{name}`")));
        }
        self.seen.push(name.clone());
        if let Some(option) = LOCK_OPTIONS.iter().find(|o| **o == name) {
            self.lock_option_spans.push((option, path.span()));
        }
        match (name.as_str(), meta) {
            ("fencing", Meta::Path(_)) => self.fencing = true,
            ("fencing", other) => {
                return Err(syn::Error::new_spanned(other, "`fencing` is a flag and takes no value"));
            }
            (_, Meta::NameValue(nv)) => self.add_value(&name, &nv.value)?,
            (_, other) => {
                return Err(syn::Error::new_spanned(
                    other,
                    format!("`{name}` needs a value, e.g. `{}`", example(&name)),
                ));
            }
        }
        Ok(())
    }

    fn add_value(&mut self, name: &str, value: &Expr) -> syn::Result<()> {
        if name == "max_runs" {
            self.max_runs = Some(max_runs(value)?);
            return Ok(());
        }
        let lit = string_literal(value, name)?;
        let text = lit.value();
        let error = |message: String| syn::Error::new_spanned(&lit, message);
        match name {
            "cron" => {
                // Kept even when invalid: its error is its own, not "missing schedule".
                self.cron = Some(lit.clone());
                parse_cron(&text).map_err(|e| error(e.to_string()))?;
            }
            "every" => self.every = Some(lit),
            "offset" => self.offset = Some(lit),
            "zone" => {
                self.zone = Some(lit.clone());
                parse_zone(&text).map_err(|e| error(e.to_string()))?;
            }
            "name" => {
                if let Some(problem) = job_name_problem(&text) {
                    return Err(error(format!("invalid job name {text:?}: {problem}")));
                }
                self.name = Some(lit);
            }
            "lock" => {
                if text.trim().is_empty() {
                    return Err(error(
                        "`lock` is empty: give the lock's key, e.g. `lock = \"lock:my-job\"`".into(),
                    ));
                }
                self.lock = Some(lit);
            }
            "group" => {
                if text.trim().is_empty() || text.chars().any(char::is_control) {
                    return Err(error("`group` must be a non-empty name without control characters".into()));
                }
                self.group = Some(lit);
            }
            "on_lost" => {
                self.on_lost = Some(match text.as_str() {
                    "cancel" => false,
                    "continue" => true,
                    other => {
                        return Err(error(format!(
                            "invalid on_lost {other:?}: expected \"cancel\" or \"continue\""
                        )));
                    }
                });
            }
            "catch_up" => self.catch_up = Some(catch_up(&lit)?),
            "retry" => self.retry = Some(retry(&lit)?),
            "pause_after_failures" => match text.trim().parse::<u32>() {
                Ok(n) if n > 0 => self.pause_after_failures = Some(n),
                _ => {
                    return Err(error(format!(
                        "invalid pause_after_failures {text:?}: give how many failed slots in a row pause \
                         the job, 1 or more, e.g. \"5\""
                    )));
                }
            },
            "overlap" => {
                self.overlap = Some(match text.as_str() {
                    "skip" => Overlap::Skip,
                    "allow" => Overlap::Allow,
                    "buffer_one" => Overlap::BufferOne,
                    "replace" => Overlap::Replace,
                    other => {
                        return Err(error(format!(
                            "invalid overlap {other:?}: expected \"skip\", \"allow\", \"buffer_one\" or \"replace\""
                        )));
                    }
                });
            }
            "jitter" => {
                let d = positive_duration(&lit, name)?;
                if d > Duration::from_secs(24 * 60 * 60) {
                    return Err(error(format!("`jitter` is {text:?}: give at most a day")));
                }
                self.jitter = Some(d);
            }
            "start_at" => self.start_at = Some((instant(&lit, name)?, lit)),
            "end_at" => self.end_at = Some((instant(&lit, name)?, lit)),
            "crate" => {
                let path = lit.parse_with(Path::parse_mod_style).map_err(|_| {
                    error(format!(
                        "`crate` must be a path to lock-scheduler or a re-export of it, e.g. \
                         `crate = \"my_app::lock_scheduler\"`; got {text:?}"
                    ))
                })?;
                self.krate = Some(path);
            }
            // lease, wait, at_least, max_run_time
            _ => {
                let d = positive_duration(&lit, name)?;
                let slot = match name {
                    "lease" => &mut self.lease,
                    "wait" => &mut self.wait,
                    "at_least" => &mut self.at_least,
                    _ => &mut self.max_run_time,
                };
                *slot = Some(d);
            }
        }
        Ok(())
    }

    /// The schedule: exactly one of `cron` and `every`, with what goes with each.
    fn when(&self, attr_span: Span) -> syn::Result<When> {
        match (&self.cron, &self.every) {
            (Some(_), Some(every)) => Err(syn::Error::new_spanned(
                every,
                "`cron` and `every` cannot be combined: a job fires on a cron expression or every period",
            )),
            (None, None) => Err(syn::Error::new(
                attr_span,
                "missing schedule: give `cron = \"0 0 2 * * *\"` (6 fields, with seconds) or `every = \"30s\"`",
            )),
            (Some(expr), None) => {
                if let Some(offset) = &self.offset {
                    return Err(syn::Error::new_spanned(
                        offset,
                        "`offset` goes with `every`: it shifts an interval's slots, not a cron expression's",
                    ));
                }
                Ok(When::Cron { expr: expr.clone(), zone: self.zone.clone() })
            }
            (None, Some(period_lit)) => {
                if let Some(zone) = &self.zone {
                    return Err(syn::Error::new_spanned(
                        zone,
                        "`zone` goes with `cron`: an interval (`every`) is aligned to the Unix epoch, not to a time zone",
                    ));
                }
                let period = parse_duration(&period_lit.value())
                    .map_err(|e| syn::Error::new_spanned(period_lit, e.to_string()))?;
                let offset = match &self.offset {
                    Some(lit) => parse_duration(&lit.value())
                        .map_err(|e| syn::Error::new_spanned(lit, e.to_string()))?,
                    None => Duration::ZERO,
                };
                // The period alone first, so each complaint lands on its own literal.
                Every::new(period, Duration::ZERO)
                    .map_err(|e| syn::Error::new_spanned(period_lit, e.to_string()))?;
                Every::new(period, offset).map_err(|e| {
                    syn::Error::new_spanned(self.offset.as_ref().unwrap_or(period_lit), e.to_string())
                })?;
                Ok(When::Every { period: period_lit.clone(), offset: self.offset.clone() })
            }
        }
    }
}

/// `catch_up = "never" | "latest" | "latest <duration>" | "each <count>"`.
fn catch_up(lit: &LitStr) -> syn::Result<CatchUp> {
    let text = lit.value();
    let words: Vec<&str> = text.split_whitespace().collect();
    let invalid = || {
        syn::Error::new_spanned(
            lit,
            format!(
                "invalid catch_up {text:?}: expected \"never\", \"latest\", \"latest <duration>\" \
                 (e.g. \"latest 5m\") or \"each <count>\" (e.g. \"each 10\")"
            ),
        )
    };
    match words.as_slice() {
        ["never"] => Ok(CatchUp::Never),
        ["latest"] => Ok(CatchUp::Latest(None)),
        ["latest", window] => {
            let d = parse_duration(window).map_err(|e| syn::Error::new_spanned(lit, e.to_string()))?;
            Ok(CatchUp::Latest(Some(d)))
        }
        ["each", count] => match count.parse::<u32>() {
            Ok(n) if n > 0 => Ok(CatchUp::Each(n)),
            _ => Err(invalid()),
        },
        _ => Err(invalid()),
    }
}

/// `retry = "<attempts> [every <base>] [x<factor>] [max <duration>] [jitter <fraction>]"`, the
/// rules of the scheduler's `RetryPolicy` checked here.
fn retry(lit: &LitStr) -> syn::Result<Retry> {
    let text = lit.value();
    let error = |why: String| {
        syn::Error::new_spanned(
            lit,
            format!(
                "invalid retry {text:?}: {why}; expected \"<attempts> [every <delay>] [x<factor>] [max <delay>] \
                 [jitter <fraction>]\", e.g. \"3 every 10s x2 max 10m\""
            ),
        )
    };
    let mut words = text.split_whitespace();
    let attempts = match words.next().map(str::parse::<u32>) {
        Some(Ok(n)) if (1..=MAX_ATTEMPTS).contains(&n) => n,
        _ => return Err(error(format!("the attempts in all come first, 1 to {MAX_ATTEMPTS}"))),
    };
    let mut retry = Retry { attempts, base: None, factor: None, max: None, jitter: None };
    while let Some(word) = words.next() {
        let mut value = |what: &str| words.next().ok_or_else(|| error(format!("`{what}` needs a value")));
        match word {
            "every" => {
                let d = parse_duration(value("every")?).map_err(|e| error(e.to_string()))?;
                if d.is_zero() {
                    return Err(error("the delay must be greater than zero".into()));
                }
                retry.base = Some(d);
            }
            "max" => retry.max = Some(parse_duration(value("max")?).map_err(|e| error(e.to_string()))?),
            "jitter" => match value("jitter")?.parse::<f64>() {
                Ok(j) if (0.0..=1.0).contains(&j) => retry.jitter = Some(j),
                _ => return Err(error("the jitter is a fraction from 0 to 1".into())),
            },
            factor if factor.starts_with('x') => match factor[1..].parse::<f64>() {
                Ok(f) if f.is_finite() && f >= 1.0 => retry.factor = Some(f),
                _ => return Err(error("the factor (`x2`) is a number of at least 1".into())),
            },
            other => return Err(error(format!("unexpected `{other}`"))),
        }
    }
    if let (Some(max), base) = (retry.max, retry.base.unwrap_or(Duration::from_secs(10)))
        && max < base
    {
        return Err(error("`max` is shorter than the delay".into()));
    }
    Ok(retry)
}

/// An RFC 3339 time (`"2026-01-01T00:00:00Z"`, an offset instead of `Z` allowed), as epoch
/// milliseconds.
fn instant(lit: &LitStr, name: &str) -> syn::Result<i64> {
    let text = lit.value();
    match chrono::DateTime::parse_from_rfc3339(text.trim()) {
        Ok(at) => Ok(at.timestamp_millis()),
        Err(e) => Err(syn::Error::new_spanned(
            lit,
            format!(
                "invalid {name} {text:?}: {e}; expected an RFC 3339 time with its offset, e.g. \
                 \"2026-01-01T00:00:00Z\" or \"2026-01-01T02:00:00+02:00\""
            ),
        )),
    }
}

/// `max_runs = 3` (or `"3"`): a number of runs, at least 1.
fn max_runs(value: &Expr) -> syn::Result<u32> {
    let parsed = match value {
        Expr::Lit(ExprLit { lit: Lit::Int(n), .. }) => n.base10_parse::<u32>().ok(),
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => s.value().trim().parse::<u32>().ok(),
        _ => None,
    };
    match parsed {
        Some(n) if n > 0 => Ok(n),
        _ => Err(syn::Error::new_spanned(
            value,
            format!(
                "invalid max_runs `{}`: give how many runs the job makes before it stops firing, 1 or more, \
                 e.g. `max_runs = 3`",
                quote::quote!(#value)
            ),
        )),
    }
}

fn positive_duration(lit: &LitStr, name: &str) -> syn::Result<Duration> {
    let d = parse_duration(&lit.value()).map_err(|e| syn::Error::new_spanned(lit, e.to_string()))?;
    if d.is_zero() {
        let hint = if name == "wait" { "; omit `wait` to skip a slot whose lock is held" } else { "" };
        return Err(syn::Error::new_spanned(lit, format!("`{name}` must be greater than zero{hint}")));
    }
    Ok(d)
}

fn example(name: &str) -> &'static str {
    match name {
        "cron" => "cron = \"0 0 2 * * *\"",
        "every" => "every = \"30s\"",
        "zone" => "zone = \"Europe/Berlin\"",
        "name" => "name = \"daily-report\"",
        "lock" => "lock = \"lock:daily-report\"",
        "on_lost" => "on_lost = \"continue\"",
        "catch_up" => "catch_up = \"latest 5m\"",
        "retry" => "retry = \"3 every 10s x2 max 10m\"",
        "pause_after_failures" => "pause_after_failures = \"5\"",
        "overlap" => "overlap = \"buffer_one\"",
        "jitter" => "jitter = \"30s\"",
        "start_at" => "start_at = \"2026-01-01T00:00:00Z\"",
        "end_at" => "end_at = \"2026-12-31T23:59:59Z\"",
        "max_runs" => "max_runs = 3",
        "group" => "group = \"reports\"",
        "crate" => "crate = \"my_app::lock_scheduler\"",
        _ => "max_run_time = \"10m\"",
    }
}

fn string_literal(value: &Expr, name: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` takes a string literal, e.g. `{}`", example(name)),
        )),
    }
}
