use super::*;
use callgate_sim::SimAddrs;

fn caps() -> Caps {
    Caps {
        stt_cap: 225,
        tts_cap: 240,
        dialog_cap: 250,
        db_max_calls: 260,
        headroom: 5,
        queue_max: 100,
        queue_timeout_ms: 4_000,
        stt_empty_finals: 0.0,
        instance_max_lag_ms: 60,
    }
}

#[test]
fn the_written_server_config_carries_every_ceiling() {
    let at = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let sims = SimAddrs {
        stt: at(9001),
        tts: at(9002),
        dialog_grpc: at(9003),
        dialog_http: at(9004),
        cartesia: at(9005),
    };
    let mut cfg = crate::server_config(&sims, "host=/tmp/pg user=postgres", "bench-1");
    caps().apply(&mut cfg);
    // Read back from the TOML the server child is given.
    let cfg: Config = toml::from_str(&toml::to_string(&cfg).unwrap()).unwrap();
    cfg.validate().unwrap();
    assert_eq!(cfg.server.instance, "bench-1");
    assert_eq!(cfg.drain.deadline_s, SERVER_DRAIN_S);
    assert_eq!(cfg.database.calls_ceiling(), 260);
    assert_eq!(
        (
            cfg.stt.max_sessions,
            cfg.tts.max_sessions,
            cfg.dialog.max_streams
        ),
        (225, 240, 250)
    );
    assert_eq!((cfg.admission.headroom, cfg.admission.queue_max), (5, 100));
    assert_eq!(cfg.admission.queue_timeout_ms, 4_000);
    assert_eq!(cfg.stt.url, format!("ws://{}/v1/listen", sims.stt));
    assert_eq!(cfg.log.filter, "warn");
    assert_eq!(caps().expected_capacity(), 220);
}

#[test]
fn a_sip_listener_is_loopback_with_its_own_rtp_range() {
    let sip = SipListener::on_free_port(20_000, 225).unwrap();
    assert!(sip.addr.ip().is_loopback() && sip.addr.port() != 0);
    assert_eq!((sip.rtp_port_min, sip.rtp_port_max), (20_000, 20_449));
    assert!(
        SipListener::on_free_port(65_000, 1_000).is_err(),
        "past 65535"
    );
    assert!(
        SipListener::on_free_port(80, 10).is_err(),
        "privileged ports"
    );
    let mut cfg = Config::default();
    sip.apply(&mut cfg);
    let cfg: Config = toml::from_str(&toml::to_string(&cfg).unwrap()).unwrap();
    cfg.validate().unwrap();
    assert!(cfg.sip.enabled);
    assert_eq!(cfg.sip.listen, sip.addr);
    assert_eq!(cfg.sip.overflow, SipOverflow::Reject);
}

#[test]
fn the_simulators_enforce_the_same_caps() {
    let sim = caps().sim_config();
    assert_eq!(
        (
            sim.stt.max_sessions,
            sim.tts.max_sockets,
            sim.dialog.max_streams
        ),
        (225, 240, 250)
    );
    let json = serde_json::to_string(&sim).unwrap();
    let back: SimConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back.stt.max_sessions, 225);
    let none = Caps {
        headroom: 300,
        ..caps()
    };
    assert!(none.validate().is_err());
}

#[test]
fn idle_means_nothing_in_flight_anywhere() {
    let mut s = serde_json::json!({
        "admission": { "active": 0, "queued": 0 },
        "calls": { "setting_up": 0, "overflowing": 0, "speaking": 0 },
        "write_backlog": 0
    });
    assert!(is_idle(&s));
    s["calls"]["overflowing"] = 3.into();
    assert!(!is_idle(&s));
    s["calls"]["overflowing"] = 0.into();
    s["write_backlog"] = 12.into();
    assert!(!is_idle(&s));
    assert!(!is_idle(&serde_json::json!({})));
}

#[test]
fn metrics_are_summed_by_label() {
    let text = "# TYPE x counter\n\
        callgate_call_stalls_total{culprit=\"tts\",action=\"apology\"} 2\n\
        callgate_call_stalls_total{culprit=\"tts\",action=\"transfer\"} 1\n\
        callgate_call_stalls_total{culprit=\"instance\",action=\"apology\"} 4\n\
        callgate_call_stalls_total_other 9\n\
        callgate_instance_overload_trips_total 3\n";
    assert_eq!(
        metric(text, "callgate_call_stalls_total", "culprit=\"tts\""),
        3.0
    );
    assert_eq!(metric(text, "callgate_call_stalls_total", ""), 7.0);
    assert_eq!(
        metric(text, "callgate_instance_overload_trips_total", ""),
        3.0
    );
    assert_eq!(metric(text, "callgate_absent_total", ""), 0.0);
}
