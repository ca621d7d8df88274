//! The endpoint's transactions and dialogs on a virtual clock.

use std::time::{Duration, Instant};

use crate::carrier::sip::ua::*;

const PEER: &str = "127.0.0.1:5070";

fn peer() -> Peer {
    Peer {
        addr: PEER.parse().unwrap(),
        transport: Transport::Udp,
        conn: 0,
    }
}

fn endpoint() -> Endpoint {
    Endpoint::new(Config::new("127.0.0.1:5060".parse().unwrap()), 42)
}

fn invite(branch: &str, call_id: &str) -> String {
    let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\n";
    format!(
        "INVITE sip:bot@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {PEER};branch={branch}\r\n\
         From: <sip:alice@127.0.0.1>;tag=a1\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: {call_id}\r\n\
         CSeq: 1 INVITE\r\nContact: <sip:alice@{PEER}>\r\nMax-Forwards: 70\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    )
}

/// A request in the dialog `call_id` with our tag `tag`.
fn in_dialog(
    method: &str,
    cseq: u32,
    branch: &str,
    call_id: &str,
    tag: &str,
    extra: &str,
    body: &str,
) -> String {
    format!(
        "{method} sip:callgate@127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP {PEER};branch={branch}\r\n\
         From: <sip:alice@127.0.0.1>;tag=a1\r\nTo: <sip:bot@127.0.0.1>;tag={tag}\r\nCall-ID: {call_id}\r\n\
         CSeq: {cseq} {method}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn drain(ep: &mut Endpoint) -> (Vec<String>, Vec<Event>) {
    let (mut sent, mut events) = (Vec::new(), Vec::new());
    while let Some(o) = ep.pop() {
        match o {
            Output::Send { bytes, .. } => sent.push(String::from_utf8(bytes).unwrap()),
            Output::Event(e) => events.push(e),
        }
    }
    (sent, events)
}

fn status(msg: &str) -> u16 {
    msg[8..11].parse().unwrap()
}

fn to_tag(msg: &str) -> String {
    wire::frame(msg.as_bytes(), 1 << 16)
        .unwrap()
        .to_tag()
        .unwrap()
}

/// An accepted, confirmed call: its key and our tag.
fn answered(ep: &mut Endpoint, t0: Instant) -> (CallKey, String) {
    ep.receive(invite("z9hG4bKinv", "c1").as_bytes(), peer(), t0);
    let (_, events) = drain(ep);
    let Event::Invite { call, .. } = events[0].clone() else {
        panic!("{events:?}")
    };
    ep.accept(call, b"v=0\r\n", t0).unwrap();
    let (sent, _) = drain(ep);
    let tag = to_tag(&sent[0]);
    let ack = in_dialog("ACK", 1, "z9hG4bKack", "c1", &tag, "", "");
    ep.receive(ack.as_bytes(), peer(), t0);
    assert_eq!(drain(ep).1, vec![Event::Confirmed { call }]);
    (call, tag)
}

#[test]
fn invite_gets_trying_at_once_and_its_retransmission_the_last_answer() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    ep.receive(invite("z9hG4bK1", "c1").as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(status(&sent[0]), 100);
    let Event::Invite { call, invite: inv } = &events[0] else {
        panic!()
    };
    assert_eq!(inv.call_id, "c1");
    assert!(inv.offer.starts_with(b"v=0"));
    ep.ringing(*call).unwrap();
    assert_eq!(status(&drain(&mut ep).0[0]), 180);
    ep.receive(invite("z9hG4bK1", "c1").as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(
        (status(&sent[0]), events.len()),
        (180, 0),
        "no second call for a retransmission"
    );
}

#[test]
fn the_200_is_resent_until_the_ack_and_a_lost_ack_is_reported() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    ep.receive(invite("z9hG4bK1", "c1").as_bytes(), peer(), t0);
    let Event::Invite { call, .. } = drain(&mut ep).1[0].clone() else {
        panic!()
    };
    ep.accept(call, b"v=0\r\n", t0).unwrap();
    let sent = drain(&mut ep).0;
    assert!(
        sent[0].starts_with("SIP/2.0 200 OK") && sent[0].contains("Content-Type: application/sdp")
    );
    let mut resends = 0;
    loop {
        let at = ep.next_deadline().unwrap();
        ep.poll(at);
        let (sent, events) = drain(&mut ep);
        resends += sent.len();
        if events.contains(&Event::AckTimeout { call }) {
            assert_eq!(at.duration_since(t0), Duration::from_secs(32));
            break;
        }
    }
    assert!(resends >= 7, "resent {resends} times");
    // The application then hangs up.
    ep.bye(call, None, t0).unwrap();
    assert!(drain(&mut ep).0[0].starts_with("BYE sip:alice@127.0.0.1:5070 SIP/2.0"));
}

#[test]
fn cancel_before_the_answer_is_487_and_after_it_changes_nothing() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    ep.receive(invite("z9hG4bK1", "c1").as_bytes(), peer(), t0);
    let Event::Invite { call, .. } = drain(&mut ep).1[0].clone() else {
        panic!()
    };
    let cancel = invite("z9hG4bK1", "c1")
        .replace("CSeq: 1 INVITE", "CSeq: 1 CANCEL")
        .replacen("INVITE sip", "CANCEL sip", 1);
    ep.receive(cancel.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(
        sent.iter().map(|s| status(s)).collect::<Vec<_>>(),
        vec![200, 487]
    );
    assert_eq!(events, vec![Event::Cancelled { call }]);
    assert_eq!(ep.accept(call, b"", t0), Err(CommandError::Answered));
    // The ACK of the 487 ends the transaction.
    let ack = invite("z9hG4bK1", "c1")
        .replace("CSeq: 1 INVITE", "CSeq: 1 ACK")
        .replacen("INVITE sip", "ACK sip", 1);
    ep.receive(ack.as_bytes(), peer(), t0);
    assert_eq!(ep.calls(), 0);
}

#[test]
fn bye_info_and_reinvite_in_the_dialog() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let (call, tag) = answered(&mut ep, t0);
    let info = in_dialog(
        "INFO",
        2,
        "z9hG4bKi",
        "c1",
        &tag,
        "Content-Type: application/dtmf-relay\r\n",
        "Signal=5\r\nDuration=160\r\n",
    );
    ep.receive(info.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(
        (status(&sent[0]), events),
        (200, vec![Event::Dtmf { call, digit: '5' }])
    );
    let reinvite = in_dialog(
        "INVITE",
        3,
        "z9hG4bKr",
        "c1",
        &tag,
        "Content-Type: application/sdp\r\n",
        "v=0\r\n",
    );
    ep.receive(reinvite.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(status(&sent[0]), 100);
    let Event::Reinvite { txn, .. } = events[0] else {
        panic!()
    };
    ep.answer_reinvite(
        call,
        txn,
        Err((488, vec![("Warning", "304 callgate \"no codec\"".into())])),
        t0,
    )
    .unwrap();
    assert_eq!(status(&drain(&mut ep).0[0]), 488);
    // Its retransmission gets the same 488, not a new question.
    ep.receive(reinvite.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!((status(&sent[0]), events.len()), (488, 0));
    let bye = in_dialog("BYE", 4, "z9hG4bKb", "c1", &tag, "", "");
    ep.receive(bye.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!((status(&sent[0]), events), (200, vec![Event::Bye { call }]));
    ep.release(call, t0);
    ep.receive(bye.as_bytes(), peer(), t0);
    assert_eq!(
        status(&drain(&mut ep).0[0]),
        200,
        "a retransmitted BYE still gets its 200"
    );
    let other = in_dialog("BYE", 5, "z9hG4bKb2", "c1", &tag, "", "");
    ep.receive(other.as_bytes(), peer(), t0);
    assert_eq!(status(&drain(&mut ep).0[0]), 481);
}

#[test]
fn refer_then_notify_reports_the_transfer() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let (call, tag) = answered(&mut ep, t0);
    ep.refer(call, "sip:queue@127.0.0.1:5090", t0).unwrap();
    let refer = drain(&mut ep).0.remove(0);
    assert!(refer.contains("Refer-To: <sip:queue@127.0.0.1:5090>\r\n"));
    let framed = wire::frame(refer.as_bytes(), 4096).unwrap();
    let reply =
        String::from_utf8(wire::response(&framed, 202, "Accepted", None, &[], None)).unwrap();
    ep.receive(reply.as_bytes(), peer(), t0);
    assert_eq!(
        drain(&mut ep).1,
        vec![Event::ReferAnswered {
            call,
            code: Some(202)
        }]
    );
    let notify = in_dialog(
        "NOTIFY",
        2,
        "z9hG4bKn",
        "c1",
        &tag,
        "Event: refer\r\nSubscription-State: terminated;reason=noresource\r\nContent-Type: message/sipfrag\r\n",
        "SIP/2.0 200 OK\r\n",
    );
    ep.receive(notify.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(status(&sent[0]), 200);
    assert_eq!(
        events,
        vec![Event::ReferNotify {
            call,
            status: Some(200),
            terminated: true
        }]
    );
}

#[test]
fn our_bye_is_resent_until_answered_and_times_out_otherwise() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let (call, _) = answered(&mut ep, t0);
    ep.bye(call, Some("Q.850;cause=16".into()), t0).unwrap();
    let bye = drain(&mut ep).0.remove(0);
    assert!(bye.contains("Reason: Q.850;cause=16\r\n"));
    ep.release(call, t0);
    let mut copies = 0;
    let timed_out = loop {
        let at = ep.next_deadline().unwrap();
        ep.poll(at);
        let (sent, events) = drain(&mut ep);
        copies += sent.iter().filter(|s| s.starts_with("BYE")).count();
        if !events.is_empty() {
            break events;
        }
    };
    assert_eq!(timed_out, vec![Event::ByeDone { call, code: None }]);
    assert!(copies >= 7);
    assert_eq!(ep.next_deadline(), None, "nothing left behind");
}

/// Feeds an out-of-dialog OPTIONS; the transaction waiting for its answer.
fn options(ep: &mut Endpoint, branch: &str, t0: Instant) -> TxnKey {
    let opts = invite(branch, &format!("opt-{branch}"))
        .replace("CSeq: 1 INVITE", "CSeq: 1 OPTIONS")
        .replacen("INVITE sip", "OPTIONS sip", 1);
    ep.receive(opts.as_bytes(), peer(), t0);
    let Event::Options { txn } = drain(ep).1[0] else {
        panic!("not an OPTIONS event")
    };
    txn
}

#[test]
fn out_of_dialog_requests_get_their_codes() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let txn = options(&mut ep, "z9hG4bKo", t0);
    ep.answer_options(txn, 503, &[("Retry-After", "10".into())], t0)
        .unwrap();
    let sent = drain(&mut ep).0;
    assert!(sent[0].starts_with("SIP/2.0 503") && sent[0].contains("Retry-After: 10\r\n"));
    for (method, code) in [
        ("REGISTER", 405),
        ("FOO", 501),
        ("BYE", 481),
        ("CANCEL", 481),
    ] {
        let req = invite("z9hG4bKx", "x1")
            .replace("CSeq: 1 INVITE", &format!("CSeq: 1 {method}"))
            .replacen("INVITE sip", &format!("{method} sip"), 1);
        ep.receive(req.as_bytes(), peer(), t0);
        assert_eq!(status(&drain(&mut ep).0[0]), code, "{method}");
    }
    let mismatch = invite("z9hG4bKm", "m1").replace("CSeq: 1 INVITE", "CSeq: 1 OPTIONS");
    ep.receive(mismatch.as_bytes(), peer(), t0);
    assert_eq!(status(&drain(&mut ep).0[0]), 400);
    let scheme = invite("z9hG4bKs", "s1").replacen("INVITE sip:bot@", "INVITE http:bot@", 1);
    ep.receive(scheme.as_bytes(), peer(), t0);
    assert_eq!(status(&drain(&mut ep).0[0]), 416);
    let body = invite("z9hG4bKb", "b1").replace("application/sdp", "text/plain");
    ep.receive(body.as_bytes(), peer(), t0);
    let sent = drain(&mut ep).0;
    assert!(sent[0].starts_with("SIP/2.0 415") && sent[0].contains("Accept: application/sdp"));
    let version = invite("z9hG4bKv", "v1").replacen("SIP/2.0\r\n", "SIP/7.0\r\n", 1);
    ep.receive(version.as_bytes(), peer(), t0);
    assert_eq!(status(&drain(&mut ep).0[0]), 505);
    let req = invite("z9hG4bKq", "q1").replace("Max-Forwards: 70", "Require: 100rel");
    ep.receive(req.as_bytes(), peer(), t0);
    let sent = drain(&mut ep).0;
    assert!(sent[0].starts_with("SIP/2.0 420") && sent[0].contains("Unsupported: 100rel"));
}

#[test]
fn malformed_messages_get_400_when_answerable_and_are_reported() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let short = invite("z9hG4bK1", "c1").replace("Content-Length: ", "Content-Length: 9");
    ep.receive(short.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(status(&sent[0]), 400);
    assert!(matches!(
        &events[0],
        Event::Malformed {
            answered: true,
            error: WireError::ShortBody { .. },
            ..
        }
    ));
    ep.receive(b"\x00\x01garbage", peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert!(sent.is_empty());
    assert!(matches!(
        &events[0],
        Event::Malformed {
            answered: false,
            ..
        }
    ));
    ep.receive(b"\r\n\r\n", peer(), t0);
    assert_eq!(drain(&mut ep), (vec![], vec![]), "keep-alive");
    assert_eq!(ep.calls(), 0);
}

#[test]
fn dialog_making_responses_copy_record_route_in_order() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let rr = "Record-Route: <sip:10.0.0.1;lr;ftag=x>\r\nRecord-Route: <sip:10.0.0.2;lr>\r\n";
    let inv = invite("z9hG4bK1", "c1")
        .replace("Max-Forwards: 70\r\n", &format!("Max-Forwards: 70\r\n{rr}"));
    ep.receive(inv.as_bytes(), peer(), t0);
    let Event::Invite { call, .. } = drain(&mut ep).1[0].clone() else {
        panic!()
    };
    ep.ringing(call).unwrap();
    ep.accept(call, b"v=0\r\n", t0).unwrap();
    for reply in drain(&mut ep).0 {
        assert!(reply.contains(rr), "{reply}");
    }
}

/// The races of a call's start: a CANCEL that loses to our 200 changes
/// nothing (`200` to the CANCEL only), and a BYE before the ACK ends the
/// call all the same.
#[test]
fn cancel_after_the_answer_and_bye_before_the_ack() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    ep.receive(invite("z9hG4bK1", "c1").as_bytes(), peer(), t0);
    let Event::Invite { call, .. } = drain(&mut ep).1[0].clone() else {
        panic!()
    };
    ep.accept(call, b"v=0\r\n", t0).unwrap();
    let tag = to_tag(&drain(&mut ep).0[0]);
    let cancel = invite("z9hG4bK1", "c1")
        .replace("CSeq: 1 INVITE", "CSeq: 1 CANCEL")
        .replacen("INVITE sip", "CANCEL sip", 1);
    ep.receive(cancel.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!(
        (sent.iter().map(|s| status(s)).collect::<Vec<_>>(), events),
        (vec![200], vec![])
    );
    let bye = in_dialog("BYE", 2, "z9hG4bKb", "c1", &tag, "", "");
    ep.receive(bye.as_bytes(), peer(), t0);
    let (sent, events) = drain(&mut ep);
    assert_eq!((status(&sent[0]), events), (200, vec![Event::Bye { call }]));
    ep.release(call, t0);
    assert_eq!(ep.calls(), 0);
}

#[test]
fn options_200_says_what_an_invite_may_carry_and_the_answer_no_extension() {
    let (mut ep, t0) = (endpoint(), Instant::now());
    let txn = options(&mut ep, "z9hG4bKq", t0);
    ep.answer_options(txn, 200, &[], t0).unwrap();
    let sent = drain(&mut ep).0.remove(0);
    for header in [
        "Allow: ",
        "Accept: application/sdp\r\n",
        "Accept-Encoding: identity\r\n",
        "Accept-Language: en\r\n",
        "\r\nSupported:\r\n",
    ] {
        assert!(sent.contains(header), "{header:?} in {sent}");
    }
    // Our own strict framer takes what we send.
    assert!(wire::frame(sent.as_bytes(), 16 * 1024).is_ok(), "{sent}");

    // The INVITE's 200 advertises no extension either (no Replaces).
    ep.receive(invite("z9hG4bKr", "r1").as_bytes(), peer(), t0);
    let Event::Invite { call, .. } = drain(&mut ep).1[0].clone() else {
        panic!()
    };
    ep.accept(call, b"v=0\r\n", t0).unwrap();
    let ok = drain(&mut ep).0.remove(0);
    assert!(
        ok.contains("\r\nSupported:\r\n") && !ok.contains("replaces"),
        "{ok}"
    );
}
