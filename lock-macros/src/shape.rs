//! Where the body to lock lives. Usually the block of an `async fn`; but on a method of an
//! `#[async_trait]` impl, async-trait expands first and leaves a plain fn whose body ends in
//! `Box::pin(async move { .. })`. As tracing-attributes' `AsyncInfo` does for `#[instrument]`,
//! that shape is recognised and the `async` block inside `Box::pin` is locked instead.

use syn::{Block, Expr, GenericArgument, ItemFn, PathArguments, ReturnType, Stmt, Type, TypeParamBound};

/// How the annotated fn carries its body.
pub(crate) enum Shape {
    /// `async fn f(..) -> R { body }`: the fn's block is the body.
    AsyncFn,
    /// `fn f(..) -> Pin<Box<dyn Future<Output = R> + ..>> { ..; Box::pin(async move { body }) }`,
    /// as `#[async_trait]` writes it: the `async` block is the body.
    BoxedFuture,
}

impl Shape {
    /// The shape of `func`, or `None` for a plain fn that returns no boxed `async` block.
    /// (`&mut` only because [`boxed_async_block`] is the one lookup, used again to expand.)
    pub(crate) fn of(func: &mut ItemFn) -> Option<Shape> {
        if func.sig.asyncness.is_some() {
            Some(Shape::AsyncFn)
        } else if boxed_async_block(&mut func.block).is_some() {
            Some(Shape::BoxedFuture)
        } else {
            None
        }
    }
}

/// The argument of the fn's trailing `Box::pin(..)`, if it is an `async` block
/// (an [`Expr::Async`]).
pub(crate) fn boxed_async_block(block: &mut Block) -> Option<&mut Expr> {
    match block.stmts.last_mut()? {
        Stmt::Expr(Expr::Call(call), None) if is_box_pin(&call.func) && call.args.len() == 1 => {
            call.args.first_mut().filter(|arg| matches!(arg, Expr::Async(_)))
        }
        _ => None,
    }
}

/// `Box::pin`, however qualified (`Box::pin`, `::std::boxed::Box::pin`, ...).
fn is_box_pin(func: &Expr) -> bool {
    let Expr::Path(path) = func else { return false };
    let mut segments = path.path.segments.iter().rev();
    matches!(
        (segments.next(), segments.next()),
        (Some(pin), Some(boxed)) if pin.ident == "pin" && boxed.ident == "Box"
    )
}

/// `R` in a `Pin<Box<dyn Future<Output = R> + ..>>` return type.
pub(crate) fn future_output(output: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = output else { return None };
    let boxed = only_type_argument(ty, "Pin")?;
    let Type::TraitObject(object) = only_type_argument(boxed, "Box")? else { return None };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else { return None };
        let future = bound.path.segments.last().filter(|s| s.ident == "Future")?;
        let PathArguments::AngleBracketed(args) = &future.arguments else { return None };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

/// `T` in `Name<T>` (however qualified).
fn only_type_argument<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last().filter(|s| s.ident == name)?;
    let PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    match args.args.first()? {
        GenericArgument::Type(ty) if args.args.len() == 1 => Some(ty),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_async_trait_shape() {
        let mut func: ItemFn = syn::parse_quote! {
            fn daily<'life0, 'async_trait>(&'life0 self) -> ::core::pin::Pin<Box<
                dyn ::core::future::Future<Output = Result<u32, LockError>> + ::core::marker::Send + 'async_trait
            >> {
                Box::pin(async move { let __self = self; Ok(1) })
            }
        };
        assert!(matches!(Shape::of(&mut func), Some(Shape::BoxedFuture)));
        let output = future_output(&func.sig.output).map(|ty| quote::quote!(#ty).to_string());
        assert_eq!(output.as_deref(), Some("Result < u32 , LockError >"));
    }

    #[test]
    fn rejects_other_plain_fns() {
        for mut func in [
            syn::parse_quote!(
                fn job() {}
            ),
            syn::parse_quote!(
                fn job() -> Pin<Box<dyn Future<Output = ()>>> {
                    Box::pin(ready(()))
                }
            ),
            syn::parse_quote!(
                fn job() -> Pin<Box<dyn Future<Output = ()>>> {
                    Box::pin(async {});
                }
            ),
        ] {
            assert!(Shape::of(&mut func).is_none(), "{}", quote::quote!(#func));
        }
    }
}
