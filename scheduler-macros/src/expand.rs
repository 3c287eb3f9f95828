//! The expansion: the function unchanged, and beside it a module of the same name (modules and
//! functions live in different namespaces) holding the job's constructor, `<fn>::job()`, and
//! its registration in the link-time registry the scheduler reads at start-up.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

use crate::options::{self, CatchUp, Options, Overlap, When, combine};

/// Parses, checks and expands; `attr_span` is where a missing schedule is reported.
pub(crate) fn expand(args: TokenStream, item: TokenStream, attr_span: Span) -> syn::Result<TokenStream> {
    let options = options::parse(args, attr_span);
    let function = syn::parse2::<ItemFn>(item.clone()).map_err(|_| {
        syn::Error::new(
            Span::call_site(),
            "#[scheduled] goes on an `async fn`: the job the scheduler runs at each slot",
        )
    });
    let (options, function) = match (options, function) {
        (Ok(options), Ok(function)) => (options, function),
        (Err(mut a), Err(b)) => {
            a.combine(b);
            return Err(a);
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    check_function(&function, &options)?;
    Ok(generate(&function, &options))
}

/// Whether the function also carries `#[distributed_lock]` (it then takes its own lock).
fn distributed_lock(function: &ItemFn) -> bool {
    function
        .attrs
        .iter()
        .any(|attr| attr.path().segments.last().is_some_and(|s| s.ident == "distributed_lock"))
}

/// Every misuse of the function itself, each spanned on its token.
fn check_function(function: &ItemFn, options: &Options) -> syn::Result<()> {
    let sig = &function.sig;
    let mut errors = None;
    if sig.asyncness.is_none() {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                sig.fn_token,
                "#[scheduled] goes on an `async fn`: add `async` before `fn`",
            ),
        );
    }
    if let Some(FnArg::Receiver(receiver)) = sig.inputs.first() {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                receiver,
                "#[scheduled] goes on a free function, not a method: reach a service's state through \
                 `State<T>` arguments (given with `SchedulerBuilder::state`)",
            ),
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                &sig.generics,
                "#[scheduled] functions cannot be generic: the scheduler calls one function per job",
            ),
        );
    }
    for input in &sig.inputs {
        if let FnArg::Typed(arg) = input
            && let syn::Type::ImplTrait(t) = &*arg.ty
        {
            combine(
                &mut errors,
                syn::Error::new_spanned(
                    t,
                    "#[scheduled] arguments are `RunContext` and `State<T>`, not `impl Trait`",
                ),
            );
        }
    }
    if let Some(variadic) = &sig.variadic {
        combine(&mut errors, syn::Error::new_spanned(variadic, "#[scheduled] functions cannot be variadic"));
    }
    if distributed_lock(function) {
        for (option, span) in &options.lock_option_spans {
            let message = if *option == "overlap" {
                "`overlap` needs the lock the scheduler takes, but this function's `#[distributed_lock]` takes \
                 its own, so its slots can only be skipped while it runs: remove `overlap`, or remove \
                 `#[distributed_lock]` (the scheduler then takes `lock`)"
                    .to_owned()
            } else {
                format!(
                    "`{option}` configures the lock the scheduler takes, but this function's \
                     `#[distributed_lock]` takes its own: set it there, or remove `#[distributed_lock]`"
                )
            };
            combine(&mut errors, syn::Error::new(*span, message));
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn duration(d: std::time::Duration, krate: &TokenStream) -> TokenStream {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    quote!(#krate::__private::Duration::from_millis(#ms))
}

fn generate(function: &ItemFn, options: &Options) -> TokenStream {
    let krate: TokenStream = match &options.krate {
        Some(path) => quote!(#path),
        None => quote!(::lock_scheduler),
    };
    let private = quote!(#krate::__private);
    let vis = &function.vis;
    let ident = &function.sig.ident;
    let fn_name = ident.to_string();
    let name = match &options.name {
        Some(lit) => lit.value(),
        None => lock_schedule::default_job_name(&fn_name),
    };
    let (schedule, zone, offset) = match &options.when {
        When::Cron { expr, zone } => {
            let zone = match zone {
                Some(z) => quote!(::core::option::Option::Some(#z)),
                None => quote!(::core::option::Option::None),
            };
            (expr.value(), zone, quote!(::core::option::Option::None))
        }
        When::Every { period, offset } => {
            let offset =
                match offset.as_ref().and_then(|lit| lock_schedule::parse_duration(&lit.value()).ok()) {
                    Some(d) => {
                        let d = duration(d, &krate);
                        quote!(::core::option::Option::Some(#d))
                    }
                    None => quote!(::core::option::Option::None),
                };
            (format!("every {}", period.value().trim()), quote!(::core::option::Option::None), offset)
        }
    };
    let annotated = distributed_lock(function);
    let lock = if annotated {
        quote!(::core::option::Option::None)
    } else {
        let key = options.lock.as_ref().map_or_else(|| format!("lock:job:{name}"), syn::LitStr::value);
        quote!(::core::option::Option::Some(#key))
    };
    let lock_options = lock_options(options, &krate);
    let on_lost = match options.on_lost_continue {
        Some(true) => quote!(::core::option::Option::Some(#private::OnLost::Continue)),
        Some(false) => quote!(::core::option::Option::Some(#private::OnLost::Cancel)),
        None => quote!(::core::option::Option::None),
    };
    let catch_up = match &options.catch_up {
        None => quote!(::core::option::Option::None),
        Some(CatchUp::Never) => quote!(::core::option::Option::Some(#private::CatchUp::Never)),
        Some(CatchUp::Latest(None)) => {
            quote!(::core::option::Option::Some(<#private::CatchUp as ::core::default::Default>::default()))
        }
        Some(CatchUp::Latest(Some(window))) => {
            let window = duration(*window, &krate);
            quote!(::core::option::Option::Some(#private::CatchUp::Latest(#window)))
        }
        Some(CatchUp::Each(n)) => quote!(::core::option::Option::Some(#private::CatchUp::Each(#n))),
    };
    let max_run_time = match options.max_run_time {
        Some(d) => {
            let d = duration(d, &krate);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    };
    let retry = match &options.retry {
        Some(r) => {
            let attempts = r.attempts;
            let mut chain = quote!(#private::RetryPolicy::attempts(#attempts));
            if let Some(base) = r.base {
                let d = duration(base, &krate);
                chain.extend(quote!(.base_delay(#d)));
            }
            if let Some(factor) = r.factor {
                let f = proc_macro2::Literal::f64_suffixed(factor);
                chain.extend(quote!(.factor(#f)));
            }
            if let Some(max) = r.max {
                let d = duration(max, &krate);
                chain.extend(quote!(.max_delay(#d)));
            }
            if let Some(jitter) = r.jitter {
                let j = proc_macro2::Literal::f64_suffixed(jitter);
                chain.extend(quote!(.jitter(#j)));
            }
            quote!(::core::option::Option::Some(#chain))
        }
        None => quote!(::core::option::Option::None),
    };
    let pause_after_failures = match options.pause_after_failures {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let overlap = match &options.overlap {
        Some(Overlap::Skip) => quote!(::core::option::Option::Some(#private::Overlap::Skip)),
        Some(Overlap::Allow) => quote!(::core::option::Option::Some(#private::Overlap::Allow)),
        Some(Overlap::BufferOne) => quote!(::core::option::Option::Some(#private::Overlap::BufferOne)),
        Some(Overlap::Replace) => quote!(::core::option::Option::Some(#private::Overlap::Replace)),
        None => quote!(::core::option::Option::None),
    };
    let jitter = match options.jitter {
        Some(d) => {
            let d = duration(d, &krate);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    };
    let millis = |at: Option<i64>| match at {
        Some(ms) => quote!(::core::option::Option::Some(#ms)),
        None => quote!(::core::option::Option::None),
    };
    let (start_at, end_at) = (millis(options.start_at), millis(options.end_at));
    let max_runs = match options.max_runs {
        Some(n) => quote!(::core::option::Option::Some(#n)),
        None => quote!(::core::option::Option::None),
    };
    let group = match &options.group {
        Some(g) => quote!(::core::option::Option::Some(#g)),
        None => quote!(::core::option::Option::None),
    };

    // One `FromRun` extraction per argument, spanned on its type: an argument the scheduler
    // cannot supply is reported there.
    let mut extract = Vec::new();
    let mut names = Vec::new();
    let mut needs = Vec::new();
    for (i, input) in function.sig.inputs.iter().enumerate() {
        let FnArg::Typed(arg) = input else { continue };
        let ty = &arg.ty;
        let var = format_ident!("__lock_scheduler_arg_{}", i);
        let span = ty.span();
        extract.push(quote_spanned! {span=>
            let #var = <#ty as #private::FromRun>::from_run(&__lock_scheduler_run, __lock_scheduler_states)?;
        });
        needs.push(quote_spanned!(span=> <#ty as #private::FromRun>::need));
        names.push(var);
    }
    let doc = format!(
        "The job `{name}` that `#[scheduled]` declares on [`{fn_name}`](fn@{fn_name}): add it with \
         `SchedulerBuilder::job({fn_name}::job())`, or every declared job with \
         `SchedulerBuilder::scheduled_jobs()`."
    );
    let job_doc = format!("The job `{name}`, as declared.");
    quote! {
        #function

        #[doc = #doc]
        #vis mod #ident {
            #[allow(unused_imports)]
            use super::*;

            #[doc = #job_doc]
            pub fn job() -> #krate::Job {
                let declaration = #private::Declaration {
                    name: #name,
                    schedule: #schedule,
                    zone: #zone,
                    offset: #offset,
                    lock: #lock,
                    lock_options: #lock_options,
                    on_lost: #on_lost,
                    catch_up: #catch_up,
                    max_run_time: #max_run_time,
                    retry: #retry,
                    pause_after_failures: #pause_after_failures,
                    overlap: #overlap,
                    jitter: #jitter,
                    start_at_ms: #start_at,
                    end_at_ms: #end_at,
                    max_runs: #max_runs,
                };
                let job = #private::job(
                    declaration,
                    &[#(#needs),*],
                    |__lock_scheduler_run: #private::RunContext, __lock_scheduler_states: &#private::States| {
                        #(#extract)*
                        ::core::result::Result::Ok(super::#ident(#(#names),*))
                    },
                );
                #private::from_function(job, ::core::module_path!())
            }

            #private::inventory::submit! {
                #private::Registration::new(#name, ::core::module_path!(), #group, job)
            }
        }
    }
}

fn lock_options(options: &Options, krate: &TokenStream) -> TokenStream {
    let private = quote!(#krate::__private);
    if options.lease.is_none() && options.wait.is_none() && options.at_least.is_none() && !options.fencing {
        return quote!(::core::option::Option::None);
    }
    let mut chain = quote!(#private::LockOptions::new());
    if let Some(lease) = options.lease {
        let d = duration(lease, krate);
        chain.extend(quote!(.lease(#d)));
    }
    if let Some(wait) = options.wait {
        let d = duration(wait, krate);
        chain.extend(quote!(.wait(#d)));
    }
    if let Some(at_least) = options.at_least {
        let d = duration(at_least, krate);
        chain.extend(quote!(.at_least(#d)));
    }
    if options.fencing {
        chain.extend(quote!(.fencing(true)));
    }
    quote!(::core::option::Option::Some(#chain))
}
