//! The Kubernetes manifests (`deploy/kubernetes/`) against the code they run: every argument
//! the Deployment passes is one `daily_report` declares, every variable it sets is one the
//! example reads, the grace period outlasts the scheduler's shutdown grace, the Secrets it
//! names are the ones the example file defines, and the Docker pods check runs a pod with the
//! same arguments.

use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()))
}

/// The container's `args`, in order (one `- value` per line under `args:`).
fn container_args(deployment: &str) -> Vec<String> {
    let mut lines = deployment.lines().skip_while(|l| l.trim() != "args:").skip(1);
    let mut args = Vec::new();
    for line in lines.by_ref() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let Some(value) = line.strip_prefix("- ") else { break };
        args.push(value.trim_matches('"').to_owned());
    }
    args
}

/// The values of every `key: value` line for `key`.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines().filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':')).map(str::trim).collect()
}

#[test]
fn the_deployment_passes_only_what_daily_report_takes() {
    let deployment = read("deploy/kubernetes/deployment.yaml");
    let example = read("examples/examples/daily_report.rs");
    let args = container_args(&deployment);
    assert!(args.len() >= 8, "the container's args: {args:?}");
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let field = format!("    {}: ", flag.trim_start_matches("--").replace('-', "_"));
        assert!(example.contains(&field), "daily_report has no {flag} (no `{}` field)", field.trim());
    }
    assert_eq!(args[0..2], ["--instance", "$(POD_NAME)"], "the pod name is the instance id");
    for var in values(&deployment, "- name")
        .into_iter()
        .filter(|v| v.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
    {
        if var == "POD_NAME" {
            assert!(deployment.contains("fieldPath: metadata.name"), "POD_NAME comes from the pod's name");
            continue;
        }
        if var == "POD_NAMESPACE" {
            assert!(deployment.contains("fieldPath: metadata.namespace"), "POD_NAMESPACE is the pod's");
            assert!(args.iter().any(|a| a.ends_with(".$(POD_NAMESPACE)")), "the namespaced console host");
            continue;
        }
        if var == "RUST_LOG" {
            continue;
        }
        assert!(example.contains(&format!("\"{var}\"")), "daily_report never reads {var}");
    }
}

#[test]
fn the_grace_period_outlasts_the_schedulers_shutdown_grace() {
    let deployment = read("deploy/kubernetes/deployment.yaml");
    let grace: u64 = values(&deployment, "terminationGracePeriodSeconds")[0].parse().expect("seconds");
    let shutdown = lock_scheduler::DEFAULT_SHUTDOWN_GRACE.as_secs();
    assert!(grace >= shutdown + 10, "terminationGracePeriodSeconds {grace} vs the scheduler's {shutdown} s");
    assert!(read("docs/guide/src/deploying.md").contains(&format!("`DEFAULT_SHUTDOWN_GRACE`, {shutdown} s")));
}

#[test]
fn the_secrets_and_resources_named_exist() {
    let deployment = read("deploy/kubernetes/deployment.yaml");
    let secrets = read("deploy/kubernetes/secrets.example.yaml");
    let named: Vec<&str> = deployment
        .lines()
        .skip_while(|l| !l.contains("secretKeyRef:"))
        .filter_map(|l| l.trim().strip_prefix("name: ").or_else(|| l.trim().strip_prefix("secretName: ")))
        .collect();
    for name in ["daily-report-redis", "daily-report-console"] {
        assert!(named.contains(&name), "the Deployment reads Secret {name}: {named:?}");
        assert!(secrets.contains(&format!("name: {name}")), "secrets.example.yaml defines {name}");
    }
    let kustomization = read("deploy/kubernetes/kustomization.yaml");
    let resources: Vec<&str> = kustomization.lines().filter_map(|l| l.trim().strip_prefix("- ")).collect();
    assert_eq!(resources, ["deployment.yaml", "console-service.yaml", "networkpolicy.yaml"]);
    for resource in resources {
        read(&format!("deploy/kubernetes/{resource}"));
    }
}

#[test]
fn the_pods_check_runs_a_pod_as_the_deployment_does() {
    let args = container_args(&read("deploy/kubernetes/deployment.yaml"));
    let script = read("scripts/daily-report-pods.sh");
    // The pods check runs in namespace "default".
    let expected = args[2..].join(" ").replace("$(POD_NAMESPACE)", "default");
    assert!(
        script.lines().any(|l| l.contains("--instance daily-report-") && l.contains(&expected)),
        "scripts/daily-report-pods.sh must start a pod with `{expected}`"
    );
    assert!(script.contains("docker stop -t 40"), "stopped within the Deployment's grace");
}
