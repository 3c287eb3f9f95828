//! Parsing and validating the attribute's arguments (tokio-macros style: collect every
//! problem, each spanned on the offending tokens, before expanding anything).

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Meta, Path, Token};

use crate::duration;

const OPTIONS: &str =
    "key, skip_if_held, wait, lease, at_least, fencing, client, on_lost, permits, read, write, crate";

/// The validated arguments.
pub(crate) struct Options {
    pub(crate) key: LitStr,
    pub(crate) skip_if_held: bool,
    pub(crate) wait: Option<Duration>,
    /// The fixed lease and the span of its literal (where a lease shorter than lock-core's
    /// minimum is reported, by the expansion's compile-time check).
    pub(crate) lease: Option<(Duration, Span)>,
    pub(crate) at_least: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) client: Option<Expr>,
    pub(crate) on_lost_continue: bool,
    /// What the fn holds: a lock (the default), a permit of the semaphore `key`, or a read or
    /// write hold of the read-write lock `key`.
    pub(crate) hold: HoldKind,
    /// `crate = "path"`: the path to lock-core, for users who reach it through a re-export,
    /// and the span of its literal.
    pub(crate) krate: Option<(Path, Span)>,
}

/// What `key` names and how the fn holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldKind {
    Lock,
    /// `permits = N`: a permit of a semaphore of N permits.
    Permit(u32),
    /// `read`: a read hold of a read-write lock.
    Read,
    /// `write`: the write hold of a read-write lock.
    Write,
}

#[derive(Default)]
struct Builder {
    key: Option<LitStr>,
    skip_if_held: Option<Span>,
    wait: Option<(Duration, Span)>,
    lease: Option<(Duration, Span)>,
    at_least: Option<(Duration, Span)>,
    fencing: Option<Span>,
    client: Option<Expr>,
    on_lost: Option<(bool, Span)>,
    permits: Option<(u32, Span)>,
    read: Option<Span>,
    write: Option<Span>,
    krate: Option<(Path, Span)>,
    seen: Vec<String>,
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
    if let Err(e) = b.check() {
        combine(&mut errors, e);
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let key = b.key.ok_or_else(|| {
        syn::Error::new(attr_span, "missing `key`: #[distributed_lock(key = \"lock:my-job\")]")
    })?;
    Ok(Options {
        key,
        skip_if_held: b.skip_if_held.is_some(),
        wait: b.wait.map(|(d, _)| d),
        lease: b.lease,
        at_least: b.at_least.map(|(d, _)| d),
        fencing: b.fencing.is_some(),
        client: b.client,
        on_lost_continue: b.on_lost.is_some_and(|(c, _)| c),
        hold: match (b.permits, b.read, b.write) {
            (Some((n, _)), _, _) => HoldKind::Permit(n),
            (_, Some(_), _) => HoldKind::Read,
            (_, _, Some(_)) => HoldKind::Write,
            _ => HoldKind::Lock,
        },
        krate: b.krate,
    })
}

fn combine(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(errors) => errors.combine(e),
        None => *errors = Some(e),
    }
}

impl Builder {
    fn add(&mut self, meta: Meta) -> syn::Result<()> {
        let path = meta.path();
        let name = path.get_ident().map(ToString::to_string).unwrap_or_default();
        if !OPTIONS.split(", ").any(|o| o == name) {
            return Err(syn::Error::new_spanned(
                path,
                format!("unknown option `{}`; valid options: {OPTIONS}", quote::quote!(#path)),
            ));
        }
        if self.seen.contains(&name) {
            return Err(syn::Error::new_spanned(path, format!("duplicate option `{name}`")));
        }
        self.seen.push(name.clone());
        match (name.as_str(), meta) {
            ("skip_if_held", Meta::Path(p)) => self.skip_if_held = Some(p.span()),
            ("fencing", Meta::Path(p)) => self.fencing = Some(p.span()),
            ("read", Meta::Path(p)) => self.read = Some(p.span()),
            ("write", Meta::Path(p)) => self.write = Some(p.span()),
            ("skip_if_held" | "fencing" | "read" | "write", other) => {
                return Err(syn::Error::new_spanned(other, format!("`{name}` is a flag and takes no value")));
            }
            ("client", Meta::NameValue(nv)) => self.client = Some(nv.value),
            ("permits", Meta::NameValue(nv)) => self.permits = Some(permits(&nv.value)?),
            (_, Meta::NameValue(nv)) => {
                let lit = string_literal(&nv.value, &name)?;
                match name.as_str() {
                    "key" => self.key = Some(lit),
                    "crate" => self.krate = Some((crate_path(&lit)?, lit.span())),
                    "on_lost" => {
                        let cont = match lit.value().as_str() {
                            "cancel" => false,
                            "continue" => true,
                            other => {
                                return Err(syn::Error::new_spanned(
                                    &lit,
                                    format!("invalid on_lost {other:?}: expected \"cancel\" or \"continue\""),
                                ));
                            }
                        };
                        self.on_lost = Some((cont, lit.span()));
                    }
                    _ => {
                        let d =
                            duration::parse(&lit.value()).map_err(|e| syn::Error::new_spanned(&lit, e))?;
                        if d.is_zero() {
                            let hint = if name == "wait" { "; omit `wait` to fail fast" } else { "" };
                            return Err(syn::Error::new_spanned(
                                &lit,
                                format!("`{name}` must be greater than zero{hint}"),
                            ));
                        }
                        let slot = match name.as_str() {
                            "wait" => &mut self.wait,
                            "lease" => &mut self.lease,
                            _ => &mut self.at_least,
                        };
                        *slot = Some((d, lit.span()));
                    }
                }
            }
            (_, other) => {
                let example = match name.as_str() {
                    "key" => "key = \"lock:my-job\"",
                    "client" => "client = self.locks",
                    "on_lost" => "on_lost = \"continue\"",
                    "crate" => "crate = \"lock_scheduler::lock_core\"",
                    "permits" => "permits = 4",
                    _ => "wait = \"5s\"",
                };
                return Err(syn::Error::new_spanned(
                    other,
                    format!("`{name}` needs a value, e.g. `{example}`"),
                ));
            }
        }
        Ok(())
    }

    fn check(&self) -> syn::Result<()> {
        if let (Some(_), Some(span)) = (self.read, self.write) {
            return Err(syn::Error::new(
                span,
                "`read` and `write` cannot be combined: a fn holds a read-write lock for reading or for writing",
            ));
        }
        if let (Some(_), Some(span)) = (self.permits, self.read.or(self.write)) {
            return Err(syn::Error::new(
                span,
                "`permits` cannot be combined with `read` or `write`: `permits` names a semaphore, \
                 `read`/`write` a read-write lock",
            ));
        }
        if let (Some(_), Some((_, span))) = (self.skip_if_held, self.wait) {
            return Err(syn::Error::new(
                span,
                "`skip_if_held` and `wait` cannot be combined: skip the call when the lock is held, \
                 or wait for it",
            ));
        }
        if let (Some((lease, _)), Some((at_least, span))) = (self.lease, self.at_least)
            && at_least > lease
        {
            return Err(syn::Error::new(
                span,
                format!(
                    "`at_least` ({at_least:?}) is longer than the fixed `lease` ({lease:?}): the lock \
                     would expire before the minimum hold"
                ),
            ));
        }
        Ok(())
    }
}

/// `permits = N`: an integer literal of at least 1.
fn permits(value: &Expr) -> syn::Result<(u32, Span)> {
    let Expr::Lit(ExprLit { lit: Lit::Int(n), .. }) = value else {
        return Err(syn::Error::new_spanned(value, "`permits` takes an integer literal, e.g. `permits = 4`"));
    };
    match n.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new_spanned(n, "`permits` must be at least 1")),
        Ok(permits) => Ok((permits, n.span())),
        Err(_) => {
            Err(syn::Error::new_spanned(n, format!("`permits` must fit in a u32 (at most {})", u32::MAX)))
        }
    }
}

fn string_literal(value: &Expr, name: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        // tokio's convention: `crate = "path"`, a path in a string.
        other if name == "crate" => Err(syn::Error::new_spanned(
            other,
            format!(
                "`crate` takes the path as a string literal: `crate = \"{}\"`",
                quote::ToTokens::to_token_stream(other).to_string().replace(' ', "")
            ),
        )),
        other => Err(syn::Error::new_spanned(other, format!("`{name}` takes a string literal"))),
    }
}

/// The path in `crate = "..."`, its tokens spanned on the literal so that a path that does not
/// resolve is reported there.
fn crate_path(lit: &LitStr) -> syn::Result<Path> {
    lit.parse_with(Path::parse_mod_style).map_err(|_| {
        syn::Error::new_spanned(
            lit,
            format!(
                "`crate` must be a path to lock-core or a re-export of it, e.g. \
                 `crate = \"lock_scheduler::lock_core\"`; got {:?}",
                lit.value()
            ),
        )
    })
}
