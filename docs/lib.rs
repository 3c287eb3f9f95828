//! The documentation's own checks. Every Rust code block of `README.md` and of the guide
//! (`docs/guide/src/*.md`) is compiled by `cargo test -p docs --doc` (the blocks marked
//! `no_run` are compiled, not run: they need a Redis); the README's few `rust,ignore` blocks
//! are copies of the snippets in [`snippets`], which are compiled here, and
//! `tests/links.rs` checks the copies, every link and anchor, and that each chapter is
//! listed below and in the guide's `SUMMARY.md`.

pub mod snippets;

/// The README's code blocks.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;

/// One item per chapter of the guide, so that its code blocks run as doctests.
#[cfg(doctest)]
pub mod guide {
    macro_rules! chapters {
        ($($name:ident => $file:literal,)*) => {
            $(
                #[doc = include_str!(concat!("guide/src/", $file))]
                pub struct $name;
            )*
        };
    }
    chapters! {
        Introduction => "introduction.md",
        GettingStarted => "getting-started.md",
        Locks => "locks.md",
        Primitives => "primitives.md",
        Scheduler => "scheduler.md",
        Elections => "elections.md",
        Migrating => "migrating.md",
        OrderService => "order-service.md",
        OperatorTools => "operator-tools.md",
        Operating => "operating.md",
        Deploying => "deploying.md",
        RedisDeployments => "redis-deployments.md",
        Protocol => "protocol.md",
        Guarantees => "guarantees.md",
        Benchmarks => "benchmarks.md",
        Configuration => "configuration.md",
        Troubleshooting => "troubleshooting.md",
        Compatibility => "compatibility.md",
    }
}
