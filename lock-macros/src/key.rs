//! The key template: literal text with `{param}`, `{param.field}` and `{self.field}`
//! placeholders (and `{{` / `}}` for literal braces), checked against the fn's parameters.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::{Ident, LitStr};

/// A parsed key: a `format!` string and one expression per placeholder, and the plain text
/// (braces unescaped) when there are no placeholders.
pub(crate) struct KeyTemplate {
    pub(crate) format: String,
    pub(crate) args: Vec<TokenStream>,
    pub(crate) text: String,
}

/// Parses `lit`, checking each placeholder's root against `params` (`self` included when the
/// fn has a receiver). Errors point at the key literal.
pub(crate) fn parse(lit: &LitStr, params: &[String]) -> syn::Result<KeyTemplate> {
    let text = lit.value();
    let span = lit.span();
    let err = |msg: String| syn::Error::new(span, msg);
    if text.trim().is_empty() {
        return Err(err("`key` must not be empty; use a name such as \"lock:daily-report\"".into()));
    }
    let mut format = String::new();
    let mut plain = String::new();
    let mut args = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                format.push_str("{{");
                plain.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                format.push_str("}}");
                plain.push('}');
            }
            '}' => {
                return Err(err(format!(
                    "unbalanced `}}` in key {text:?}: write `}}}}` for a literal brace"
                )));
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => {
                            return Err(err(format!(
                                "unbalanced `{{` in key {text:?}: close the placeholder with `}}`, \
                                 or write `{{{{` for a literal brace"
                            )));
                        }
                        Some(c) => inner.push(c),
                    }
                }
                args.push(placeholder(&inner, &text, span, params)?);
                format.push_str("{}");
            }
            c => {
                format.push(c);
                plain.push(c);
            }
        }
    }
    Ok(KeyTemplate { format, args, text: plain })
}

fn placeholder(inner: &str, text: &str, span: Span, params: &[String]) -> syn::Result<TokenStream> {
    let err = |msg: String| syn::Error::new(span, msg);
    let inner = inner.trim();
    if inner.is_empty() {
        return Err(err(format!(
            "empty placeholder `{{}}` in key {text:?}: name a parameter, e.g. `{{id}}` or `{{order.id}}`"
        )));
    }
    let malformed = || {
        err(format!(
            "malformed placeholder `{{{inner}}}` in key {text:?}: expected `{{param}}`, \
             `{{param.field}}` or `{{self.field}}`"
        ))
    };
    let mut parts = inner.split('.').map(str::trim);
    let root = parts.next().unwrap_or_default();
    // Every token is spanned on the key literal, so a missing field or a type without
    // `Display` is reported there.
    let root_ident = if root == "self" {
        Ident::new("self", span)
    } else {
        let mut ident = syn::parse_str::<Ident>(root).map_err(|_| malformed())?;
        ident.set_span(span);
        ident
    };
    let mut fields = Vec::new();
    for part in parts {
        if !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()) {
            // A tuple field: `{pair.0}`.
            let index: u32 = part.parse().map_err(|_| malformed())?;
            let index = syn::Index { index, span };
            fields.push(quote_spanned!(span=> .#index));
        } else {
            let mut ident = syn::parse_str::<Ident>(part).map_err(|_| malformed())?;
            ident.set_span(span);
            fields.push(quote_spanned!(span=> .#ident));
        }
    }
    if root == "self" && fields.is_empty() {
        return Err(err(format!("placeholder `{{self}}` in key {text:?}: name a field, e.g. `{{self.id}}`")));
    }
    if !params.iter().any(|p| p == root) {
        let known = if params.is_empty() {
            "the fn has no parameters".to_owned()
        } else {
            format!("parameters: {}", params.join(", "))
        };
        return Err(err(format!(
            "placeholder `{{{inner}}}` in key {text:?} names no parameter `{root}` ({known})"
        )));
    }
    Ok(quote_spanned!(span=> &#root_ident #(#fields)*))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> LitStr {
        LitStr::new(s, Span::call_site())
    }

    fn params() -> Vec<String> {
        vec!["order".into(), "self".into(), "id".into()]
    }

    #[test]
    fn formats_placeholders_and_escapes() {
        let t = parse(&lit("lock:{{orders}}:{order.product_id}:{id}"), &params()).unwrap();
        assert_eq!(t.format, "lock:{{orders}}:{}:{}");
        assert_eq!(t.args.len(), 2);
        assert_eq!(t.args[0].to_string(), "& order . product_id");
    }

    #[test]
    fn rejects_malformed_keys() {
        for (key, needle) in [
            ("", "must not be empty"),
            ("lock:{order.}", "malformed placeholder"),
            ("lock:{order", "unbalanced `{`"),
            ("lock:order}", "unbalanced `}`"),
            ("lock:{}", "empty placeholder"),
            ("lock:{missing}", "names no parameter `missing`"),
            ("lock:{self}", "name a field"),
        ] {
            let e = parse(&lit(key), &params()).err().unwrap_or_else(|| panic!("{key} accepted"));
            assert!(e.to_string().contains(needle), "{key}: {e}");
        }
    }

    /// Template text: literal pieces, escaped braces, placeholders of known and unknown
    /// parameters, stray braces.
    fn template_like() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            4 => "[a-z0-9:._ -]{1,6}",
            1 => Just("{{".to_owned()),
            1 => Just("}}".to_owned()),
            1 => Just("{".to_owned()),
            1 => Just("}".to_owned()),
            2 => prop::sample::select(vec!["{order.id}", "{id}", "{self.id}", "{pair.0}", "{order.}", "{}", "{fn}", "{self}", "{ id }"])
                .prop_map(str::to_owned),
            1 => any::<char>().prop_map(String::from),
        ];
        prop::collection::vec(piece, 0..10).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        #[test]
        fn any_template_parses_or_is_an_error_never_a_panic(text in template_like()) {
            let params = vec!["order".to_owned(), "self".to_owned(), "id".to_owned(), "pair".to_owned()];
            let first = parse(&lit(&text), &params).map(|t| t.format).map_err(|e| e.to_string());
            let again = parse(&lit(&text), &params).map(|t| t.format).map_err(|e| e.to_string());
            proptest::prop_assert_eq!(&first, &again);
        }

        #[test]
        fn literal_text_round_trips_through_its_escapes(text in "[a-z:{}é -]{1,20}") {
            proptest::prop_assume!(!text.trim().is_empty());
            // Braces written as `{{` / `}}` come back as the text itself, with no placeholder.
            let escaped = text.replace('{', "{{").replace('}', "}}");
            let t = parse(&lit(&escaped), &[]).expect("escaped text parses");
            proptest::prop_assert_eq!(t.text, text);
            proptest::prop_assert!(t.args.is_empty());
            proptest::prop_assert_eq!(t.format, escaped);
        }
    }
}
