//! What the guide's key table (docs/guide/src/protocol.md, "Keys") says is what
//! `lock_core::schema` and `lock_scheduler::schema` build: every name the schemas make appears
//! there, spelled as they spell it, with the expiries they set.

use lock_core::schema;

/// The table, from its heading to the next heading.
fn key_table() -> &'static str {
    let chapter = include_str!("../../docs/guide/src/protocol.md");
    let start = chapter.find("\n## Keys\n").expect("protocol.md has the key table");
    let rest = &chapter[start..];
    let end = rest[4..].find("\n#").map_or(rest.len(), |i| i + 4);
    &rest[..end]
}

#[test]
fn the_key_table_spells_every_name_the_schema_builds() {
    let table = key_table();
    let key = "<key>";
    let names = [
        schema::fence_key(key),
        schema::tick_key(key),
        schema::tick_claimant_key(key),
        schema::queue_key(key),
        schema::tickets_key(key),
        schema::readers_key("<name>"),
        schema::release_channel(key, "<client id>"),
        schema::liveness_key("<instance-id>:<client id>"),
        schema::holdings_key("<instance-id>:<client id>"),
        schema::HOLDINGS_INDEX.to_owned(),
        schema::PERMITS_MEMBER.to_owned(),
        format!("<token>{}", schema::RELEASED_SUFFIX),
        format!("\\{}", schema::QUEUED_MARK),
        schema::handoff_record("<client id>"),
    ];
    for name in names {
        assert!(table.contains(&format!("`{name}`")) || table.contains(&name), "the key table lacks {name}");
    }
    // A key with a hash tag of its own: the suffix is appended, as the table says.
    assert!(table.contains(&format!("`{}`", schema::fence_key("lock:{order}:1"))));
}

#[test]
fn the_key_table_spells_every_name_the_scheduler_schema_builds() {
    use lock_scheduler::schema as sched;
    let table = key_table();
    let job = "<name>";
    let names = [
        sched::history_key(job).expect("a valid name"),
        sched::pause_key(job).expect("a valid name"),
        sched::missed_key(job).expect("a valid name"),
        sched::failures_key(job).expect("a valid name"),
        sched::failure_streak_key(job).expect("a valid name"),
        sched::buffered_key(job).expect("a valid name"),
        sched::run_count_key(job).expect("a valid name"),
        sched::members_key("<group>"),
        sched::jobs_key("<group>"),
        sched::runs_key("<group>"),
        sched::retries_key("<group>"),
        sched::replace_key("<group>"),
        sched::group_index_key().to_owned(),
        sched::job_index_key().to_owned(),
    ];
    for name in names {
        assert!(table.contains(&format!("`{name}`")), "the key table lacks {name}");
    }
    assert!(
        table.contains(&format!("capped stream, expires {} days", sched::HISTORY_TTL.as_secs() / 86_400))
    );
    assert!(table.contains(&format!("lapses after {} s", sched::MEMBER_TTL.as_secs())));
    assert!(
        table.contains(&format!("expires {} s after the last request", sched::RUN_REQUEST_TTL.as_secs()))
    );
}
