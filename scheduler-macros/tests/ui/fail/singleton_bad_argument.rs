use lock_scheduler::{RunContext, Term, singleton};

#[singleton]
async fn feed(term: Term, run: RunContext) {
    let _ = (term, run);
}

fn main() {}
