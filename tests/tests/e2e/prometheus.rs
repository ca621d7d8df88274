//! The operator's rules and dashboard against real Prometheus (Debian
//! `prometheus`, which ships `promtool`):
//!
//! - `promtool check rules` and `promtool test rules` pass on
//!   `deploy/prometheus/` (each alert fires on the series that break its
//!   promise and stays quiet on a healthy instance's);
//! - a real Prometheus scrapes a live callgate on loopback (after one call
//!   and one balancer check, as an instance in service has had) with the
//!   rules loaded, and every series each rule names exists with the labels
//!   the rule selects and groups by; every rule loads and evaluates without
//!   error; every query of the Grafana dashboard evaluates.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use callgate_rig::process::Scratch;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, eventually};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn tool(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} is not installed (Debian: prometheus); .ci/run installs it");
}

async fn run(cmd: &mut Command) -> String {
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("promtool took over 60 s")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let dir = deploy().join("prometheus");
    let promtool = tool("promtool");
    let checked = run(Command::new(&promtool).current_dir(&dir).args([
        "check",
        "rules",
        "callgate-rules.yml",
    ]))
    .await;
    assert!(checked.contains("SUCCESS: 20 rules found"), "{checked}");
    let tested = run(Command::new(&promtool).current_dir(&dir).args([
        "test",
        "rules",
        "callgate-rules.test.yml",
    ]))
    .await;
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert's runbook is a section of docs/operations/alerts.md.
    let doc = std::fs::read_to_string(deploy().join("../docs/operations/alerts.md")).unwrap();
    let rules = std::fs::read_to_string(dir.join("callgate-rules.yml")).unwrap();
    let mut alerts = 0;
    for line in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            doc.contains(&format!("\n## {line}\n")),
            "no runbook section for {line}"
        );
        let anchor = format!("alerts.md#{}", line.to_lowercase());
        assert!(rules.contains(&anchor), "{line} does not link {anchor}");
        alerts += 1;
    }
    assert_eq!(alerts, 16);
}

/// Every rule of the rules file: `(name, expr)`.
fn rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy().join("prometheus/callgate-rules.yml")).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
    let mut out = Vec::new();
    for group in docs[0]["groups"].as_vec().unwrap() {
        for rule in group["rules"].as_vec().unwrap() {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).unwrap();
            out.push((name.to_string(), rule["expr"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// The vector selectors of callgate's own series in `expr`
/// (`callgate_x{a="b"}`; recording rules' `callgate:` names are derived).
fn selectors(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("callgate_") {
        let tail = &rest[at..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let mut end = name_len;
        if tail[name_len..].starts_with('{') {
            end += tail[name_len..].find('}').unwrap() + 1;
        }
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The labels `expr` groups or matches by (`by (…)`, `on (…)`), less the
/// ones Prometheus adds (`instance`, and `le` on histogram buckets).
fn grouped_labels(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for key in ["by (", "on ("] {
        for part in expr.split(key).skip(1) {
            let inside = part.split(')').next().unwrap();
            for l in inside.split(',').map(str::trim) {
                if !matches!(l, "instance" | "le" | "") {
                    out.insert(l.to_string());
                }
            }
        }
    }
    out
}

#[test]
fn the_selector_reader_finds_names_matchers_and_groupings() {
    let e = "sum by (instance, reason) (rate(callgate_a_total{reason=~\"x|y\"}[5m])) \
             / on (instance) callgate_b";
    assert_eq!(
        selectors(e),
        ["callgate_a_total{reason=~\"x|y\"}", "callgate_b"]
    );
    assert_eq!(grouped_labels(e), BTreeSet::from(["reason".to_string()]));
}

struct Prometheus {
    _child: tokio::process::Child,
    base: String,
    _dir: Scratch,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second with the rules
    /// loaded, and waits until it is ready.
    async fn start(target: SocketAddr) -> Prometheus {
        let dir = Scratch::new("prometheus").unwrap();
        let port = free_port();
        let rules = deploy().join("prometheus/callgate-rules.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: [\"{}\"]\n\
             scrape_configs:\n  - job_name: callgate\n    static_configs:\n      - targets: ['{target}']\n",
            rules.display()
        );
        let file = dir.path.join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let log = std::fs::File::create(dir.path.join("prometheus.log")).unwrap();
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            _child: child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let ready = format!("{}/-/ready", p.base);
        eventually(
            Duration::from_secs(30),
            "Prometheus ready",
            async || reqwest::get(&ready).await.map(|r| r.status().as_u16()).ok(),
            |s| *s == Some(200),
        )
        .await;
        p
    }

    /// An instant query's result vector (panics on a query error).
    async fn query(&self, q: &str) -> Vec<Value> {
        let r = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", q)])
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], "success", "{q}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_finds_every_series_the_rules_and_the_dashboard_use() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.ledger.reconcile_interval_ms = 200;
        c.agent.enabled = true;
        c.agent.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    })
    .await;
    // One answered call (the reply-latency histogram per ingress) and one
    // balancer check (the routing counter known, so its divergences are).
    let report = callgate_load::run(callgate_tests::load(&h, 1, 1)).await;
    assert_eq!(report.calls.len(), 1);
    let mut agent = tokio::net::TcpStream::connect(h.server.agent_addr.unwrap())
        .await
        .unwrap();
    let mut line = String::new();
    agent.read_to_string(&mut line).await.unwrap();
    assert!(!line.is_empty());

    let prom = Prometheus::start(h.server.addr).await;
    eventually(
        Duration::from_secs(30),
        "a scrape of callgate with its routing divergence in it",
        async || {
            prom.query(
                "callgate_counter_divergence_age_seconds{direction=\"balancer_may_overload\"}",
            )
            .await
            .len()
        },
        |n| *n > 0,
    )
    .await;

    let mut checked = 0;
    for (rule, expr) in rules() {
        let labels = grouped_labels(&expr);
        for sel in selectors(&expr) {
            let found = prom.query(&format!("count by (__name__) ({sel})")).await;
            assert!(!found.is_empty(), "{rule}: no series {sel}");
            let name = sel.split('{').next().unwrap();
            for l in &labels {
                let with = prom.query(&format!("count({name}{{{l}!=\"\"}})")).await;
                assert!(!with.is_empty(), "{rule}: {name} has no label {l}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "selectors checked: {checked}");

    // Every rule loaded, and none failed to evaluate.
    let rules: Value = reqwest::get(format!("{}/api/v1/rules", prom.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let loaded: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(loaded.len(), 20, "{rules}");
    for r in &loaded {
        assert_ne!(r["health"], "err", "{r}");
    }

    // The dashboard's queries evaluate (with its variable set to all).
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(deploy().join("grafana/callgate.json")).unwrap(),
    )
    .unwrap();
    let mut queries = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let q = t["expr"].as_str().unwrap().replace("$instance", ".*");
            let q = q.replace("[5m]", "[1m]");
            prom.query(&q).await;
            for sel in selectors(&q) {
                let name = sel.split('{').next().unwrap();
                let found = prom.query(&format!("count({name})")).await;
                assert!(!found.is_empty(), "{}: no series {name}", panel["title"]);
            }
            queries += 1;
        }
    }
    assert!(queries >= 15, "{queries}");
    h.stop().await;
}
