//! `#[singleton]`: parse and check its options and function, then expand into the function
//! unchanged and, beside it, a module of the same name with `singleton()` and its registration
//! in the link-time registry the scheduler reads at start-up (as `#[scheduled]` does for jobs).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, FnArg, ItemFn, Lit, LitStr, Meta, Path, Token};

use crate::options::combine;

const OPTIONS: &str = "name, election, restart_delay, group, crate";

/// The longest restart delay the scheduler accepts.
const MAX_RESTART_DELAY: std::time::Duration = std::time::Duration::from_secs(60 * 60);

#[derive(Default)]
struct Options {
    name: Option<LitStr>,
    election: Option<LitStr>,
    restart_delay: Option<std::time::Duration>,
    group: Option<LitStr>,
    krate: Option<Path>,
}

/// Parses, checks and expands.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = parse(args);
    let function = syn::parse2::<ItemFn>(item).map_err(|_| {
        syn::Error::new(
            Span::call_site(),
            "#[singleton] goes on an `async fn`: the task one replica at a time runs",
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
    check_function(&function)?;
    Ok(generate(&function, &options))
}

fn string_literal(value: &Expr, name: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(other, format!("`{name}` takes a string literal"))),
    }
}

fn parse(args: TokenStream) -> syn::Result<Options> {
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    let mut options = Options::default();
    let mut seen: Vec<String> = Vec::new();
    let mut errors = None;
    for meta in metas {
        if let Err(e) = add(&mut options, &mut seen, meta) {
            combine(&mut errors, e);
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(options),
    }
}

fn add(options: &mut Options, seen: &mut Vec<String>, meta: Meta) -> syn::Result<()> {
    let path = meta.path().clone();
    let name = path.get_ident().map(ToString::to_string).unwrap_or_default();
    if !OPTIONS.split(", ").any(|o| o == name) {
        return Err(syn::Error::new_spanned(
            &path,
            format!("unknown option `{}`; valid options: {OPTIONS}", quote!(#path)),
        ));
    }
    if seen.contains(&name) {
        return Err(syn::Error::new_spanned(&path, format!("duplicate option `{name}`")));
    }
    seen.push(name.clone());
    let Meta::NameValue(nv) = meta else {
        return Err(syn::Error::new_spanned(
            path,
            format!("`{name}` needs a value, e.g. `{name} = \"...\"`"),
        ));
    };
    let lit = string_literal(&nv.value, &name)?;
    let text = lit.value();
    let error = |message: String| syn::Error::new_spanned(&lit, message);
    match name.as_str() {
        "name" => {
            if let Some(problem) = lock_schedule::job_name_problem(&text) {
                return Err(error(format!("invalid singleton name {text:?}: {problem}")));
            }
            options.name = Some(lit);
        }
        "election" => {
            if text.trim().is_empty() {
                return Err(error(
                    "`election` is empty: give the election's key, e.g. `election = \"lock:singleton:feed\"`"
                        .into(),
                ));
            }
            options.election = Some(lit);
        }
        "restart_delay" => {
            let delay = lock_schedule::parse_duration(&text).map_err(|e| error(e.to_string()))?;
            if delay > MAX_RESTART_DELAY {
                return Err(error(format!("`restart_delay` is at most 1h, got {text:?}")));
            }
            options.restart_delay = Some(delay);
        }
        "group" => {
            if text.trim().is_empty() || text.chars().any(char::is_control) {
                return Err(error("`group` must be a non-empty name without control characters".into()));
            }
            options.group = Some(lit);
        }
        _ => {
            let path = lit.parse_with(Path::parse_mod_style).map_err(|_| {
                error(format!(
                    "`crate` must be a path to lock-scheduler or a re-export of it, e.g. \
                     `crate = \"my_app::lock_scheduler\"`; got {text:?}"
                ))
            })?;
            options.krate = Some(path);
        }
    }
    Ok(())
}

/// Every misuse of the function itself, each spanned on its token.
fn check_function(function: &ItemFn) -> syn::Result<()> {
    let sig = &function.sig;
    let mut errors = None;
    if sig.asyncness.is_none() {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                sig.fn_token,
                "#[singleton] goes on an `async fn`: add `async` before `fn`",
            ),
        );
    }
    if let Some(FnArg::Receiver(receiver)) = sig.inputs.first() {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                receiver,
                "#[singleton] goes on a free function, not a method: reach a service's state through \
                 `State<T>` arguments (given with `SchedulerBuilder::state`)",
            ),
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        combine(
            &mut errors,
            syn::Error::new_spanned(&sig.generics, "#[singleton] functions cannot be generic"),
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
                    "#[singleton] arguments are `SingletonContext`, `Term` and `State<T>`, not `impl Trait`",
                ),
            );
        }
    }
    if let Some(variadic) = &sig.variadic {
        combine(&mut errors, syn::Error::new_spanned(variadic, "#[singleton] functions cannot be variadic"));
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
    let some_str = |lit: &Option<LitStr>| match lit {
        Some(l) => quote!(::core::option::Option::Some(#l)),
        None => quote!(::core::option::Option::None),
    };
    let (election, group) = (some_str(&options.election), some_str(&options.group));
    let restart_delay = match options.restart_delay {
        Some(d) => {
            let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            quote!(::core::option::Option::Some(#private::Duration::from_millis(#ms)))
        }
        None => quote!(::core::option::Option::None),
    };
    let mut extract = Vec::new();
    let mut names = Vec::new();
    let mut needs = Vec::new();
    for (i, input) in function.sig.inputs.iter().enumerate() {
        let FnArg::Typed(arg) = input else { continue };
        let ty = &arg.ty;
        let var = format_ident!("__lock_scheduler_arg_{}", i);
        let span = ty.span();
        extract.push(quote_spanned! {span=>
            let #var = <#ty as #private::FromSingleton>::from_singleton(&__lock_scheduler_context, __lock_scheduler_states)?;
        });
        needs.push(quote_spanned!(span=> <#ty as #private::FromSingleton>::need));
        names.push(var);
    }
    let doc = format!(
        "The singleton `{name}` that `#[singleton]` declares on [`{fn_name}`](fn@{fn_name}): add it with \
         `SchedulerBuilder::singleton({fn_name}::singleton())`, or every declared one with \
         `SchedulerBuilder::singletons()`."
    );
    let singleton_doc = format!("The singleton `{name}`, as declared.");
    quote! {
        #function

        #[doc = #doc]
        #vis mod #ident {
            #[allow(unused_imports)]
            use super::*;

            #[doc = #singleton_doc]
            pub fn singleton() -> #krate::Singleton {
                let singleton = #private::singleton(
                    #name,
                    #election,
                    #restart_delay,
                    &[#(#needs),*],
                    |__lock_scheduler_context: #private::SingletonContext, __lock_scheduler_states: &#private::States| {
                        #(#extract)*
                        ::core::result::Result::Ok(super::#ident(#(#names),*))
                    },
                );
                #private::singleton_of_function(singleton, ::core::module_path!())
            }

            #private::inventory::submit! {
                #private::SingletonRegistration::new(#name, ::core::module_path!(), #group, singleton)
            }
        }
    }
}
