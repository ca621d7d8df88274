//! Tests of the kamailio harness against the real programs.
//! Each test runs a real Kamailio with the production configuration in
//! front of sipp stand-ins for callgate instances, on loopback ports of
//! its own, and finishes in a few seconds.

use super::*;

/// Unwraps with the error's own text (log tails keep their newlines).
fn ok<T>(r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Polls `cond` until it holds; panics naming `what` after `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "no {what} within {limit:?}");
        std::thread::sleep(POLL);
    }
}

fn overlapping(calls: u32) -> CallPlan {
    CallPlan {
        calls,
        rate_per_s: 20,
        hold: ms(1_000),
        ..CallPlan::default()
    }
}

fn sequential(calls: u32) -> CallPlan {
    CallPlan {
        calls,
        rate_per_s: 5,
        hold: ms(20),
        ..CallPlan::default()
    }
}

fn all_succeeded(calls: u32) -> (u64, u64) {
    (calls.into(), 0)
}

#[test]
fn call_load_spreads_overlapping_calls_over_both_instances() {
    let [proxy, a, b] = ok(free_udp_addrs::<3>());
    let uas_a = ok(SippUas::start(a, UasScenario::Answer));
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    let kam = ok(Kamailio::start(proxy, &[a, b], &KamOpts::default()));

    let report = ok(place_calls(proxy, &overlapping(20)));

    assert_eq!(report.outcome(), all_succeeded(20), "{}", kam.log());
    let (na, nb) = (uas_a.invites(), uas_b.invites());
    assert_eq!(na + nb, 20, "a {na}, b {nb}");
    // Each new call goes to the instance with fewer calls up.
    assert!(na.abs_diff(nb) <= 2, "uneven spread: a {na}, b {nb}");
    // Every BYE passed the proxy (Record-Route) and released its load.
    for d in ok(kam.destinations()) {
        assert_eq!(d.load, 0, "{d:?}");
    }
}

#[test]
fn call_load_keeps_non_overlapping_calls_on_the_first_instance() {
    let [proxy, a, b] = ok(free_udp_addrs::<3>());
    let uas_a = ok(SippUas::start(a, UasScenario::Answer));
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    let kam = ok(Kamailio::start(proxy, &[a, b], &KamOpts::default()));

    let report = ok(place_calls(proxy, &sequential(6)));

    // Least-loaded with every load at 0 is a tie, and ties go to the
    // first destination: by design, not a fault.
    assert_eq!(report.outcome(), all_succeeded(6), "{}", kam.log());
    assert_eq!((uas_a.invites(), uas_b.invites()), (6, 0));
}

#[test]
fn round_robin_alternates_non_overlapping_calls() {
    let [proxy, a, b] = ok(free_udp_addrs::<3>());
    let uas_a = ok(SippUas::start(a, UasScenario::Answer));
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    let opts = KamOpts {
        algorithm: Algorithm::RoundRobin,
        ..KamOpts::default()
    };
    let kam = ok(Kamailio::start(proxy, &[a, b], &opts));

    let report = ok(place_calls(proxy, &sequential(6)));

    assert_eq!(report.outcome(), all_succeeded(6), "{}", kam.log());
    assert_eq!((uas_a.invites(), uas_b.invites()), (3, 3));
}

#[test]
fn instance_answering_options_503_gets_no_new_calls_until_it_answers_200() {
    let [proxy, a, b] = ok(free_udp_addrs::<3>());
    let uas_a = ok(SippUas::start(a, UasScenario::Answer));
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    let opts = KamOpts::default();
    let kam = ok(Kamailio::start(proxy, &[a, b], &opts));
    wait_until("first probe of b", ms(3_000), || uas_b.probes() > 0);

    // b starts draining: its probes now get 503.
    let uas_b = ok(uas_b.restart(UasScenario::Refuse));
    let interval = Duration::from_secs(opts.ping_interval_s.into());
    let marked = ok(kam.wait_for_state(b, DsState::Inactive, 3 * interval));
    eprintln!(
        "drain: b inactive {marked:?} after it began answering 503 (probe every {interval:?})"
    );
    assert!(
        ok(kam.destination(b)).probing,
        "b must stay probed to come back"
    );
    assert_eq!(ok(kam.keepalive()), 200, "a is still serving");

    let report = ok(place_calls(proxy, &overlapping(10)));
    assert_eq!(report.outcome(), all_succeeded(10), "{}", kam.log());
    assert_eq!((uas_a.invites(), uas_b.invites()), (10, 0));

    // b is back: the next good probe returns it to the pool.
    let uas_b = ok(uas_b.restart(UasScenario::Answer));
    let back = ok(kam.wait_for_state(b, DsState::Active, 3 * interval));
    eprintln!("recovery: b active {back:?} after it began answering 200");
    let report = ok(place_calls(proxy, &overlapping(4)));
    assert_eq!(report.outcome(), all_succeeded(4), "{}", kam.log());
    assert_eq!(uas_b.invites(), 2, "b shares new calls again");
}

#[test]
fn invite_503_fails_over_to_the_next_instance() {
    let [proxy, a, b] = ok(free_udp_addrs::<3>());
    let uas_a = ok(SippUas::start(a, UasScenario::Refuse));
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    // No probe runs during the test: only the INVITE can reveal that a
    // (first in the list, so first choice) refuses.
    let opts = KamOpts {
        ping_interval_s: 60,
        ..KamOpts::default()
    };
    let kam = ok(Kamailio::start(proxy, &[a, b], &opts));

    let report = ok(place_calls(
        proxy,
        &CallPlan {
            calls: 5,
            rate_per_s: 5,
            hold: ms(100),
            ..CallPlan::default()
        },
    ));

    assert_eq!(report.outcome(), all_succeeded(5), "{}", kam.log());
    eprintln!(
        "503 failover: mean answer time {:?} over 5 calls, the first failed over",
        report.answer_avg
    );
    assert_eq!(
        uas_a.invites(),
        1,
        "a refused the first call, then left the pool"
    );
    assert_eq!(uas_b.invites(), 5);
    let (ua, ub) = (sip_uri(a), sip_uri(b));
    assert_eq!(kam.dispatched()[..2], [ua.clone(), ub], "{}", kam.log());
    assert!(
        kam.log()
            .contains(&format!("callgate-failover {ua} answered 503"))
    );
    let marked = ok(kam.destination(a));
    assert_eq!((marked.state, marked.probing), (DsState::Inactive, true));
}

#[test]
fn silent_instance_fails_over_after_fr_timer() {
    // Nothing listens on `dead`.
    let [proxy, dead, b] = ok(free_udp_addrs::<3>());
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    let opts = KamOpts {
        ping_interval_s: 60,
        ..KamOpts::default()
    };
    let kam = ok(Kamailio::start(proxy, &[dead, b], &opts));

    let report = ok(place_calls(
        proxy,
        &CallPlan {
            calls: 1,
            rate_per_s: 1,
            hold: ms(10),
            ..CallPlan::default()
        },
    ));

    let took = report.answer_avg;
    eprintln!(
        "timeout failover: answered {took:?} after the INVITE (fr_timer {} ms)",
        opts.fr_timer_ms
    );
    assert_eq!(report.outcome(), all_succeeded(1), "{}", kam.log());
    assert_eq!(uas_b.invites(), 1);
    // The failover waited for tm's timer (which ticks coarsely and
    // fired up to ~60 ms early in practice), not for an ICMP error.
    let fr = ms(opts.fr_timer_ms.into());
    assert!(
        took >= fr * 3 / 4 && took < fr + ms(500),
        "answered {took:?} after the INVITE"
    );
    assert_eq!(ok(kam.destination(dead)).state, DsState::Inactive);
}

#[test]
fn wholly_drained_pool_refuses_calls_and_keepalives_with_503() {
    let [proxy, a] = ok(free_udp_addrs::<2>());
    let uas_a = ok(SippUas::start(a, UasScenario::Refuse));
    let kam = ok(Kamailio::start(proxy, &[a], &KamOpts::default()));
    ok(kam.wait_for_state(a, DsState::Inactive, ms(3_000)));

    assert_eq!(ok(kam.keepalive()), 503);
    let report = ok(place_calls(proxy, &sequential(1)));

    assert_eq!(report.outcome(), (0, 1));
    assert_eq!(uas_a.invites(), 0, "refused at the proxy");
    assert!(
        kam.log().contains("no active callgate instance"),
        "{}",
        kam.log()
    );
}

#[test]
fn calls_in_progress_outlive_their_instances_leaving_the_pool() {
    let [proxy, a, b] = ok(free_udp_addrs::<3>());
    let uas_a = ok(SippUas::start(a, UasScenario::Answer));
    let uas_b = ok(SippUas::start(b, UasScenario::Answer));
    // No probe to undo the operator's marks.
    let opts = KamOpts {
        ping_interval_s: 60,
        ..KamOpts::default()
    };
    let kam = ok(Kamailio::start(proxy, &[a, b], &opts));
    let plan = CallPlan {
        calls: 4,
        rate_per_s: 20,
        hold: ms(2_500),
        ..CallPlan::default()
    };
    let caller = std::thread::spawn(move || place_calls(proxy, &plan));
    wait_until("4 calls up", ms(5_000), || {
        uas_a.invites() + uas_b.invites() == 4
    });

    // Both instances leave the pool while their calls are up.
    ok(kam.set_state(a, DsState::Inactive, Probing::Off));
    ok(kam.set_state(b, DsState::Inactive, Probing::Off));
    assert_eq!(ok(kam.keepalive()), 503);

    // ACK and BYE follow Record-Route, not the dispatcher.
    let report = ok(caller
        .join()
        .unwrap_or_else(|_| panic!("the caller thread panicked")));
    assert_eq!(report.outcome(), all_succeeded(4), "{}", kam.log());
    for d in ok(kam.destinations()) {
        assert_eq!((d.state, d.load), (DsState::Inactive, 0), "{d:?}");
    }
}

#[test]
fn start_fails_with_kamailios_log_when_its_port_is_taken() {
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = taken.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let [dest] = ok(free_udp_addrs::<1>());

    match Kamailio::start(addr, &[dest], &KamOpts::default()) {
        Err(HarnessError::Exited { log_tail, .. }) => {
            assert!(log_tail.contains("bind"), "{log_tail}");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("kamailio started on a taken port"),
    }
}

#[test]
fn reads_kamcmd_dispatcher_list() {
    let text = "\t\t\t\tDEST: {\n\t\t\t\t\tURI: sip:127.0.0.1:5072\n\t\t\t\t\tFLAGS: IP\n\
                \t\t\t\t\tPRIORITY: 1\n\t\t\t\t\tRUNTIME: {\n\t\t\t\t\t\tDLGLOAD: 3\n\
                \t\t\t\tDEST: {\n\t\t\t\t\tURI: sip:127.0.0.1:5071\n\t\t\t\t\tFLAGS: AX\n";
    let got = parse_dispatcher_list(text).unwrap_or_default();
    let want = [
        ("sip:127.0.0.1:5072", DsState::Inactive, true, 3),
        ("sip:127.0.0.1:5071", DsState::Active, false, 0),
    ];
    assert_eq!(got.len(), 2, "{got:?}");
    for (d, (uri, state, probing, load)) in got.iter().zip(want) {
        assert_eq!(
            (d.uri.as_str(), d.state, d.probing, d.load),
            (uri, state, probing, load)
        );
    }
}

#[test]
fn counts_distinct_received_invites_in_a_sipp_trace() {
    let sep = "----------------------------------------------- 2026-01-01 00:00:00.0\n";
    let entry = |dir: &str, first: &str, id: &str| {
        format!("{sep}UDP message {dir} [1] bytes :\n\n{first}\nVia: x\nCall-ID: {id}\n\n")
    };
    let log = [
        entry("received", "INVITE sip:a@b SIP/2.0", "c1"),
        entry("received", "INVITE sip:a@b SIP/2.0", "c1"), // retransmission
        entry("sent", "SIP/2.0 200 OK", "c1"),
        entry("received", "OPTIONS sip:b SIP/2.0", "p1"),
        entry("received", "INVITE sip:a@b SIP/2.0", "c2"),
    ]
    .concat();
    assert_eq!(received_call_ids(&log, "INVITE").len(), 2);
    assert_eq!(received_call_ids(&log, "OPTIONS").len(), 1);
}

#[test]
fn reads_sipp_cumulative_counters() {
    let csv = "StartTime;SuccessfulCall(P);SuccessfulCall(C);FailedCall(P);FailedCall(C);ResponseTime1(C)\n\
               t;0;0;0;0;00:00:00:000000\n\
               t;3;19;0;1;00:00:01:050000\n";
    assert_eq!(
        parse_sipp_stats(csv),
        Some(CallReport {
            successful: 19,
            failed: 1,
            answer_avg: ms(1_050),
        })
    );
}

#[test]
fn dispatcher_list_keeps_the_given_order_by_priority() {
    let [a, b] =
        ["127.0.0.1:5071", "127.0.0.1:5072"].map(|s| s.parse().unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(
        dispatcher_list(&[a, b]),
        "1 sip:127.0.0.1:5071 0 2 duid=callgate-0\n1 sip:127.0.0.1:5072 0 1 duid=callgate-1\n"
    );
}
