//! The `#[distributed_lock]` attribute of `lock-core`. Use it through `lock_core`:
//! `use lock_core::distributed_lock;` — see the documentation there.
//!
//! The macro is a thin shim: it parses and validates its arguments at compile time, then
//! replaces the fn's body with one call into `lock_core::__private`, which acquires the lock,
//! runs the original body as a future and releases the lock.

mod duration;
mod key;
mod options;

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType};

/// Runs the annotated `async fn` under a distributed lock held in Redis, so that across all
/// replicas only one call with the same key runs its body at a time.
///
/// ```ignore
/// use lock_core::distributed_lock;
///
/// // A job every replica fires; one runs it, the others skip.
/// #[distributed_lock(key = "lock:daily-report", skip_if_held)]
/// async fn generate_daily_report() -> anyhow::Result<()> {
///     Ok(())
/// }
///
/// // Per-resource exclusion with a fencing token, waiting up to 2 s.
/// #[distributed_lock(key = "lock:product:{order.product_id}", wait = "2s", lease = "10s", fencing)]
/// async fn place_order(&self, order: Order) -> Result<Receipt, OrderError> {
///     let fence = lock_core::current().and_then(|l| l.fence()).unwrap_or(0);
///     self.store.decrement(order.product_id, order.qty, fence).await
/// }
/// ```
///
/// # Options
///
/// | option | default | meaning |
/// |---|---|---|
/// | `key = "..."` | required | The Redis key. `{param}`, `{param.field}` and `{self.field}` are replaced by the value's `Display` form; each placeholder must name a parameter (checked at compile time). `{{` and `}}` are literal braces (e.g. a cluster hash tag). |
/// | `skip_if_held` | off | If another owner holds the lock, log `lock <key> is held by another instance, skipping` at info and return the "skipped" value without running the body. |
/// | `wait = "5s"` | off | Wait up to this long for a held lock, then fail with `LockError::Timeout`. Without `wait` or `skip_if_held`, a held lock fails at once with `LockError::Held`. |
/// | `lease = "10s"` | watchdog | A fixed lease: the key expires this long after acquisition and is never renewed. Without it, the client's watchdog lease (30 s) is renewed every 10 s while the body runs, and a crashed holder's lock frees within one lease. |
/// | `at_least = "30s"` | off | Keep the lock at least this long after acquisition even if the body ends sooner (ShedLock's `lockAtLeastFor`). |
/// | `fencing` | off | Draw a fencing token; the body reads it through `lock_core::current()`. |
/// | `client = expr` | installed default | The `LockClient` to use (`LockClient`, `&LockClient`, `Arc<LockClient>`; may use `self`). Without it, the client installed with `LockClient::install_default()`; none installed is a `LockError::NotConfigured` at call time. |
/// | `on_lost = "cancel"` | `"cancel"` | If the lock is lost while the body runs (renewal refused, or the lease ran out while Redis was unreachable), `"cancel"` drops the body at its next await and returns `LockError::Lost`; `"continue"` lets it finish and only logs. |
///
/// Durations are an integer and a unit: `"250ms"`, `"10s"`, `"5m"`, `"1h"`; all are checked at
/// compile time, and a zero duration is rejected.
///
/// Why `on_lost = "cancel"` is the default: a lock is taken so that the body never runs
/// without it. Once this process knows it lost the lock, another replica may already be
/// running the same body, and stopping at the next await is the only way to keep that
/// promise. Choose `"continue"` for bodies that must not stop half-way (several writes
/// without a transaction), and protect their writes with `fencing`.
///
/// # Return type
///
/// - With `skip_if_held`, the return type must be able to say "skipped" (the `Skippable`
///   trait): `()`, `Option<T>` (`None`), or `Result<T, E>` where `T` is skippable and
///   `E: From<LockError>` (`Ok(())` when skipped). For `()` and `Option<T>`, a Redis failure is
///   logged as an error and the call is skipped.
/// - Otherwise (fail fast or `wait`), it must be `Result<T, E>` with `E: From<LockError>`
///   (`anyhow::Error` works), which receives `Held`, `Timeout`, `Lost` and Redis errors.
///
/// A return type that does not fit is a compile error naming the rule.
///
/// # Behaviour
///
/// The signature is kept; only the body is replaced by one call into `lock_core::__private`
/// that acquires, runs the original body as a future, and releases — on return, on `?`
/// errors, on panic and when the caller's future is dropped. Inside the body, calling another
/// annotated fn (or `LockClient::lock`) with the same key on the same client is re-entrant: it
/// neither deadlocks nor touches Redis. Works on free fns, inherent and trait-impl methods
/// (`&self`, `&mut self`, `self: Arc<Self>`), generic fns and `impl Trait` arguments.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: proc_macro2::TokenStream = item.into();
    match expand(args.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        // Emit the fn unchanged next to the errors, so the rest of the crate (and the
        // editor) still sees it.
        Err(e) => {
            let mut out = e.to_compile_error();
            out.extend(item);
            out.into()
        }
    }
}

fn expand(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let attr_span = Span::call_site();
    let func: ItemFn = syn::parse2(item.clone()).map_err(|_| {
        syn::Error::new_spanned(&item, "#[distributed_lock] can only be applied to an `async fn`")
    })?;
    let not_async = func.sig.asyncness.is_none().then(|| {
        syn::Error::new_spanned(
            func.sig.fn_token,
            "#[distributed_lock] can only be applied to an `async fn`: the lock is held across awaits",
        )
    });
    let options = match (not_async, options::parse(args, attr_span)) {
        (None, Ok(options)) => options,
        (Some(mut e), Err(more)) => {
            e.combine(more);
            return Err(e);
        }
        (Some(e), Ok(_)) | (None, Err(e)) => return Err(e),
    };

    let params = parameter_names(&func);
    let template = key::parse(&options.key, &params)?;

    let format = &template.format;
    let key_args = &template.args;
    let key_span = options.key.span();
    let key = if key_args.is_empty() {
        let text = &template.text;
        quote_spanned!(key_span=> ::std::string::String::from(#text))
    } else {
        quote_spanned!(key_span=> ::std::format!(#format #(, #key_args)*))
    };
    let client = match &options.client {
        Some(expr) => quote_spanned!(expr.span()=> ::lock_core::__private::client_from(&(#expr))),
        None => quote!(::lock_core::__private::default_client()),
    };
    let duration = |d: std::time::Duration| {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        quote!(::core::time::Duration::from_millis(#ms))
    };
    let mut lock_options = quote!(::lock_core::LockOptions::new());
    if let Some(wait) = options.wait {
        let wait = duration(wait);
        lock_options.extend(quote!(.wait(#wait)));
    }
    if let Some(lease) = options.lease {
        let lease = duration(lease);
        lock_options.extend(quote!(.lease(#lease)));
    }
    if let Some(at_least) = options.at_least {
        let at_least = duration(at_least);
        lock_options.extend(quote!(.at_least(#at_least)));
    }
    if options.fencing {
        lock_options.extend(quote!(.fencing(true)));
    }
    if options.on_lost_continue {
        lock_options.extend(quote!(.on_lost(::lock_core::OnLost::Continue)));
    }
    // The runtime fn carries the return-type contract; spanning it on the return type puts a
    // violation's message there.
    // Naming the return type in a turbofish makes a contract violation point at it. An
    // `impl Trait` return cannot be named; inference covers it.
    let (ret_span, ret_ty) = match &func.sig.output {
        ReturnType::Type(_, ty) if !contains_impl_trait(ty) => (ty.span(), quote!(#ty)),
        ReturnType::Type(_, ty) => (ty.span(), quote!(_)),
        ReturnType::Default => {
            let span = func.sig.ident.span();
            (span, quote_spanned!(span=> ()))
        }
    };
    let runner = syn::Ident::new(if options.skip_if_held { "run_skip" } else { "run" }, ret_span);
    let run = quote_spanned!(ret_span=> ::lock_core::__private::#runner::<#ret_ty, _>);

    let ItemFn { attrs, vis, sig, block } = func;
    // The call and its `.await` carry the return type's span too, so that an unusable return
    // type is reported once, there.
    let call = quote_spanned! {ret_span=>
        #run(
            #client,
            ::lock_core::__private::Spec::new(#key, #lock_options),
            async move #block,
        )
        .await
    };
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #call
        }
    })
}

fn contains_impl_trait(ty: &syn::Type) -> bool {
    ty.to_token_stream().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "impl"))
        || matches!(ty, syn::Type::ImplTrait(_))
}

/// Names a key placeholder may refer to: `self` (with a receiver) and identifier parameters.
fn parameter_names(func: &ItemFn) -> Vec<String> {
    func.sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Receiver(_) => Some("self".to_owned()),
            FnArg::Typed(pat) => match &*pat.pat {
                Pat::Ident(ident) => Some(ident.ident.to_token_stream().to_string()),
                _ => None,
            },
        })
        .collect()
}
