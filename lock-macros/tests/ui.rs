//! Compile-fail suite for `#[distributed_lock]`: every misuse is a compile error that points
//! at the offending token. Regenerate the expected output after an intended change with
//! `TRYBUILD=overwrite cargo test -p lock-macros --test ui`, and review the `.stderr` diff.
//!
//! The `.stderr` files hold rustc's wording, which changes between releases: the suite runs on
//! the stable release they were written with (named in the `rustversion` gate below) and is
//! ignored on others, so a toolchain upgrade cannot turn CI red. After an upgrade, regenerate
//! the files and move the version.

#[rustversion::attr(not(stable(1.95)), ignore = "the .stderr files hold rustc 1.95's messages")]
#[test]
fn misuse_is_a_spanned_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
