//! The expansion, in three named steps (tokio-macros' `Configuration::build()`): [`parse`] the
//! arguments and the item, [`LockedFn::build`] validates everything before anything is written,
//! and [`LockedFn::expand`] writes the fn back with its body under the lock.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ExprAsync, FnArg, Ident, ItemFn, Pat, Path, ReturnType, Signature};

use crate::key::{self, KeyTemplate};
use crate::options::{self, HoldKind, Options};
use crate::shape::{self, Shape};

/// What the expansion names `<crate>::__private` (`use <crate>::__private as ..;` in the body):
/// every path into lock-core goes through it, so a wrong `crate = "..."` is one unresolved
/// import.
const PRIVATE: &str = "__distributed_lock_private";

/// parse → validate → expand. On error, the caller emits the fn unchanged next to the errors.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let (options, func) = parse(args, item)?;
    Ok(LockedFn::build(options, func)?.expand())
}

/// Step 1: the item must be a fn; the arguments are parsed and checked on their own (each option
/// well-formed, no duplicates or conflicts). Their errors are kept for [`LockedFn::build`] to
/// report together with the fn's.
fn parse(args: TokenStream, item: TokenStream) -> syn::Result<(syn::Result<Options>, ItemFn)> {
    let func: ItemFn = syn::parse2(item.clone()).map_err(|_| {
        syn::Error::new_spanned(&item, "#[distributed_lock] can only be applied to an `async fn`")
    })?;
    // Attributes expand from the top: below this one, `#[scheduled]` would see the fn with its
    // body already replaced and could not tell that it takes its own lock.
    if let Some(scheduled) =
        func.attrs.iter().find(|a| a.path().segments.last().is_some_and(|s| s.ident == "scheduled"))
    {
        return Err(syn::Error::new_spanned(
            scheduled,
            "put `#[scheduled]` above `#[distributed_lock]`: attributes expand from the top, and the \
             scheduler must see the lock attribute to run the job under it",
        ));
    }
    Ok((options::parse(args, Span::call_site()), func))
}

/// A validated `#[distributed_lock]` fn, ready to expand.
struct LockedFn {
    func: ItemFn,
    shape: Shape,
    call: LockCall,
}

/// The call into `<crate>::__private` that replaces the body: everything but the body.
struct LockCall {
    options: Options,
    key: KeyTemplate,
    /// The path to lock-core, and where to report it if it does not resolve.
    krate: (Path, Span),
    /// The locked body's output type (`_` when it cannot be named) and its span: the runtime
    /// fn carries the return-type contract, so that a violation is reported there.
    ret: (TokenStream, Span),
}

impl LockedFn {
    /// Step 2: checks the options against the fn (an `async fn`, or a method as
    /// `#[async_trait]` rewrote it; key placeholders naming its parameters) and settles the
    /// return type. Option errors and a fn that is not async are reported together.
    fn build(options: syn::Result<Options>, mut func: ItemFn) -> syn::Result<LockedFn> {
        let shape = Shape::of(&mut func).ok_or_else(|| {
            syn::Error::new_spanned(
                func.sig.fn_token,
                "#[distributed_lock] can only be applied to an `async fn`: the lock is held across awaits",
            )
        });
        let (shape, options) = both(shape, options)?;
        let key = key::parse(&options.key, &parameter_names(&func.sig))?;
        let krate = match &options.krate {
            Some(krate) => krate.clone(),
            None => (syn::parse_quote!(::lock_core), Span::call_site()),
        };
        let ret = output_type(&func.sig, &shape);
        Ok(LockedFn { func, shape, call: LockCall { options, key, krate, ret } })
    }

    /// Step 3: the fn with its signature unchanged and its body run under the lock. For an
    /// `#[async_trait]` method the `async` block inside `Box::pin` is the body, and the fn
    /// around it stays as async-trait wrote it.
    fn expand(self) -> TokenStream {
        let LockedFn { mut func, shape, call } = self;
        match shape {
            Shape::AsyncFn => {
                let ItemFn { attrs, vis, sig, block } = func;
                let locked = call.wrap(quote!(async move #block));
                quote! {
                    #(#attrs)*
                    #vis #sig {
                        #locked
                    }
                }
            }
            Shape::BoxedFuture => {
                // `build` found this block; the fn is otherwise left as it is.
                if let Some(arg) = shape::boxed_async_block(&mut func.block)
                    && let Expr::Async(ExprAsync { attrs, capture, block, .. }) = arg
                {
                    let locked = call.wrap(quote!(async #capture #block));
                    *arg = Expr::Verbatim(quote!(#(#attrs)* async #capture { #locked }));
                }
                func.into_token_stream()
            }
        }
    }
}

impl LockCall {
    /// The statements that run `body` (an `async` block) under the lock and return its output.
    fn wrap(&self, body: TokenStream) -> TokenStream {
        // Each use of the alias carries the span of the tokens it serves, so that errors from
        // the call it begins are reported on them, not on the whole attribute.
        let private = |span| Ident::new(PRIVATE, span);
        let (krate, krate_span) = &self.krate;
        let alias = private(*krate_span);
        let import = quote_spanned!(*krate_span=> use #krate::__private as #alias;);
        // `lease` is checked against lock-core's `MIN_LEASE` where that constant lives: a
        // const-evaluation panic, reported at the lease's literal.
        let lease_check = self.options.lease.map(|(lease, span)| {
            let (ms, private) = (millis(lease), private(span));
            quote_spanned!(span=> const _: () = #private::check_lease_millis(#ms);)
        });
        let client = match &self.options.client {
            Some(expr) => {
                let private = private(expr.span());
                quote_spanned!(expr.span()=> #private::client_from(&(#expr)))
            }
            None => {
                let private = private(Span::call_site());
                quote!(#private::default_client())
            }
        };
        let key = self.key();
        let lock_options = self.lock_options(&private(Span::call_site()));
        let (ret_ty, ret_span) = &self.ret;
        let runner = if self.options.skip_if_held { "run_skip" } else { "run" };
        let spec = match self.options.hold {
            HoldKind::Lock => quote!(new(#key, #lock_options)),
            HoldKind::Permit(permits) => quote!(permit(#key, #lock_options, #permits)),
            HoldKind::Read => quote!(read(#key, #lock_options)),
            HoldKind::Write => quote!(write(#key, #lock_options)),
        };
        let (runner, private_at_ret) = (Ident::new(runner, *ret_span), private(*ret_span));
        // The call and its `.await` carry the return type's span too, so that an unusable
        // return type is reported once, there.
        quote_spanned! {*ret_span=>
            #import
            #lease_check
            #private_at_ret::#runner::<#ret_ty, _>(
                #client,
                #private_at_ret::Spec::#spec,
                #body,
            )
            .await
        }
    }

    /// The expression formatting the key, spanned on the key's literal.
    fn key(&self) -> TokenStream {
        let span = self.options.key.span();
        let KeyTemplate { format, args, text } = &self.key;
        if args.is_empty() {
            quote_spanned!(span=> ::std::borrow::ToOwned::to_owned(#text))
        } else {
            quote_spanned!(span=> ::std::format!(#format #(, #args)*))
        }
    }

    /// `LockOptions::new()` and a setter per option given.
    fn lock_options(&self, private: &Ident) -> TokenStream {
        let options = &self.options;
        let duration = |d: Duration| {
            let ms = millis(d);
            quote!(::core::time::Duration::from_millis(#ms))
        };
        let mut tokens = quote!(#private::LockOptions::new());
        if let Some(wait) = options.wait.map(duration) {
            tokens.extend(quote!(.wait(#wait)));
        }
        if let Some(lease) = options.lease.map(|(lease, _)| duration(lease)) {
            tokens.extend(quote!(.lease(#lease)));
        }
        if let Some(at_least) = options.at_least.map(duration) {
            tokens.extend(quote!(.at_least(#at_least)));
        }
        if options.fencing {
            tokens.extend(quote!(.fencing(true)));
        }
        if options.on_lost_continue {
            tokens.extend(quote!(.on_lost(#private::OnLost::Continue)));
        }
        tokens
    }
}

/// Both results, or every error of the two.
fn both<A, B>(a: syn::Result<A>, b: syn::Result<B>) -> syn::Result<(A, B)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(mut e), Err(more)) => {
            e.combine(more);
            Err(e)
        }
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The locked body's output type, for the runner's turbofish, and the span of the return type.
/// An `impl Trait` cannot be named there; inference covers it. Under `#[async_trait]` it is the
/// `Output` of the boxed future.
fn output_type(sig: &Signature, shape: &Shape) -> (TokenStream, Span) {
    let ty = match shape {
        Shape::AsyncFn => match &sig.output {
            ReturnType::Type(_, ty) => Some(&**ty),
            ReturnType::Default => {
                let span = sig.ident.span();
                return (quote_spanned!(span=> ()), span);
            }
        },
        Shape::BoxedFuture => shape::future_output(&sig.output),
    };
    match ty {
        Some(ty) if !contains_impl_trait(ty) => (quote!(#ty), ty.span()),
        Some(ty) => (quote!(_), ty.span()),
        None => (quote!(_), sig.output.span()),
    }
}

fn contains_impl_trait(ty: &syn::Type) -> bool {
    ty.to_token_stream().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "impl"))
        || matches!(ty, syn::Type::ImplTrait(_))
}

/// Names a key placeholder may refer to: `self` (with a receiver) and identifier parameters.
fn parameter_names(sig: &Signature) -> Vec<String> {
    sig.inputs
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

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> String {
        expand(args, item).map_or_else(|e| panic!("{e}"), |tokens| tokens.to_string())
    }

    #[test]
    fn every_path_into_lock_core_goes_through_the_crate_option() {
        let item = quote! {
            async fn job(&self, id: u64) -> Result<(), LockError> { Ok(()) }
        };
        let args = quote! {
            crate = "my::reexport", key = "job:{self.tenant}:{id}", wait = "1s", lease = "10s",
            at_least = "20ms", fencing, on_lost = "continue", client = self.client
        };
        let expanded = expand_str(args, item.clone());
        assert!(!expanded.contains("lock_core"), "{expanded}");
        assert!(
            expanded.contains("use my :: reexport :: __private as __distributed_lock_private"),
            "{expanded}"
        );
        let skip = expand_str(quote!(crate = "my::reexport", key = "job", skip_if_held), item);
        assert!(!skip.contains("lock_core"), "{skip}");
        assert!(
            expand_str(
                quote!(key = "job"),
                quote!(
                    async fn job() {}
                )
            )
            .contains(":: lock_core :: __private")
        );
    }

    #[test]
    fn locks_the_async_block_of_an_async_trait_method() {
        let item = quote! {
            fn daily<'life0, 'async_trait>(&'life0 self, day: u32) -> ::core::pin::Pin<Box<
                dyn ::core::future::Future<Output = Result<u32, LockError>> + ::core::marker::Send + 'async_trait
            >> {
                Box::pin(async move { let __self = self; Ok(day) })
            }
        };
        let expanded = expand_str(quote!(key = "report:{self.tenant}:{day}", client = self.client), item);
        for expected in [
            "Box :: pin (async move { use :: lock_core :: __private as __distributed_lock_private ;"
                .to_owned(),
            quote!(__distributed_lock_private::run::<Result<u32, LockError>, _>).to_string(),
            quote!(::std::format!("report:{}:{}", &self.tenant, &day)).to_string(),
            quote!(async move {
                let __self = self;
                Ok(day)
            })
            .to_string(),
        ] {
            assert!(expanded.contains(&expected), "{expected}\nin {expanded}");
        }
    }

    #[test]
    fn rejects_a_plain_fn_with_its_option_errors() {
        let e = expand(
            quote!(key = "job", bogus),
            quote!(
                fn job() {}
            ),
        )
        .err()
        .map(|e| e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>());
        let e = e.unwrap_or_default();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("only be applied to an `async fn`"), "{e:?}");
        assert!(e[1].contains("unknown option `bogus`"), "{e:?}");
    }
}
