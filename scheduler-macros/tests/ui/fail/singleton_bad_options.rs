use lock_scheduler::singleton;

#[singleton(nmae = "feed")]
async fn unknown_option() {}

#[singleton(name = "feed", name = "again")]
async fn repeated_option() {}

#[singleton(restart_delay = "soon")]
async fn bad_duration() {}

#[singleton(restart_delay = "2h")]
async fn too_long() {}

#[singleton(election = "")]
async fn empty_election() {}

#[singleton(name = " ")]
async fn bad_name() {}

#[singleton(group)]
async fn no_value() {}

fn main() {}
