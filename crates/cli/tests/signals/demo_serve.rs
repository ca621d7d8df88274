//! `callgate demo --serve` as a newcomer runs it: it prints the page's URL,
//! the page and the WebRTC signalling answer there, and Ctrl-C (SIGINT)
//! stops everything it started, cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn demo_serve_prints_the_page_url_serves_it_and_stops_cleanly_on_ctrl_c() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_callgate"))
        .args(["demo", "--serve"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run callgate demo --serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started = Instant::now();
    let url = loop {
        let line = lines.next().expect("demo printed its URL").unwrap();
        if let Some(u) = line.trim().strip_prefix("http://") {
            break format!("http://{u}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no URL printed"
        );
    };
    assert!(url.ends_with("/call"), "{url}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        callgate::ensure_tls_provider();
        let page = reqwest::get(&url).await.unwrap();
        assert_eq!(page.status().as_u16(), 200);
        assert!(page.text().await.unwrap().contains("window.callgate"));
        let whip = url.replace("/call", "/v1/webrtc");
        let r = reqwest::Client::new()
            .request(reqwest::Method::OPTIONS, whip)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 204);
    });
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {rest:#?}");
    assert!(
        rest.iter().any(|l| l.contains("ledger rows still open: 0")),
        "{rest:#?}"
    );
}
