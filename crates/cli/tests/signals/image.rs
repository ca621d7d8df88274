//! The container image, as far as it can be checked without a registry:
//! the `Dockerfile` lints clean (hadolint, every rule at every level), its
//! final stage runs as a numeric non-root user and exposes every port the
//! shipped configuration can listen on, and its exact command line —
//! ENTRYPOINT + CMD, with the files its `COPY` lines put in place mapped
//! back to their sources — serves a call against a throwaway Postgres and
//! the simulators, configured only by the environment, then drains and
//! exits 0 on SIGTERM as PID 1 would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use callgate::config::Config;
use callgate_load::{LoadConfig, Outcome};
use callgate_rig::Database;
use callgate_sim::{SimConfig, Simulators};
use state_store::LocalOptions;
use tokio::process::Command;

/// Bound on the server's start (it migrates the database first) and on its
/// exit after SIGTERM with no call left.
const PATIENCE: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What the final stage of the Dockerfile says.
#[derive(Debug, Default)]
struct Stage {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    /// `COPY` destination → source (a build-context path, or `--from=…`).
    copies: BTreeMap<String, String>,
    user: String,
    /// `5060/udp`, `20000-29999/udp`, …
    exposes: Vec<String>,
}

/// Reads the final stage (after the last `FROM`), continuation lines
/// joined, comments skipped.
fn final_stage(dockerfile: &str) -> Stage {
    let joined = dockerfile.replace("\\\n", " ");
    let lines: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    let mut stage = Stage::default();
    for line in &lines[from + 1..] {
        let (word, rest) = line.split_once(' ').unwrap();
        match word {
            "ENTRYPOINT" => stage.entrypoint = serde_json::from_str(rest).unwrap(),
            "CMD" => stage.cmd = serde_json::from_str(rest).unwrap(),
            "USER" => stage.user = rest.trim().to_owned(),
            "EXPOSE" => stage.exposes = rest.split_whitespace().map(str::to_owned).collect(),
            "COPY" => {
                let parts: Vec<&str> = rest.split_whitespace().collect();
                let (dst, src) = (parts[parts.len() - 1], parts[parts.len() - 2]);
                let from_stage = parts.iter().any(|p| p.starts_with("--from="));
                let src = if from_stage {
                    format!("--from:{src}")
                } else {
                    src.into()
                };
                stage.copies.insert(dst.to_owned(), src);
            }
            _ => {}
        }
    }
    stage
}

fn dockerfile() -> Stage {
    final_stage(&std::fs::read_to_string(repo().join("Dockerfile")).unwrap())
}

#[tokio::test]
async fn the_dockerfile_lints_clean_and_runs_unprivileged_with_every_port_exposed() {
    let venv = Command::new("bash")
        .arg(repo().join(".ci/python-venv"))
        .status();
    let venv = tokio::time::timeout(Duration::from_secs(300), venv)
        .await
        .expect("making the Python venv timed out")
        .unwrap();
    assert!(venv.success(), ".ci/python-venv failed: {venv}");
    let hadolint = repo().join("target/python-venv/bin/hadolint");
    let out = Command::new(&hadolint)
        .args(["--failure-threshold", "style", "--format", "json"])
        .arg(repo().join("Dockerfile"))
        .output()
        .await
        .unwrap();
    let findings = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "hadolint: {findings}");
    assert_eq!(findings.trim(), "[]");

    let stage = dockerfile();
    let (uid, gid) = stage.user.split_once(':').unwrap();
    let uid: u32 = uid
        .parse()
        .expect("a numeric UID (runAsNonRoot can verify it)");
    assert!(uid != 0 && gid.parse::<u32>().unwrap() != 0, "{stage:?}");

    // Every listener the shipped file configures, SIP and agent included
    // (off there, but one key away).
    let cfg = Config::load(Some(&repo().join("config/callgate.toml"))).unwrap();
    let want = [
        format!("{}/tcp", cfg.server.listen.port()),
        format!("{}/tcp", cfg.agent.listen.port()),
        format!("{}/udp", cfg.sip.listen.port()),
        format!("{}/tcp", cfg.sip.listen.port()),
        format!("{}-{}/udp", cfg.sip.rtp_port_min, cfg.sip.rtp_port_max),
    ];
    for port in &want {
        assert!(
            stage.exposes.contains(port),
            "EXPOSE lacks {port}: {stage:?}"
        );
    }
}

/// The image's command line with its paths mapped back: the binary the
/// build stage copies is the one cargo built, a copied file is its source.
fn command_line(stage: &Stage) -> (PathBuf, Vec<String>) {
    let exe = &stage.entrypoint[0];
    assert!(
        stage
            .copies
            .get(exe)
            .is_some_and(|s| s.starts_with("--from:")),
        "the entrypoint is the binary the build stage made: {stage:?}"
    );
    assert_eq!(stage.entrypoint.len(), 1, "{stage:?}");
    let args = stage
        .cmd
        .iter()
        .map(|a| match stage.copies.get(a) {
            Some(src) => repo().join(src).display().to_string(),
            None => a.clone(),
        })
        .collect();
    (env!("CARGO_BIN_EXE_callgate").into(), args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_command_line_serves_a_call_and_exits_0_on_sigterm() {
    callgate::ensure_tls_provider();
    let stage = dockerfile();
    let (exe, args) = command_line(&stage);
    assert!(
        args.iter().any(|a| a.ends_with("config/callgate.toml")),
        "the image serves the shipped configuration: {args:?}"
    );
    let database = Database::local(LocalOptions::default()).await.unwrap();
    let sims = Simulators::start_local(SimConfig::default()).await.unwrap();
    let http = callgate_rig::ports::claim().unwrap();
    let listen = format!("127.0.0.1:{http}");
    let log = std::env::temp_dir().join(format!("callgate-image-{http}.log"));
    let out = std::fs::File::create(&log).unwrap();
    // Only the environment differs from a deployment, as with `docker run -e`.
    let mut server = Command::new(&exe)
        .args(&args)
        .env_clear()
        .env("CALLGATE_DATABASE_URL", database.conninfo())
        .env("CALLGATE_SERVER__LISTEN", &listen)
        .env("CALLGATE_SERVER__INSTANCE", format!("image-{http}"))
        .env(
            "CALLGATE_STT__URL",
            format!("ws://{}/v1/listen", sims.addrs.stt),
        )
        .env("CALLGATE_TTS__BASE_URL", format!("ws://{}", sims.addrs.tts))
        .env(
            "CALLGATE_DIALOG__ENDPOINT",
            format!("http://{}", sims.addrs.dialog_grpc),
        )
        .env(
            "CALLGATE_TOOLS__BASE_URL",
            format!("http://{}/tools", sims.addrs.dialog_http),
        )
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_ready(&listen, &mut server, &log_text).await;

    let report = callgate_load::run(LoadConfig {
        url: format!("ws://{listen}/v1/media-stream"),
        calls: 1,
        concurrency: 1,
        utterances: 1,
        progress: false,
        ..LoadConfig::default()
    })
    .await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::Completed,
        "{call:#?}\n{}",
        log_text()
    );
    assert_eq!(call.replies_heard, 1, "{call:#?}");

    let pid = server.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(kill.unwrap().success());
    let status = tokio::time::timeout(PATIENCE, server.wait())
        .await
        .unwrap_or_else(|_| panic!("no exit after SIGTERM:\n{}", log_text()))
        .unwrap();
    assert!(status.success(), "exit {status}:\n{}", log_text());
    sims.shutdown().await.unwrap();
    database.stop().await;
    let _ = std::fs::remove_file(&log);
}

async fn wait_ready(listen: &str, server: &mut tokio::process::Child, log: &dyn Fn() -> String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = server.try_wait().unwrap() {
            panic!("callgate exited ({status}) before it was ready:\n{}", log());
        }
        let ready = client.get(format!("http://{listen}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(Instant::now() < deadline, "not ready in time:\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn the_final_stage_is_read_as_docker_reads_it() {
    let stage = final_stage(
        "FROM a AS build\nCOPY x /nope\nUSER 1\nFROM b\n# c\nCOPY --from=build /out/bin \\\n  /usr/bin/x\nCOPY conf.toml /etc/x.toml\nUSER 7:8\nEXPOSE 1/tcp 2-3/udp\nENTRYPOINT [\"/usr/bin/x\"]\nCMD [\"serve\", \"/etc/x.toml\"]\n",
    );
    assert_eq!(stage.entrypoint, ["/usr/bin/x"]);
    assert_eq!(stage.cmd, ["serve", "/etc/x.toml"]);
    assert_eq!(stage.user, "7:8");
    assert_eq!(stage.exposes, ["1/tcp", "2-3/udp"]);
    assert_eq!(stage.copies["/usr/bin/x"], "--from:/out/bin");
    assert_eq!(stage.copies["/etc/x.toml"], "conf.toml");
    assert!(!stage.copies.contains_key("/nope"));
}
