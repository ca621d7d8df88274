//! Tests of the sipp harness against the real programs.
//! The harness against sipp itself: each UAC scenario runs against its
//! stand-in peer under `tests/sip/peers/`, which proves the files are
//! valid, the flows complete, and the harness counts what happened.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::rtp::parse_pcap;
use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn opts() -> SippOpts {
    SippOpts {
        timeout: secs(20),
        ..SippOpts::default()
    }
}

fn captured() -> SippOpts {
    SippOpts {
        capture_rtp: true,
        ..opts()
    }
}

/// Runs `uac` against the peer `uas` (same transport); both outcomes.
async fn pair(uac: &str, u: SippOpts, uas: &str, p: SippOpts) -> (SippOutcome, SippOutcome) {
    let peer = Sipp::uas(
        uas,
        SippOpts {
            transport: u.transport,
            ..p
        },
    )
    .await;
    let caller = Sipp::uac(uac, peer.sip_addr(), u).await.wait().await;
    (caller, peer.wait().await)
}

/// [`pair`], both sides required to succeed.
async fn ok_pair(uac: &str, u: SippOpts, uas: &str, p: SippOpts) -> (SippOutcome, SippOutcome) {
    let (out, peer) = pair(uac, u, uas, p).await;
    out.assert_ok();
    peer.assert_ok();
    (out, peer)
}

fn logged(out: &SippOutcome, needle: &str) -> bool {
    out.logs.iter().any(|l| l.contains(needle))
}

fn rtp(out: &SippOutcome) -> &RtpStats {
    out.rtp.as_ref().expect("captured")
}

#[tokio::test]
async fn sipp_loads_every_scenario() {
    let mut names = Vec::new();
    for sub in ["", "peers/"] {
        for entry in std::fs::read_dir(scenario_dir().join(sub)).expect("list tests/sip") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.ends_with(".xml") {
                names.push(format!("{sub}{name}"));
            }
        }
    }
    assert!(names.len() >= 20, "scenarios: {names:?}");
    let checks = futures_util::future::join_all(names.iter().map(|n| Sipp::check(n))).await;
    let failures: Vec<String> = checks.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn sipp_check_reports_a_broken_scenario() {
    // A variable that is set but never used: sipp refuses the file.
    let dir = TempDir::new("broken");
    let file = dir.path().join("broken.xml");
    let xml = r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="broken">
  <send><![CDATA[
  OPTIONS sip:x@[remote_ip] SIP/2.0
  Content-Length: 0
  ]]></send>
  <recv response="200">
<action><ereg regexp=".*" search_in="msg" assign_to="unused" /></action>
  </recv>
</scenario>
"#;
    std::fs::write(&file, xml).expect("write");
    // An absolute path replaces tests/sip/ in the join.
    let err = Sipp::check(&file.to_string_lossy())
        .await
        .expect_err("refused");
    assert!(err.contains("referenced 1 times"), "{err}");
}

#[tokio::test]
async fn sipp_call_pcmu_gets_its_rtp_back_from_an_echoing_peer() {
    let uac = captured().var("hold_ms", "300").var("turns", "1");
    let echo = opts().args(["-rtp_echo"]);
    let (out, _) = ok_pair("call_pcmu.xml", uac, "peers/uas_answer.xml", echo).await;
    assert_eq!((out.successful_calls, out.failed_calls), (1, 0), "{out}");
    assert!(logged(&out, "answered: m=audio"), "{:?}", out.logs);
    // 6.3 s of 20 ms packets out, all echoed back.
    let rtp = rtp(&out);
    assert!(rtp.sent_by_payload_type().get(&0) > Some(&250), "{rtp}");
    assert!(rtp.received_by_payload_type().get(&0) > Some(&250), "{rtp}");
    assert!(rtp.received().all(|p| p.payload.len() == 160), "{rtp}");
    assert_eq!(rtp.received_by_ssrc().len(), 1, "{rtp}");
}

#[tokio::test]
async fn sipp_call_pcma_over_tcp_sends_payload_8() {
    let uac = SippOpts {
        transport: Transport::Tcp,
        ..captured()
    }
    .var("hold_ms", "0")
    .var("turns", "1");
    let echo = opts().args(["-rtp_echo"]);
    let (out, _) = ok_pair("call_pcma.xml", uac, "peers/uas_answer.xml", echo).await;
    assert!(out.messages.contains("Via: SIP/2.0/TCP"), "not over TCP");
    let rtp = rtp(&out);
    assert_eq!(
        rtp.sent_by_payload_type().keys().collect::<Vec<_>>(),
        [&8],
        "{rtp}"
    );
    assert!(rtp.received().count() > 250, "{rtp}");
}

#[tokio::test]
async fn sipp_no_rtp_back_is_visible() {
    // uas_options.xml answers the INVITE but neither sends nor echoes.
    let uac = captured().var("hold_ms", "0").var("turns", "1");
    let (out, _) = ok_pair("call_pcmu.xml", uac, "uas_options.xml", opts()).await;
    assert_eq!(rtp(&out).received().count(), 0, "{out}");
    assert!(rtp(&out).sent().count() > 250, "{out}");
}

#[tokio::test]
async fn sipp_cancel_gets_487() {
    let (out, _) = ok_pair("cancel.xml", opts(), "peers/uas_cancel.xml", opts()).await;
    assert_eq!(out.counter("cancel_lost_race"), 0);
    assert!(out.messages.contains("SIP/2.0 487"), "{}", out.messages);
}

#[tokio::test]
async fn sipp_bye_from_server_is_answered() {
    let peer = opts().args(["-d", "1000", "-rtp_echo"]);
    let (out, _) = ok_pair("bye_from_server.xml", opts(), "peers/uas_hangup.xml", peer).await;
    assert_eq!(out.successful_calls, 1);
}

#[tokio::test]
async fn sipp_rtp_stop_sends_nothing_after_two_seconds() {
    let peer = opts().args(["-d", "3500"]);
    let (out, _) = ok_pair("rtp_stop.xml", captured(), "peers/uas_hangup.xml", peer).await;
    let sent: Vec<Duration> = rtp(&out).sent().map(|p| p.at).collect();
    let talk = sent[sent.len() - 1] - sent[0];
    assert!(
        talk > Duration::from_millis(1800) && talk < Duration::from_millis(2300),
        "{talk:?}"
    );
    assert!(
        logged(&out, "rtp stopped at") && logged(&out, "BYE at"),
        "{:?}",
        out.logs
    );
}

#[tokio::test]
async fn sipp_reinvite_hold_and_resume() {
    let uac = opts().var("hold_ms", "300");
    let (out, peer) = ok_pair("reinvite_hold.xml", uac, "peers/uas_reinvite.xml", opts()).await;
    assert!(
        logged(&out, "a=recvonly") && logged(&out, "resume at"),
        "{:?}",
        out.logs
    );
    assert!(logged(&peer, "a=sendonly"), "{:?}", peer.logs);
}

#[tokio::test]
async fn sipp_reinvite_488_keeps_the_call() {
    let echo = opts().args(["-rtp_echo"]);
    let (out, _) = ok_pair(
        "reinvite_488.xml",
        captured(),
        "peers/uas_reinvite.xml",
        echo,
    )
    .await;
    // The ACK for the 488 reuses the re-INVITE's branch.
    let branch = out
        .logs
        .iter()
        .find_map(|l| l.split("(branch=").nth(1))
        .expect("488 logged");
    let branch = format!("branch={}", branch.trim_end_matches(')'));
    assert_eq!(
        out.messages.matches(&branch).count(),
        3,
        "re-INVITE, 488, ACK"
    );
    let late = rtp(&out).received().filter(|p| p.at > secs(4)).count();
    assert!(late > 100, "RTP stopped after the 488: {out}");
}

#[tokio::test]
async fn sipp_dtmf_info_is_answered() {
    let uac = opts().var("hold_ms", "200");
    let aa = opts().args(["-aa"]);
    let (out, _) = ok_pair("dtmf_info.xml", uac, "peers/uas_answer.xml", aa).await;
    assert!(
        out.messages.contains("Signal=5\r\nDuration=160\r\n"),
        "{}",
        out.messages
    );
    assert!(
        out.messages
            .contains("Content-Type: application/dtmf-relay")
    );
}

#[tokio::test]
async fn sipp_dtmf_rfc4733_sends_four_events() {
    let uac = captured().var("hold_ms", "200");
    let (out, _) = ok_pair("dtmf_rfc4733.xml", uac, "peers/uas_answer.xml", opts()).await;
    let events: Vec<&RtpPacket> = rtp(&out).sent().filter(|p| p.payload_type == 101).collect();
    assert_eq!(events.len(), 44, "4 digits x (8 + 3 end packets): {out}");
    let digits: Vec<u8> = events
        .iter()
        .filter(|p| p.marker)
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(digits, [1, 2, 3, 11]);
    assert!(events.iter().all(|p| p.ssrc == 0x4d54_4631));
}

#[tokio::test]
async fn sipp_options_200_and_503() {
    let (ok, _) = ok_pair("options_200.xml", opts(), "uas_options.xml", opts()).await;
    assert!(logged(&ok, "Allow:  INVITE"), "{:?}", ok.logs);
    ok_pair(
        "options_503.xml",
        opts(),
        "peers/uas_options_503.xml",
        opts(),
    )
    .await;
}

#[tokio::test]
async fn sipp_an_unexpected_code_fails_the_call() {
    let (out, _) = pair(
        "options_200.xml",
        opts(),
        "peers/uas_options_503.xml",
        opts(),
    )
    .await;
    assert_eq!(out.exit_code, Some(1), "{out}");
    assert_eq!((out.successful_calls, out.failed_calls), (0, 1), "{out}");
    assert_eq!(
        out.stats
            .get("FailedUnexpectedMessage(C)")
            .map(String::as_str),
        Some("1")
    );
}

#[tokio::test]
async fn sipp_refer_is_accepted_and_notified() {
    let peer = opts().args(["-d", "1000"]);
    let (out, peer) = ok_pair("refer_uas.xml", opts(), "peers/uas_refer.xml", peer).await;
    assert!(
        logged(&out, "REFER to  <sip:agent@127.0.0.1:5099>"),
        "{:?}",
        out.logs
    );
    assert!(logged(&peer, "NOTIFY SIP/2.0 200"), "{:?}", peer.logs);
}

#[tokio::test]
async fn sipp_load_counts_answered_referred_and_rejected_by_code() {
    let uac = SippOpts {
        calls: 7,
        rate: Some(7),
        limit: Some(7),
        ..opts()
    }
    .var("hold_ms", "200");
    let peer = SippOpts { calls: 7, ..opts() }.args(["-d", "1000"]);
    let (out, _) = ok_pair("load_uac.xml", uac, "peers/uas_mixed.xml", peer).await;
    assert_eq!(out.successful_calls, 7, "{out}");
    let counters = ["answered", "referred", "callgate_bye"].map(|c| out.counter(c));
    assert_eq!(counters, [4, 1, 1]);
    assert_eq!(out.rejected_by_code(), BTreeMap::from([(486, 1), (503, 2)]));
    // The same from the per-step counts.
    let steps = out
        .message_counts
        .iter()
        .filter(|(k, _)| k.ends_with("_503_Recv"));
    assert_eq!(
        steps.map(|(_, v)| v).sum::<u64>(),
        2,
        "{:?}",
        out.message_counts
    );
}

#[tokio::test]
async fn sipp_timeout_ends_the_run() {
    // A UAS that never gets a call: its own 1 s -timeout ends it (255).
    let started = Instant::now();
    let uas = SippOpts {
        timeout: secs(1),
        ..opts()
    };
    let out = Sipp::uas("uas_options.xml", uas).await.wait().await;
    assert!(
        started.elapsed() < secs(1) + KILL_GRACE,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.exit_code, Some(255), "{out}");
}

#[tokio::test]
async fn sipp_stop_and_drop_end_the_process() {
    let long = || SippOpts {
        calls: 100,
        timeout: secs(60),
        ..opts()
    };
    let run = Sipp::uas("uas_options.xml", long()).await;
    let addr = run.sip_addr();
    assert!(!run.stop().await.timed_out);
    assert!(UdpSocket::bind(addr).is_ok(), "port still held after stop");

    let run = Sipp::uas("uas_options.xml", long()).await;
    let (addr, pid) = (run.sip_addr(), run.child.id().expect("running"));
    drop(run);
    let status = format!("/proc/{pid}/status");
    let alive = || {
        let s = read_lossy(Path::new(&status));
        !s.is_empty() && !s.contains("State:\tZ")
    };
    let until = Instant::now() + secs(5);
    while alive() || UdpSocket::bind(addr).is_err() {
        assert!(Instant::now() < until, "sipp {pid} survived its SippRun");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn raw_udp_gets_a_reply_or_none() {
    let run = Sipp::uas("uas_options.xml", opts()).await;
    let (sock, to) = (RawSip::bind(0).await, run.sip_addr());
    let me = sock.local_addr();
    let options = format!(
        "OPTIONS sip:bot@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-raw-1\r\n\
         Max-Forwards: 70\r\nFrom: <sip:t@{me}>;tag=1\r\nTo: <sip:bot@{to}>\r\n\
         Call-ID: raw-1@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    );
    sock.send(to, options.as_bytes()).await;
    let reply = sock.recv(secs(3)).await.expect("a reply");
    assert!(
        reply.starts_with(b"SIP/2.0 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    run.wait().await.assert_ok();

    let closed = SocketAddr::from((LOOPBACK, free_port(Transport::Udp)));
    let wsinv = torture("rfc4475/wsinv");
    assert_eq!(
        send_raw_udp(closed, &wsinv, Duration::from_millis(300)).await,
        None
    );
}

#[tokio::test]
async fn raw_tcp_reports_the_close() {
    let listener = tokio::net::TcpListener::bind((LOOPBACK, 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.expect("read");
        s.write_all(&buf[..n]).await.expect("write");
    });
    let reply = send_raw_tcp(addr, b"hello", secs(3)).await;
    server.await.expect("server");
    assert_eq!(
        reply,
        TcpReply {
            bytes: b"hello".to_vec(),
            closed: true
        }
    );
}

#[test]
fn torture_corpus_is_complete() {
    let n = std::fs::read_dir(scenario_dir().join("torture/rfc4475"))
        .expect("dir")
        .count();
    assert_eq!(n, 49);
    let wsinv = torture("rfc4475/wsinv");
    assert_eq!(wsinv.len(), 1001);
    assert!(wsinv.ends_with(b"a=rtpmap:31 LPC\r\n"));
    assert_eq!(torture("extra/empty").len(), 0);
    assert!(torture("extra/oversized_header").len() > 70 * 1024);
    assert!(torture("extra/oversized_udp").len() <= 65507);
}

#[test]
fn pcap_parser_reads_rtp_from_an_ethernet_frame() {
    let rtp = [
        0x80,
        0x80 | 101,
        0,
        7,
        0,
        0,
        0,
        9,
        0xca,
        0x11,
        0,
        0,
        5,
        0x8a,
        0,
        160,
    ];
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
    ];
    for field in [40000u16, 40002, 8 + rtp.len() as u16, 0] {
        ip.extend(field.to_be_bytes());
    }
    let frame = [&[0u8; 14][..], &ip, &rtp].concat();
    // Global header (LE, v2.4, snaplen, Ethernet), one record at t = 1 s.
    let mut file = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let len = frame.len() as u32;
    for word in [65535, 1, 1, 0, len, len] {
        file.extend(u32::to_le_bytes(word));
    }
    file.extend(&frame);
    let packets = parse_pcap(&file, UNIX_EPOCH);
    assert_eq!(packets.len(), 1);
    let p = &packets[0];
    assert_eq!(
        (p.payload_type, p.marker, p.seq, p.timestamp),
        (101, true, 7, 9)
    );
    assert_eq!(
        (p.ssrc, p.payload.as_slice()),
        (0xca11_0000, &[5, 0x8a, 0, 160][..])
    );
    assert_eq!((p.src.port(), p.dst.port(), p.at), (40000, 40002, secs(1)));
}

#[test]
fn csv_last_row_by_header() {
    let row = last_csv_row("a;b;c(C);\n1;2;3;\n4;5;6;\n");
    assert_eq!(row.get("c(C)").map(String::as_str), Some("6"));
    assert_eq!(row.len(), 3);
}
