//! Compile-fail suite for `#[distributed_lock]`: every misuse is a compile error that points
//! at the offending token. Regenerate the expected output after an intended change with
//! `TRYBUILD=overwrite cargo test -p lock-macros --test ui`, and review the `.stderr` diff.

#[test]
fn misuse_is_a_spanned_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
