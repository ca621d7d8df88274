//! The jitter buffer on a virtual clock: packets arrive at given
//! milliseconds, the playout tick runs every 20 ms at +10 ms.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One packet on the wire.
#[derive(Debug, Clone)]
struct Pkt {
    at: u64,
    seq: u16,
    ts: u32,
    payload: Vec<u8>,
}

/// Frame `k` of a 20 ms stream (seq `k`, ts `160 k`, every byte
/// `b'a' + k`) arriving `delay` ms after it was sent at `20 k`.
fn frame(k: u16, delay: u64) -> Pkt {
    Pkt {
        at: 20 * u64::from(k) + delay,
        seq: k,
        ts: 160 * u32::from(k),
        payload: vec![b'a' + (k % 26) as u8; 160],
    }
}

fn stream(frames: std::ops::Range<u16>, delay: u64) -> Vec<Pkt> {
    frames.map(|k| frame(k, delay)).collect()
}

/// Ticks at `20 m + 10` ms for `m` in `ticks`, pushing each packet before
/// the first tick at or after its arrival.
fn play(
    jb: &mut JitterBuffer,
    t0: Instant,
    pkts: &[Pkt],
    ticks: std::ops::Range<u64>,
) -> Vec<Option<Playout>> {
    let mut pkts = pkts.to_vec();
    pkts.sort_by_key(|p| p.at);
    let mut pending = pkts.into_iter().peekable();
    let mut out = Vec::new();
    for m in ticks {
        let now = 20 * m + 10;
        while let Some(p) = pending.next_if(|p| p.at <= now) {
            jb.push(p.seq, p.ts, &p.payload, t0 + ms(p.at));
        }
        out.push(jb.tick(t0 + ms(now)));
    }
    out
}

/// [`play`], one character per tick: the frame's first byte, `~` for
/// concealed, `.` for `None`.
fn run(jb: &mut JitterBuffer, t0: Instant, pkts: &[Pkt], ticks: std::ops::Range<u64>) -> String {
    let frame_len = jb.config().frame_samples as usize;
    play(jb, t0, pkts, ticks)
        .into_iter()
        .map(|out| match out {
            None => '.',
            Some(Playout::Concealed) => '~',
            Some(Playout::Frame(f)) => {
                assert_eq!(f.len(), frame_len);
                char::from(f[0])
            }
        })
        .collect()
}

fn buffer() -> JitterBuffer {
    JitterBuffer::new(JitterConfig::default())
}

#[test]
fn nothing_plays_before_the_first_packet() {
    let mut jb = buffer();
    assert_eq!(run(&mut jb, Instant::now(), &[], 0..3), "...");
    assert_eq!(jb.phase(), Phase::Idle);
}

#[test]
fn an_on_time_stream_plays_frame_by_frame_with_one_frame_of_delay() {
    let mut jb = buffer();
    let out = run(&mut jb, Instant::now(), &stream(0..26, 5), 0..26);
    assert_eq!(out, "abcdefghijklmnopqrstuvwxyz");
    let s = jb.stats();
    assert_eq!(
        (s.played, s.concealed, s.queued, s.received),
        (26, 0, 26, 26)
    );
    assert_eq!((s.target_depth_frames, s.max_depth_frames), (1, 1));
    assert_eq!((s.last_delay, s.max_delay), (ms(5), ms(5)));
}

#[test]
fn reordered_packets_play_in_sequence() {
    let mut jb = buffer();
    let mut pkts = stream(0..6, 5);
    pkts[2].at = 59; // frame 2 arrives after frame 3
    pkts[4].at = 61; // frame 4 arrives with frame 3, before its turn
    let out = run(&mut jb, Instant::now(), &pkts, 0..6);
    // Frame 2 missed its tick: the buffer waited for it (the delay grew by
    // a frame) and nothing was lost.
    assert_eq!(out, "ab~cde");
    let s = jb.stats();
    assert_eq!((s.late, s.concealed, s.played), (0, 1, 5));
}

#[test]
fn a_lost_packet_is_concealed_once() {
    let mut jb = buffer();
    let mut pkts = stream(0..6, 5);
    pkts.remove(2);
    let out = run(&mut jb, Instant::now(), &pkts, 0..6);
    assert_eq!(out, "ab~def");
    let s = jb.stats();
    assert_eq!((s.concealed, s.skipped_frames, s.played), (1, 1, 5));
}

/// With two frames buffered, a missing frame is concealed at its turn and
/// the playout moves on; the packet arriving after that is late.
#[test]
fn a_packet_after_its_turn_is_late() {
    let cfg = JitterConfig {
        min_depth_frames: 2,
        ..JitterConfig::default()
    };
    let mut jb = JitterBuffer::new(cfg);
    let mut pkts = stream(0..8, 5);
    pkts[3].at = 120; // due at tick 4 (frame 3 plays one tick after arrival)
    let out = run(&mut jb, Instant::now(), &pkts, 0..9);
    assert_eq!(out, ".abc~efgh");
    let s = jb.stats();
    assert_eq!((s.late, s.concealed, s.queued), (1, 1, 7));
}

#[test]
fn duplicates_are_dropped_and_counted() {
    let t0 = Instant::now();
    let mut jb = buffer();
    let p = frame(0, 0);
    assert_eq!(jb.push(p.seq, p.ts, &p.payload, t0), Push::Queued);
    assert_eq!(jb.push(p.seq, p.ts, &[b'z'; 160], t0), Push::Duplicate);
    assert_eq!(jb.tick(t0), Some(Playout::Frame(p.payload.clone())));
    assert_eq!(
        jb.push(p.seq, p.ts, &p.payload, t0),
        Push::Duplicate,
        "not late"
    );
    let s = jb.stats();
    assert_eq!((s.received, s.queued, s.duplicates, s.late), (3, 1, 2, 0));
}

#[test]
fn sequence_and_timestamp_wrap_around() {
    let mut jb = buffer();
    let mut pkts = stream(0..8, 5);
    for p in &mut pkts {
        p.seq = p.seq.wrapping_add(65_532); // 65532 ..= 3
        p.ts = p.ts.wrapping_add(u32::MAX - 479); // wraps at frame 3
    }
    pkts.swap(3, 4); // 65535 and 0 swap places…
    (pkts[3].at, pkts[4].at) = (pkts[4].at, pkts[3].at); // …on the wire
    let out = run(&mut jb, Instant::now(), &pkts, 0..9);
    assert_eq!(out, "abc~efgh~");
    assert_eq!(
        jb.stats().late,
        1,
        "frame 3 (seq 65535) came after its turn"
    );
    // Reordered within the buffer's depth, nothing is lost.
    let mut jb = JitterBuffer::new(JitterConfig {
        min_depth_frames: 3,
        ..JitterConfig::default()
    });
    let out = run(&mut jb, Instant::now(), &pkts, 0..11);
    assert_eq!(out, "..abcdefgh~");
}

/// Alternate packets 30 ms late (|D| = 240 samples): the jitter estimate
/// approaches 240, so the target approaches ⌈480 / 160⌉ + 1 = 4 and
/// concealment stops once the delay has grown to it. Back on time, the
/// estimate decays, the target returns to 1 and trimming takes the delay
/// back down.
#[test]
fn the_target_depth_grows_with_jitter_and_shrinks_back() {
    let mut jb = buffer();
    let t0 = Instant::now();
    // Frames 0..299: the last one arrives before the last tick of the run.
    let jittery: Vec<Pkt> = (0..299)
        .map(|k| frame(k, if k % 2 == 1 { 35 } else { 5 }))
        .collect();
    let out = run(&mut jb, t0, &jittery, 0..300);
    assert_eq!(jb.stats().target_depth_frames, 4);
    assert!(jb.stats().max_depth_frames >= 4);
    assert!(!out[20..].contains('~'), "adapted within 20 ticks: {out}");
    assert!(jb.stats().late < 10, "{:?}", jb.stats());
    let calm = stream(299..1_000, 5);
    let out = run(&mut jb, t0, &calm, 300..1_000);
    let s = jb.stats();
    assert_eq!(s.target_depth_frames, 1);
    assert!(s.depth_frames <= 2, "{s:?}");
    assert!(s.dropped_frames > 0, "trimmed: {s:?}");
    assert!(!out.contains('~'), "{out}");
    assert!(s.last_delay <= ms(25), "{s:?}");
}

#[test]
fn a_burst_beyond_the_max_depth_drops_the_oldest() {
    let t0 = Instant::now();
    let mut jb = buffer();
    for p in stream(0..15, 0) {
        jb.push(p.seq, p.ts, &p.payload, t0);
    }
    let s = jb.stats();
    assert_eq!(
        (s.depth_frames, s.max_depth_frames, s.dropped_frames),
        (10, 10, 5)
    );
    assert_eq!(jb.tick(t0), Some(Playout::Frame(vec![b'f'; 160])));
}

#[test]
fn on_hold_it_goes_idle_instead_of_concealing_forever() {
    let mut jb = buffer();
    let t0 = Instant::now();
    let out = run(&mut jb, t0, &stream(0..5, 5), 0..100);
    assert_eq!(&out[..5], "abcde");
    let concealed = out.matches('~').count();
    assert!(concealed < 15, "{out}");
    assert!(out[5 + concealed..].chars().all(|c| c == '.'), "{out}");
    assert_eq!(jb.phase(), Phase::Idle);
    // Off hold: the stream continues 2 s on; it prebuffers and plays.
    let out = run(&mut jb, t0, &stream(100..103, 5), 100..104);
    assert_eq!(out, "wxy~", "the stream stopped again");
    assert_eq!(jb.stats().resyncs, 0);
}

#[test]
fn a_restarted_stream_resynchronises() {
    let mut jb = buffer();
    let t0 = Instant::now();
    assert_eq!(run(&mut jb, t0, &stream(0..3, 5), 0..3), "abc");
    // New sequence numbers (timestamps carry on).
    let mut p = frame(3, 5);
    p.seq = 40_000;
    assert_eq!(jb.push(p.seq, p.ts, &p.payload, t0 + ms(65)), Push::TooFar);
    assert_eq!(jb.tick(t0 + ms(70)), Some(Playout::Frame(p.payload)));
    // New timestamps (sequence numbers carry on).
    let mut p = frame(4, 5);
    (p.seq, p.ts) = (40_001, 1_000_000);
    assert_eq!(jb.push(p.seq, p.ts, &p.payload, t0 + ms(85)), Push::TooFar);
    // Timestamps far behind are not late packets but a new stream too.
    let ts = 1_000_000 - 160 * 200;
    assert_eq!(jb.push(40_002, ts, &[b'z'; 160], t0 + ms(86)), Push::TooFar);
    assert_eq!(jb.tick(t0 + ms(90)), Some(Playout::Frame(vec![b'z'; 160])));
    let s = jb.stats();
    assert_eq!((s.resyncs, s.received), (3, 6));
}

#[test]
fn reset_forgets_the_stream() {
    let mut jb = buffer();
    let t0 = Instant::now();
    assert_eq!(run(&mut jb, t0, &stream(0..3, 5), 0..3), "abc");
    jb.reset();
    assert_eq!(jb.tick(t0 + ms(70)), None);
    assert_eq!(
        jb.push(9_999, 123_456, &[b'q'; 160], t0 + ms(75)),
        Push::Queued
    );
    assert_eq!(jb.tick(t0 + ms(90)), Some(Playout::Frame(vec![b'q'; 160])));
}

#[test]
fn a_packet_from_before_the_start_moves_the_playout_back() {
    let mut jb = JitterBuffer::new(JitterConfig {
        min_depth_frames: 2,
        ..JitterConfig::default()
    });
    let mut pkts = stream(0..4, 5);
    pkts[0].at = 26; // frame 1 arrives first
    assert_eq!(run(&mut jb, Instant::now(), &pkts, 0..5), ".abcd");
}

/// Packets of 10 ms and 30 ms, each arriving 2 ms after its last sample
/// was captured: the timestamps put every sample where it belongs, so the
/// frames played are exactly the stream, with nothing concealed.
#[test]
fn ten_and_thirty_ms_packets_make_exact_frames() {
    for (samples, target) in [(80usize, 1), (240, 2)] {
        let mut jb = buffer();
        let audio: Vec<u8> = (0..16_000u32).map(|i| (i % 251) as u8).collect();
        let pkts: Vec<Pkt> = (audio.chunks(samples).enumerate())
            .map(|(k, chunk)| Pkt {
                at: ((k + 1) * samples / 8 + 2) as u64,
                seq: k as u16,
                ts: (k * samples) as u32,
                payload: chunk.to_vec(),
            })
            .collect();
        let out = play(&mut jb, Instant::now(), &pkts, 0..90);
        let started = out.iter().position(Option::is_some).unwrap();
        let frames: Vec<Vec<u8>> = (out[started..].iter())
            .map(|o| match o {
                Some(Playout::Frame(f)) => f.clone(),
                other => panic!("{samples}-sample packets: {other:?} in {out:?}"),
            })
            .collect();
        assert_eq!(frames.concat(), audio[..frames.len() * 160], "{samples}");
        assert_eq!(jb.stats().target_depth_frames, target);
    }
}

/// A 10 ms packet lost inside a frame: the frame plays with silence of the
/// buffer's codec in its second half.
#[test]
fn a_frame_with_a_gap_is_played_with_silence_in_it() {
    let t0 = Instant::now();
    let mut jb = JitterBuffer::with_silence(JitterConfig::default(), crate::g711::ALAW_SILENCE);
    for k in [0u16, 1, 2, 4, 5] {
        jb.push(k, 80 * u32::from(k), &[b'a' + k as u8; 80], t0);
    }
    let Some(Playout::Frame(first)) = jb.tick(t0) else {
        panic!()
    };
    assert_eq!(first, [[b'a'; 80], [b'b'; 80]].concat());
    let Some(Playout::Frame(gap)) = jb.tick(t0 + ms(20)) else {
        panic!()
    };
    assert_eq!(gap, [[b'c'; 80], [0xD5; 80]].concat());
}

#[test]
fn a_nonsense_config_is_clamped_to_something_that_works() {
    let t0 = Instant::now();
    let mut jb = JitterBuffer::new(JitterConfig {
        frame_samples: 0,
        min_depth_frames: 50,
        max_depth_frames: 0,
        idle_after_frames: 0,
    });
    let cfg = jb.config();
    assert_eq!(
        (
            cfg.frame_samples,
            cfg.min_depth_frames,
            cfg.max_depth_frames
        ),
        (1, 1, 1)
    );
    // A packet longer than the whole buffer keeps its newest samples.
    assert_eq!(jb.push(0, 0, &[7, 8], t0), Push::Queued);
    assert_eq!(jb.stats().depth_frames, 1);
    assert_eq!(jb.tick(t0), Some(Playout::Frame(vec![8])));
}
