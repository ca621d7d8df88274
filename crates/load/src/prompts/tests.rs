//! The prompt classifier on the server's real asset bytes.

use media::synth::SpeechSynth;

use super::*;

const FORMATS: [AudioFormat; 3] = [AudioFormat::MULAW_8K, AudioFormat::PCM16_16K, ALAW];

fn prompt(p: Prompt, format: AudioFormat) -> Vec<u8> {
    audio(p, format).expect("the server converts prompts to this format")
}

/// `audio` as the server sends it: cut into messages of `frames` frames
/// each, the last one padded with silence.
fn messages(audio: &[u8], format: AudioFormat, frames: usize) -> Vec<Vec<u8>> {
    let len = format.frame_bytes() * frames;
    audio
        .chunks(len)
        .map(|c| {
            let mut m = c.to_vec();
            m.resize(len, transport::silence_byte(format));
            m
        })
        .collect()
}

fn hear_all(ear: &mut Ear, msgs: &[Vec<u8>]) -> Vec<Piece> {
    msgs.iter().flat_map(|m| ear.hear(m)).collect()
}

/// The runs the pieces began, in order.
fn runs(pieces: &[Piece]) -> Vec<Sound> {
    pieces
        .iter()
        .filter(|p| p.starts_run)
        .map(|p| p.sound)
        .collect()
}

fn reply(format: AudioFormat, ms: u32) -> Vec<u8> {
    let samples = SpeechSynth::new(format.sample_rate, 42).utterance(ms);
    transport::encode(format, &samples)
}

#[test]
fn prompt_bits_follow_the_declaration_order() {
    for (i, p) in Prompt::ALL.into_iter().enumerate() {
        assert_eq!(index_of(p), i, "{p:?}");
        assert_eq!(Prompts::of(p).first(), Some(p));
    }
}

#[test]
fn every_prompt_is_recognised_as_itself_in_every_format_and_chunking() {
    for format in FORMATS {
        for p in Prompt::ALL {
            // 20 ms frames (in a call) and 500 ms chunks (queued or refused).
            for frames in [1, 25] {
                let mut ear = Ear::new(format);
                let pieces = hear_all(&mut ear, &messages(&prompt(p, format), format, frames));
                assert_eq!(
                    runs(&pieces),
                    [Sound::Prompt(p)],
                    "{p:?} {format:?} ×{frames}"
                );
                assert!(
                    pieces.iter().all(|x| x.sound == Sound::Prompt(p)),
                    "{p:?} {format:?} ×{frames}: {pieces:?}"
                );
                assert!(ear.heard_since_clear(p));
            }
        }
    }
}

#[test]
fn the_index_holds_every_frame_but_silence() {
    let index = PromptIndex::for_format(AudioFormat::MULAW_8K);
    for p in Prompt::ALL {
        let bytes = prompt(p, AudioFormat::MULAW_8K);
        for frame in bytes.chunks_exact(160) {
            assert_eq!(index.prompt_of(frame), Some(p), "{p:?}");
        }
    }
    assert_eq!(index.prompt_of(&[g711::ULAW_SILENCE; 160]), None);
    assert!(PromptIndex::for_format(AudioFormat::PCM16_16K).len() >= index.len());
    // The load tool never speaks 8 kHz linear; the server has no such leg.
    let pcm8 = AudioFormat {
        encoding: AudioEncoding::Pcm16Le,
        sample_rate: 8_000,
    };
    assert!(PromptIndex::for_format(pcm8).is_empty());
}

#[test]
fn speech_like_reply_audio_is_never_a_prompt() {
    for format in FORMATS {
        let mut ear = Ear::new(format);
        let pieces = hear_all(&mut ear, &messages(&reply(format, 3_000), format, 1));
        assert_eq!(runs(&pieces), [Sound::Own], "{format:?}");
        assert!(pieces.iter().all(|x| x.sound == Sound::Own), "{format:?}");
        assert!(Prompt::ALL.iter().all(|p| !ear.heard_since_clear(*p)));
    }
}

#[test]
fn a_prompt_cut_short_after_a_few_frames_is_still_that_prompt() {
    for format in FORMATS {
        let frames = prompt(Prompt::Apology, format);
        let cut = &frames[..format.frame_bytes() * 3];
        let mut ear = Ear::new(format);
        let pieces = hear_all(&mut ear, &messages(cut, format, 1));
        assert_eq!(
            runs(&pieces),
            [Sound::Prompt(Prompt::Apology)],
            "{format:?}"
        );
        // Cut in the middle, too (a `clear` dropped its start).
        let mut ear = Ear::new(format);
        let middle = &frames[format.frame_bytes() * 80..format.frame_bytes() * 84];
        let pieces = hear_all(&mut ear, &messages(middle, format, 1));
        assert_eq!(
            runs(&pieces),
            [Sound::Prompt(Prompt::Apology)],
            "{format:?}"
        );
    }
}

#[test]
fn an_apology_then_the_reply_are_two_runs_with_their_lengths() {
    for format in FORMATS {
        let apology = prompt(Prompt::Apology, format);
        let answer = reply(format, 1_000);
        let mut msgs = messages(&apology, format, 1);
        msgs.extend(messages(&answer, format, 1));
        let mut ear = Ear::new(format);
        let pieces = hear_all(&mut ear, &msgs);
        assert_eq!(
            runs(&pieces),
            [Sound::Prompt(Prompt::Apology), Sound::Own],
            "{format:?}"
        );
        let own: usize = pieces
            .iter()
            .filter(|p| p.sound == Sound::Own)
            .map(|p| p.bytes)
            .sum();
        assert_eq!(own, answer.len(), "{format:?}");
    }
}

#[test]
fn hold_then_looped_music_is_heard_as_the_server_plays_it() {
    for format in FORMATS {
        let mut stream = prompt(Prompt::Hold, format);
        for _ in 0..3 {
            stream.extend(prompt(Prompt::HoldMusic, format));
        }
        let mut ear = Ear::new(format);
        let pieces = hear_all(&mut ear, &messages(&stream, format, 25));
        assert_eq!(
            runs(&pieces),
            [
                Sound::Prompt(Prompt::Hold),
                Sound::Prompt(Prompt::HoldMusic)
            ],
            "{format:?}"
        );
    }
}

#[test]
fn the_same_prompt_twice_is_two_runs_and_silence_starts_nothing() {
    let format = AudioFormat::MULAW_8K;
    let apology = prompt(Prompt::Apology, format);
    let mut ear = Ear::new(format);
    let mut msgs = messages(&apology, format, 1);
    msgs.push(vec![g711::ULAW_SILENCE; 800]);
    msgs.extend(messages(&apology, format, 1));
    let pieces = hear_all(&mut ear, &msgs);
    assert_eq!(runs(&pieces), [Sound::Prompt(Prompt::Apology); 2]);
    // Silence on its own, with nothing before it, is the bot's own audio.
    let mut ear = Ear::new(format);
    assert_eq!(runs(&ear.hear(&[g711::ULAW_SILENCE; 320])), [Sound::Own]);
}

#[test]
fn a_new_turn_restarts_runs_and_clear_forgets_what_was_heard() {
    let format = AudioFormat::PCM16_16K;
    let apology = prompt(Prompt::Apology, format);
    let frame = format.frame_bytes();
    let mut ear = Ear::new(format);
    assert_eq!(
        runs(&ear.hear(&apology[..frame * 2])),
        [Sound::Prompt(Prompt::Apology)]
    );
    // The rest of the same apology continues its run...
    assert!(runs(&ear.hear(&apology[frame * 2..frame * 4])).is_empty());
    // ...unless a new turn began in between.
    ear.new_turn();
    assert_eq!(
        runs(&ear.hear(&apology[frame * 4..frame * 6])),
        [Sound::Prompt(Prompt::Apology)]
    );
    assert!(ear.heard_since_clear(Prompt::Apology));
    ear.clear();
    assert!(!ear.heard_since_clear(Prompt::Apology));
}
