//! Compile-fail suite for `#[scheduled]`: every misuse is a compile error that points at the
//! offending token, with the message a user needs. Regenerate the expected output after an
//! intended change with `TRYBUILD=overwrite cargo test -p lock-scheduler-macros --test ui`, and
//! review the `.stderr` diff. The wording is rustc's too: written with the toolchain
//! `rust-toolchain.toml` pins.

#[test]
fn misuse_is_a_spanned_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
