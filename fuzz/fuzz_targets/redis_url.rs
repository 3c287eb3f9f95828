//! A client built from an arbitrary URL: never a panic, and an error never repeats the
//! password the URL carries.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;

static RUNTIME: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"));

const SECRET: &str = "Zq9Secret";

fuzz_target!(|rest: &str| {
    let _runtime = RUNTIME.enter();
    for scheme in ["redis", "rediss+sentinel", "redis+cluster"] {
        let url = format!("{scheme}://:{SECRET}@{rest}");
        if let Err(e) = lock_core::LockClient::builder().url(url).instance_id("fuzz").build() {
            assert!(!e.to_string().contains(SECRET), "{e}");
        }
    }
});
