//! Barge-in on the caller's voice, on a virtual clock: the pause, its
//! taking back, its commitment, echo and steady noise, and turn timing.
//! Bot audio is 16 kHz linear PCM whose frames are numbered by their
//! sample value, so a test can tell exactly which frames were re-sent.

use super::*;
use media::format::samples_to_pcm16le;
use media::synth::SpeechSynth;

const TEXT: &str = "Hello, this is Luigi's, how can I help you today?";
const SAMPLES: usize = 320;

fn reversible() -> Sim {
    let mut cfg = config(LegFormat::L16k16);
    cfg.barge_in.policy = BargeInPolicy::Reversible;
    Sim::new(cfg)
}

/// Frame `i` of bot audio: a constant level about −18 dBFS, numbered.
fn numbered(frames: u16) -> Vec<u8> {
    (0..frames)
        .flat_map(|i| samples_to_pcm16le(&[4_000 + 8 * i as i16; SAMPLES]))
        .collect()
}

fn frame_id(frame: &[u8]) -> u16 {
    let s = i16::from_le_bytes([frame[0], frame[1]]);
    ((s - 4_000) / 8) as u16
}

fn ids(cmds: &[Command]) -> Vec<u16> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Play(f) => Some(frame_id(f)),
            _ => None,
        })
        .collect()
}

/// The greeting, fully generated: `frames` numbered frames.
fn greet(s: &mut Sim, frames: u16) {
    s.step(dialog_text(0, TEXT));
    s.step(Input::Dialog(DialogEvent::TurnComplete { turn: TurnId(0) }));
    s.step(Input::Tts(TtsEvent::Audio {
        context: ContextId(1),
        bytes: numbered(frames),
    }));
    s.step(Input::Tts(TtsEvent::ContextFinal {
        context: ContextId(1),
    }));
}

/// Caller frames of `samples` then silence, for `d`.
fn caller(s: &mut Sim, samples: &[i16], d: Duration) -> Vec<(Instant, Vec<Command>)> {
    let mut chunks = samples.chunks(SAMPLES);
    let mut steps = Vec::new();
    let end = s.now + d;
    while s.now < end {
        s.now += FRAME;
        let chunk = chunks
            .next()
            .map(<[i16]>::to_vec)
            .unwrap_or(vec![0; SAMPLES]);
        let step = s.step(Input::Leg(LegEvent::Audio(samples_to_pcm16le(&chunk))));
        for m in marks(&step) {
            s.step(Input::Leg(LegEvent::Played(m)));
        }
        steps.push((s.now, step));
    }
    steps
}

fn all(steps: &[(Instant, Vec<Command>)]) -> Vec<Command> {
    steps.iter().flat_map(|(_, c)| c.iter().cloned()).collect()
}

fn has(log: &[Command], pred: impl Fn(&Command) -> bool) -> bool {
    log.iter().any(pred)
}

#[test]
fn a_cough_pauses_the_bot_in_the_same_step_and_it_resumes_with_nothing_lost() {
    let mut s = reversible();
    greet(&mut s, 150);
    let before = s.pass(Duration::from_millis(300));
    let last_before = *ids(&before).last().expect("the greeting plays");
    let cough = SpeechSynth::new(16_000, 3).utterance(150);
    let steps = caller(&mut s, &cough, Duration::from_millis(1_200));
    let pause = steps
        .iter()
        .position(|(_, c)| c.contains(&Command::Clear))
        .expect("the cough pauses the bot");
    let (paused_at, step) = &steps[pause];
    let clear = position(step, |c| *c == Command::Clear).unwrap_or_default();
    assert_eq!(plays(&step[clear..]), 0, "no frame after the clear");
    let onset = s
        .core
        .interaction()
        .barge_in_stop_max_us
        .expect("stop measured");
    assert!(
        onset <= 70_000,
        "onset → clear {onset} µs (min speech 50 ms, within a frame)"
    );
    let resumed = steps[pause..]
        .iter()
        .position(|(_, c)| plays(c) > 0)
        .map(|i| pause + i)
        .expect("the bot resumes");
    let (resumed_at, _) = steps[resumed];
    let confirm = Duration::from_millis(600);
    assert!(
        resumed_at <= *paused_at + confirm + FRAME,
        "resumed {:?} after the pause",
        resumed_at - *paused_at
    );
    let sent_before: Vec<u16> = ids(&all(&steps[..=pause]));
    let last_sent = sent_before.last().copied().unwrap_or(last_before);
    let rest = all(&steps[resumed..]);
    let mut after = ids(&rest);
    after.extend(ids(&s.pass(Duration::from_secs(4))));
    let first = after[0];
    assert!(
        first <= last_sent && first + 5 >= last_sent,
        "resumes from the first unheard frame: {first} (last sent {last_sent})"
    );
    assert_eq!(
        after,
        (first..150).collect::<Vec<_>>(),
        "every later frame once"
    );
    assert!(marks(&s.log).contains(&"turn-0".to_string()));
    let t = turns(&s.log);
    assert_eq!(t, [(state_store::Speaker::Bot, TEXT.to_string(), false)]);
    assert!(!has(&s.log, |c| matches!(c, Command::DialogInterrupt(..))));
    assert!(!has(&s.log, |c| matches!(c, Command::TtsCancel(_))));
    let i = s.core.interaction();
    assert_eq!(
        (i.barge_in_pauses, i.false_barge_ins, i.interruptions),
        (1, 1, 0)
    );
}

#[test]
fn words_within_the_window_commit_the_interruption_with_the_heard_text() {
    let mut s = reversible();
    greet(&mut s, 150);
    s.pass(Duration::from_millis(1_500));
    let speech = SpeechSynth::new(16_000, 5).utterance(1_000);
    let steps = caller(&mut s, &speech, Duration::from_millis(200));
    assert!(has(&all(&steps), |c| *c == Command::Clear), "paused");
    let commit = s.step(stt("wait a second", false));
    assert!(
        !commit.contains(&Command::Clear),
        "the pause already cleared"
    );
    assert!(commit.contains(&Command::TtsCancel(ContextId(1))));
    let heard = commit
        .iter()
        .find_map(|c| match c {
            Command::DialogInterrupt(TurnId(0), h) => Some(h.clone()),
            _ => None,
        })
        .expect("the dialog is told");
    assert!(!heard.is_empty() && TEXT.starts_with(&heard) && heard.len() < TEXT.len());
    let t = turns(&commit);
    assert_eq!(t, [(state_store::Speaker::Bot, heard, true)]);
    let later = caller(&mut s, &[], Duration::from_secs(2));
    assert_eq!(plays(&all(&later)), 0, "no frame of the interrupted turn");
    let i = s.core.interaction();
    assert_eq!(
        (i.barge_in_pauses, i.false_barge_ins, i.interruptions),
        (1, 0, 1)
    );
}

/// Plays the greeting with the caller's line carrying the bot's own audio
/// back `delay` later, `loss_db` quieter. Returns the pauses.
fn echo_pauses(loss_db: f32) -> u64 {
    let mut s = reversible();
    greet(&mut s, 150);
    let gain = 10f32.powf(-loss_db / 20.0);
    let delay = 5; // frames: 100 ms round trip
    let mut sent: Vec<Vec<i16>> = Vec::new();
    for _ in 0..150 {
        let back = sent
            .len()
            .checked_sub(delay)
            .map(|i| {
                sent[i]
                    .iter()
                    .map(|&x| (f32::from(x) * gain) as i16)
                    .collect()
            })
            .unwrap_or(vec![0; SAMPLES]);
        s.now += FRAME;
        let step = s.step(Input::Leg(LegEvent::Audio(samples_to_pcm16le(&back))));
        for c in &step {
            if let Command::Play(f) = c {
                sent.push(media::format::pcm16le_to_samples(f));
            }
        }
    }
    s.core.interaction().barge_in_pauses
}

#[test]
fn the_bots_own_echo_does_not_pause_it() {
    assert_eq!(echo_pauses(14.0), 0, "echo 14 dB down");
    // The check can fail: an echo louder than the assumed return loss is
    // taken for the caller.
    assert!(echo_pauses(3.0) > 0, "echo only 3 dB down");
}

#[test]
fn steady_background_noise_raises_the_floor_and_speech_over_it_still_pauses() {
    let mut s = reversible();
    let mut synth = SpeechSynth::new(16_000, 8);
    caller(
        &mut s,
        &synth.noise(1_000, -35.0),
        Duration::from_millis(1_000),
    );
    greet(&mut s, 150);
    let noisy = caller(
        &mut s,
        &synth.noise(2_000, -35.0),
        Duration::from_millis(2_000),
    );
    assert!(plays(&all(&noisy)) > 50, "the greeting plays");
    assert_eq!(
        s.core.interaction().barge_in_pauses,
        0,
        "noise is not speech"
    );
    let mut speech = synth.utterance(600);
    for (v, n) in speech.iter_mut().zip(synth.noise(600, -35.0)) {
        *v = v.saturating_add(n);
    }
    s.step(stt("book a table", true));
    s.reply(1, 2, "Sure, which day?", Duration::from_secs(2));
    s.pass(Duration::from_millis(200));
    caller(&mut s, &speech, Duration::from_millis(200));
    assert_eq!(s.core.interaction().barge_in_pauses, 1, "speech over noise");
}

#[test]
fn the_words_policy_ignores_a_cough_and_immediate_commits_on_it() {
    for (policy, pauses, interruptions) in [
        (BargeInPolicy::Words, 0, 0),
        (BargeInPolicy::Immediate, 0, 1),
    ] {
        let mut cfg = config(LegFormat::L16k16);
        cfg.barge_in.policy = policy;
        let mut s = Sim::new(cfg);
        greet(&mut s, 150);
        s.pass(Duration::from_millis(300));
        let cough = SpeechSynth::new(16_000, 3).utterance(150);
        caller(&mut s, &cough, Duration::from_millis(1_000));
        let i = s.core.interaction();
        assert_eq!(
            (i.barge_in_pauses, i.interruptions),
            (pauses, interruptions),
            "{policy:?}"
        );
    }
}

#[test]
fn a_hang_up_during_a_pause_ends_once_with_what_was_heard() {
    let mut s = reversible();
    greet(&mut s, 150);
    s.pass(Duration::from_millis(1_500));
    let speech = SpeechSynth::new(16_000, 5).utterance(1_000);
    caller(&mut s, &speech, Duration::from_millis(200));
    assert_eq!(s.core.interaction().barge_in_pauses, 1);
    s.step(Input::Leg(LegEvent::Hangup));
    s.step(Input::Leg(LegEvent::Hangup));
    assert_eq!(s.end().reason, EndReason::CallerHangup);
    assert_eq!(s.core.late_ends(), 1);
    let t = turns(&s.log);
    assert_eq!(t.len(), 1);
    assert!(
        t[0].2 && TEXT.starts_with(&t[0].1) && !t[0].1.is_empty(),
        "{t:?}"
    );
    assert_eq!(s.core.next_deadline(), None);
}

#[test]
fn each_turn_says_where_its_time_went() {
    let mut s = reversible();
    greet(&mut s, 10);
    s.pass(Duration::from_millis(400));
    let speech = SpeechSynth::new(16_000, 2).utterance(800);
    caller(&mut s, &speech, Duration::from_millis(1_000));
    s.step(stt("a table for two", true));
    s.now += Duration::from_millis(250);
    s.step(dialog_text(1, "Sure."));
    s.step(Input::Dialog(DialogEvent::TurnComplete { turn: TurnId(1) }));
    s.now += Duration::from_millis(120);
    s.tts_audio(2, Duration::from_millis(400));
    let t = s.core.turn_latencies();
    assert_eq!(t.len(), 1, "{t:?}");
    let l = t[0];
    assert_eq!(l.turn, 1);
    // Speech ended 200 ms into the caller's second of audio: 800 ms of
    // speech then silence until the final, 200 ms later.
    let stt_us = l.stt_us.expect("speech end seen by the VAD");
    assert!((150_000..=260_000).contains(&stt_us), "stt {stt_us} µs");
    assert_eq!(l.dialog_us, Some(250_000));
    assert_eq!(l.tts_us, Some(120_000));
    assert_eq!(l.own_us, Some(0), "virtual time: the core costs nothing");
    assert_eq!(l.total_us, Some(stt_us + 370_000));
    // The reply plays out; its turn record carries the same split, and
    // the caller's turn (and the greeting, which answered no one) none.
    s.step(Input::Tts(TtsEvent::ContextFinal {
        context: ContextId(2),
    }));
    s.pass(Duration::from_millis(1_500));
    let recorded: Vec<_> = s
        .log
        .iter()
        .filter_map(|c| match c {
            Command::Record(Rec::Turn {
                speaker, latency, ..
            }) => Some((*speaker, *latency)),
            _ => None,
        })
        .collect();
    assert_eq!(
        recorded,
        [
            (state_store::Speaker::Bot, None),
            (state_store::Speaker::Caller, None),
            (state_store::Speaker::Bot, Some(l)),
        ],
        "{recorded:?}"
    );
}
