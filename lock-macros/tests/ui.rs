//! Compile-fail suite for `#[distributed_lock]`: every misuse is a compile error that points
//! at the offending token. Regenerate the expected output after an intended change with
//! `TRYBUILD=overwrite cargo test -p lock-macros --test ui`, and review the `.stderr` diff.
//!
//! The `.stderr` files hold rustc's wording, which changes between releases: they are written
//! with the toolchain `rust-toolchain.toml` pins. The suite always runs; on another toolchain
//! it fails (with the diff) rather than pass silently. After moving the pin, regenerate the
//! files.

#[test]
fn misuse_is_a_spanned_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
