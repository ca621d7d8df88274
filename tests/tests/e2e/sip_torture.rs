//! RFC 4475's torture messages and callgate's own malformed ones, sent raw
//! while a real call runs: each is answered or dropped (and counted), the
//! call goes on undisturbed, nothing panics, and the listener still serves.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_sim::SimConfig;
use callgate_tests::sip;
use callgate_tests::sipp::{RawSip, Sipp, SippOpts, scenario_dir};

/// Every corpus file, as (name, bytes).
fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in ["rfc4475", "extra"] {
        let path = scenario_dir().join("torture").join(dir);
        let mut files: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for f in files
            .into_iter()
            .filter(|f| f.extension().is_some_and(|x| x == "dat"))
        {
            let name = format!("{dir}/{}", f.file_stem().unwrap().to_string_lossy());
            out.push((name, std::fs::read(&f).unwrap()));
        }
    }
    out
}

fn status(reply: &[u8]) -> Option<u16> {
    reply
        .strip_prefix(b"SIP/2.0 ")?
        .get(..3)
        .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torture_messages_are_answered_or_dropped_and_the_call_goes_on() {
    let h = sip::start(SimConfig::default(), |c| c.sip.rtp_timeout_ms = 2_000).await;
    let target = sip::addr(&h);
    let opts = SippOpts {
        timeout: Duration::from_secs(60),
        ..SippOpts::default()
    }
    .var("hold_ms", "4000")
    .var("turns", "1");
    let call =
        tokio::spawn(async move { Sipp::uac("call_pcmu.xml", target, opts).await.wait().await });
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut seen = Vec::new();
    for (name, bytes) in corpus() {
        if bytes.len() > 65_507 {
            continue; // cannot be one datagram
        }
        // A socket per message: a retransmitted answer to an earlier one
        // never lands here.
        let sock = RawSip::bind(0).await;
        sock.send(target, &bytes).await;
        let replies = sock
            .recv_all(Duration::from_millis(200), Duration::from_secs(1))
            .await;
        let code = replies.iter().filter_map(|r| status(r)).find(|c| *c >= 200);
        if let Some(want) = expected(&name) {
            assert_eq!(code, want, "{name}: callgate answered {code:?}");
        }
        assert!(
            code.is_none_or(|c| c != 500),
            "{name}: no message is an internal error"
        );
        seen.push((name, code));
    }
    assert!(seen.len() >= 57, "{} messages sent", seen.len());
    let out = call.await.unwrap();
    out.assert_ok();
    let l = &sip::closed_calls(&h, 1).await;
    assert!(
        l.iter()
            .any(|l| l.end_reason.as_deref() == Some("caller_hangup")),
        "the call went on undisturbed"
    );
    // Still serving, and every refusal counted.
    let o = SippOpts {
        timeout: Duration::from_secs(10),
        ..SippOpts::default()
    };
    Sipp::uac("options_200.xml", target, o)
        .await
        .wait()
        .await
        .assert_ok();
    let metrics = h.metrics_text().await;
    let malformed: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("callgate_sip_malformed_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        malformed >= 15,
        "malformed messages counted: {malformed}\n{metrics}"
    );
}

/// What callgate must answer (`Some(None)`: nothing), for the messages
/// whose right answer is not a matter of liberality (tests/sip/torture/INDEX.md).
fn expected(name: &str) -> Option<Option<u16>> {
    let code = match name.split('/').nth(1)? {
        // Well-formed requests callgate does not serve.
        "intmeth" | "esc02" => Some(501),
        "escnull" | "dblreq" | "mpart01" | "cparam01" | "cparam02" | "regaut01" | "unksm2" => {
            Some(405)
        }
        "lwsdisp" | "semiuri" | "transports" | "zeromf" => Some(200),
        // Broken ones.
        "badinv01" | "clerr" | "ncl" | "scalar02" | "quotbal" | "lwsruri" | "lwsstart" | "trws"
        | "mismatch01" | "multi01" | "mcl01" | "baddn" | "cl_larger" | "cl_nonnumeric"
        | "mismatch02" | "ltgtruri" => Some(400),
        "badvers" => Some(505),
        "unkscm" | "novelsc" => Some(416),
        "bext01" => Some(420),
        "invut" => Some(415),
        "oversized_udp" => Some(513),
        "wsinv" => Some(481), // an INVITE with a To tag: a dialog callgate never had
        // Responses, garbage and headless fragments: dropped.
        "unreason" | "noreason" | "scalarlg" | "bigcode" | "bcast" | "empty" | "random_binary"
        | "response_no_via" | "truncated" | "insuf" => None,
        _ => return None,
    };
    Some(code)
}

/// Over TCP a stream whose framing is broken cannot be resynchronised: an
/// oversized message or a non-numeric Content-Length closes the connection
/// (bounded buffering), and the listener goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_tcp_framing_closes_the_connection_only() {
    use callgate_tests::sipp::{send_raw_tcp, torture};
    let h = sip::start(SimConfig::default(), |_| {}).await;
    let target = sip::addr(&h);
    for name in [
        "extra/oversized_header",
        "extra/cl_nonnumeric",
        "rfc4475/ncl",
    ] {
        let reply = send_raw_tcp(target, &torture(name), Duration::from_secs(3)).await;
        assert!(reply.closed, "{name}: the connection is closed");
    }
    let o = SippOpts {
        timeout: Duration::from_secs(10),
        ..SippOpts::default()
    };
    Sipp::uac("options_200.xml", target, o)
        .await
        .wait()
        .await
        .assert_ok();
}
