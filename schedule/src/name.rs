//! Job names: the one rule every name follows, and the name a job declared on a function gets.

/// The longest job name, in bytes.
pub const MAX_JOB_NAME_LEN: usize = 512;

/// Why `name` cannot name a job, if it cannot: the one rule the scheduler (at build time), the
/// admin calls (pause, history, ...) and the `#[scheduled]` attribute (at compile time) apply.
pub fn job_name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("the job name is empty")
    } else if name.chars().any(char::is_control) {
        Some("the job name contains control characters")
    } else if name.len() > MAX_JOB_NAME_LEN {
        Some("the job name is longer than 512 bytes")
    } else {
        None
    }
}

/// The name of a job declared on the function `function` without a name of its own: the
/// function's name with underscores as hyphens (`generate_daily_report` ->
/// `generate-daily-report`), a raw identifier's `r#` dropped.
pub fn default_job_name(function: &str) -> String {
    function.trim_start_matches("r#").replace('_', "-")
}

/// The environment variable that overrides the schedule of the job `name`: `SCHEDULE_` and the
/// name in upper case, every character other than a letter or digit as `_`
/// (`daily-report` -> `SCHEDULE_DAILY_REPORT`). With `_ZONE` appended, the time zone.
pub fn schedule_variable(name: &str) -> String {
    let mut var = String::from("SCHEDULE_");
    var.extend(name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }));
    var
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(default_job_name("generate_daily_report"), "generate-daily-report");
        assert_eq!(default_job_name("r#move"), "move");
        assert_eq!(schedule_variable("daily-report"), "SCHEDULE_DAILY_REPORT");
        assert_eq!(schedule_variable("Ünïcode job.v2"), "SCHEDULE__N_CODE_JOB_V2");
        assert_eq!(job_name_problem(" "), Some("the job name is empty"));
        assert_eq!(job_name_problem("a\nb"), Some("the job name contains control characters"));
        assert_eq!(job_name_problem(&"x".repeat(513)), Some("the job name is longer than 512 bytes"));
        assert_eq!(job_name_problem("daily-report"), None);
    }
}
