//! Code shown in the README where a complete program would be too long: each block of
//! README.md marked `rust,ignore` is a verbatim copy of the text between a
//! `// snippet: <name>` line and `// end snippet` here (checked by `tests/links.rs`), so
//! what the README shows compiles.

pub mod hero;
