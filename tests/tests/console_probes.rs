//! The console's probes (issue 51, point 5): `/livez` and `/healthz` say the console serves
//! (whatever Redis does), `/readyz` whether Redis answers; all three from any Host, without a
//! token. And its Host check admits a Service's namespaced and cluster-local names.

use std::time::Duration;

use lock_console::{Console, ServeOptions};
use lock_core::LockClient;
use redis_fixture::{RedisProcess, ServerConfig};
use tests::http::{self, Response};
use tokio::net::TcpListener;

const TOKEN: &str = "f3a9c2e7b1d84c6a9e0f5b2d7c4a8e1f";

async fn with_host(addr: std::net::SocketAddr, path: &str, host: &str) -> Response {
    http::raw(addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_redis_livez_does_not() {
    let mut server = RedisProcess::start(&ServerConfig::new()).expect("redis");
    let client = LockClient::builder()
        .url(server.url())
        .instance_id("console")
        .command_timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let console = Console::new(client).token(TOKEN).expect("token").require_token_for_reads(true);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(lock_console::serve(
        listener,
        console.router(),
        ServeOptions::default(),
        std::future::pending(),
    ));

    for path in ["/livez", "/healthz", "/readyz"] {
        // A probe addresses the pod by its IP, and sends no token.
        let answer = with_host(addr, path, "10.1.2.3:8088").await;
        assert_eq!(
            (answer.status, answer.json()["status"].clone()),
            (200, "ok".into()),
            "{path}: {}",
            answer.body
        );
    }
    server.stop();
    let not_ready = with_host(addr, "/readyz", "10.1.2.3:8088").await;
    assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    assert_eq!(not_ready.json()["status"], "unavailable", "{}", not_ready.body);
    assert!(not_ready.json()["reason"].as_str().is_some_and(|r| !r.is_empty()), "{}", not_ready.body);
    for path in ["/livez", "/healthz"] {
        assert_eq!(with_host(addr, path, "10.1.2.3:8088").await.status, 200, "{path} without Redis");
    }
    server.restart().expect("Redis back");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while with_host(addr, "/readyz", "10.1.2.3").await.status != 200 {
        assert!(std::time::Instant::now() < deadline, "ready again once Redis answers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_services_cluster_names_pass_the_host_check() {
    let server = RedisProcess::start(&ServerConfig::new()).expect("redis");
    let client = LockClient::builder().url(server.url()).instance_id("console").build().expect("client");
    let console = Console::new(client)
        .token(TOKEN)
        .expect("token")
        .allow_host("daily-report-console")
        .expect("name")
        .allow_host("daily-report-console.prod")
        .expect("namespaced name");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(lock_console::serve(
        listener,
        console.router(),
        ServeOptions::default(),
        std::future::pending(),
    ));
    for host in [
        "daily-report-console:8088",
        "daily-report-console.prod",
        "daily-report-console.prod.svc",
        "daily-report-console.prod.svc.cluster.local:8088",
    ] {
        let answer = with_host(addr, "/api/jobs", host).await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    for host in
        ["daily-report-console.staging.svc.cluster.local", "daily-report-console.prod.svc.attacker.example"]
    {
        assert_eq!(with_host(addr, "/api/jobs", host).await.status, 421, "{host}");
    }
}
