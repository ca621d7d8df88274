//! The lossy ear on audio sent the way the server sends it: one Opus
//! encoder for the whole stream, digital silence when nothing plays.

use super::*;

/// The server's side: one encoder for the call, a caller's decoder.
struct Line {
    enc: Encoder,
    dec: Decoder,
    ear: LossyEar,
    frames: u64,
    released: Vec<Release>,
}

impl Line {
    fn new() -> Line {
        Line {
            enc: server_encoder().unwrap(),
            dec: Decoder::new(16_000, Channels::Mono).unwrap(),
            ear: LossyEar::default(),
            frames: 0,
            released: Vec::new(),
        }
    }

    /// Plays `samples` (padded to whole frames), 20 ms a frame.
    fn play(&mut self, samples: &[i16]) {
        let (mut packet, mut pcm) = (vec![0u8; 1_275], vec![0i16; FRAME_SAMPLES]);
        for chunk in samples.chunks(FRAME_SAMPLES) {
            let mut frame = chunk.to_vec();
            frame.resize(FRAME_SAMPLES, 0);
            let n = self.enc.encode(&frame, &mut packet).unwrap();
            let m = self.dec.decode(&packet[..n], &mut pcm, false).unwrap();
            let bytes: Vec<u8> = pcm[..m].iter().flat_map(|s| s.to_le_bytes()).collect();
            let at = Duration::from_millis(20 * self.frames);
            self.frames += 1;
            self.released.extend(self.ear.frame(at, &bytes));
        }
    }

    fn silence(&mut self, ms: usize) {
        self.play(&vec![0; ms * 16]);
    }

    fn speech(&mut self, seed: u64, ms: u32) {
        let s = media::synth::SpeechSynth::new(16_000, seed).utterance(ms);
        self.play(&s);
    }

    fn prompts(&self) -> Vec<(Prompt, bool)> {
        self.released
            .iter()
            .filter_map(|r| match r.class {
                Class::Prompt { prompt, starts } => Some((prompt, starts)),
                _ => None,
            })
            .collect()
    }

    fn own(&self) -> usize {
        self.released
            .iter()
            .filter(|r| r.class == Class::Own)
            .count()
    }
}

#[test]
fn the_reference_holds_every_prompt_and_the_hold_sequence() {
    let r = Reference::get();
    assert_eq!(r.seqs.len(), Prompt::ALL.len() + 1);
    // ~17 s of prompts alone plus hold and three music loops.
    assert!((1_000..1_400).contains(&r.len()), "{}", r.len());
    let hold = r.seqs.last().unwrap();
    assert_eq!(hold.loop_to, Some(hold.frames.len() - 90));
    assert_eq!(
        r.seqs[2].loop_to,
        Some(0),
        "music alone loops on its own grid"
    );
}

#[test]
fn every_prompt_is_recognised_after_other_audio_and_starts_once() {
    for (i, p) in Prompt::ALL.into_iter().enumerate() {
        let mut line = Line::new();
        line.speech(i as u64 + 3, 900);
        line.silence(200);
        let own_before = line.own();
        assert!(
            own_before >= 40,
            "{p:?}: the speech is own audio ({own_before})"
        );
        let at = line.released.len();
        line.play(&prompt_samples(p));
        line.silence(400);
        let heard = line.prompts();
        let loud = line.released[at..]
            .iter()
            .filter(|r| r.class != Class::Quiet)
            .count();
        assert!(heard.iter().all(|(q, _)| *q == p), "{p:?}: {heard:?}");
        assert!(
            heard.len() * 10 >= loud * 9,
            "{p:?}: {} of {loud} frames",
            heard.len()
        );
        let starts = heard.iter().filter(|(_, s)| *s).count();
        assert_eq!(starts, 1, "{p:?} starts once");
        assert_eq!(
            line.own(),
            own_before,
            "{p:?}: no prompt frame is own audio"
        );
    }
}

#[test]
fn synthetic_speech_is_never_a_prompt() {
    let mut line = Line::new();
    for seed in 0..30 {
        line.speech(seed * 7 + 1, 1_500 + seed as u32 * 37);
        line.silence(if seed % 3 == 0 { 0 } else { 300 });
    }
    assert_eq!(line.prompts(), vec![]);
    assert!(line.own() > 2_000);
}

#[test]
fn hold_music_is_followed_across_its_loops() {
    let mut line = Line::new();
    let mut hold = prompt_samples(Prompt::Hold);
    for _ in 0..5 {
        hold.extend(prompt_samples(Prompt::HoldMusic));
    }
    line.play(&hold);
    let heard = line.prompts();
    let music = heard
        .iter()
        .filter(|(p, _)| *p == Prompt::HoldMusic)
        .count();
    assert!(music >= 5 * 88, "{music} music frames");
    assert_eq!(line.own(), 0);
    let starts: Vec<Prompt> = heard.iter().filter(|(_, s)| *s).map(|(p, _)| *p).collect();
    assert_eq!(starts, vec![Prompt::Hold]);
}

#[test]
fn quiet_goes_at_once_and_held_frames_keep_their_arrival_times() {
    let mut line = Line::new();
    line.silence(100);
    assert_eq!(line.released.len(), 5);
    assert!(line.released.iter().all(|r| r.class == Class::Quiet));
    line.speech(1, 100);
    assert_eq!(line.released.len(), 5, "an onset is held");
    line.speech(2, 60);
    assert_eq!(line.released.len(), 5 + WINDOW);
    for (i, r) in line.released.iter().enumerate() {
        assert_eq!(r.at, Duration::from_millis(20 * i as u64));
        assert_eq!(r.bytes, 640);
    }
    assert_eq!(line.own(), WINDOW);
}
