//! The page's script and stylesheet, and the page for any other path.

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::page::layout::Base;

const SCRIPT: &str = include_str!("../../assets/console.js");
const STYLE: &str = include_str!("../../assets/console.css");

/// `GET /console.js`
pub(crate) async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

/// `GET /console.css`
pub(crate) async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// Any other path.
pub(crate) async fn not_found(base: Base) -> Response {
    // The link goes to the console's root under its mount prefix, not the site's root.
    let page = format!(
        "<!doctype html><title>Not found</title><p>Not found. <a href=\"{}\">Console</a></p>",
        base.root()
    );
    (StatusCode::NOT_FOUND, Html(page)).into_response()
}
