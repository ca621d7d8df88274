//! The headless-Chromium driver itself (`callgate_tests::chromium`), before
//! any WebRTC test leans on it: the fake microphone really plays the
//! espeak WAV (measured in the page with WebAudio), `eval` reports
//! exceptions, tabs close and open again, a `data:` page is no secure
//! context (why the driver serves pages on `http://127.0.0.1`), and
//! `caller_wav` writes the format and length it promises.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::path::Path;
use std::time::Duration;

use callgate_rig::process::Scratch;
use callgate_tests::chromium::{Browser, caller_wav, serve_html};
use serde_json::json;

/// Bound on what a page does by itself once loaded.
const T: Duration = Duration::from_secs(10);

/// Opens the microphone and measures its level every 20 ms: the peak so
/// far, and when it was first and last above `LOUD`.
const MIC_PAGE: &str = r#"<!doctype html><title>mic</title><script>
const LOUD = 0.05;
window.mic = { state: "starting", peak: 0, firstLoud: null, lastLoud: null, since: null };
(async () => {
  try {
    // No echo cancellation, noise suppression or gain control: the page
    // hears the WAV's samples as they are (its peak at -3 dBFS).
    const raw = { echoCancellation: false, noiseSuppression: false, autoGainControl: false };
    const stream = await navigator.mediaDevices.getUserMedia({ audio: raw });
    const ctx = new AudioContext();
    const analyser = ctx.createAnalyser();
    analyser.fftSize = 1024;
    ctx.createMediaStreamSource(stream).connect(analyser);
    const buf = new Float32Array(analyser.fftSize);
    mic.state = "open";
    mic.since = performance.now();
    mic.label = stream.getAudioTracks()[0].label;
    setInterval(() => {
      analyser.getFloatTimeDomainData(buf);
      let peak = 0;
      for (const x of buf) peak = Math.max(peak, Math.abs(x));
      mic.peak = Math.max(mic.peak, peak);
      if (peak > LOUD) {
        const now = performance.now();
        mic.firstLoud ??= now;
        mic.lastLoud = now;
      }
    }, 20);
  } catch (e) {
    mic.state = "failed: " + e;
  }
})();
</script>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_microphone_plays_the_espeak_wav() {
    let dir = Scratch::new("chromium-smoke").unwrap();
    let wav = caller_wav(&dir.path, &["hello there"], 0.5, 0.5);
    let browser = Browser::launch(Some(&wav)).await;
    let page = serve_html(MIC_PAGE.into()).await;
    let tab = browser.open(&page.url).await;

    let peak = tab
        .wait_for(
            "mic.firstLoud !== null && mic.peak",
            T,
            "the fake microphone's level rising above silence",
        )
        .await;
    eprintln!("microphone loud (peak {peak}): {:?}", tab.eval("mic").await);
    // The WAV plays once (`%noloop`): speech, then silence for good. Chromium's
    // own fake microphone (what a missing or unreadable WAV gives) beeps on.
    let mic = tab
        .wait_for(
            "performance.now() - mic.lastLoud > 1500 && mic",
            T,
            "silence after the sentence",
        )
        .await;
    let span = mic["lastLoud"].as_f64().unwrap() - mic["firstLoud"].as_f64().unwrap();
    assert!(
        (300.0..3000.0).contains(&span),
        "loud for {span} ms, not one short sentence: {mic}"
    );
    // caller_wav normalises to -3 dBFS (0.708): unprocessed, that arrives.
    let peak = mic["peak"].as_f64().unwrap();
    assert!((0.4..0.75).contains(&peak), "peak {peak}: {mic}");
    tab.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_reports_exceptions_and_tabs_close_and_reopen() {
    let browser = Browser::launch(None).await;
    let page = serve_html("<!doctype html><title>smoke</title><p>hi".into()).await;
    let tab = browser.open(&page.url).await;
    assert_eq!(tab.eval("1 + 1").await, Ok(json!(2)));
    assert_eq!(tab.eval("undefined").await, Ok(json!(null)));
    assert_eq!(
        tab.eval("new Promise(r => setTimeout(() => r({a: [1, 'x']}), 50))")
            .await,
        Ok(json!({"a": [1, "x"]}))
    );
    let thrown = tab.eval("throw new Error('boom-1234')").await.unwrap_err();
    assert!(thrown.contains("boom-1234"), "{thrown}");
    let rejected = tab
        .eval("Promise.reject(new TypeError('later-5678'))")
        .await
        .unwrap_err();
    assert!(rejected.contains("TypeError: later-5678"), "{rejected}");
    tab.eval("console.log('seen', 42)").await.unwrap();
    let console = tab.wait_for("true", T, "a trivially true expression").await;
    assert_eq!(console, json!(true));
    assert!(
        tab.console().iter().any(|l| l == "log: seen 42"),
        "{:?}",
        tab.console()
    );
    tab.close().await;

    let again = browser.open(&page.url).await;
    assert_eq!(again.eval("document.title").await, Ok(json!("smoke")));
    assert_eq!(
        again
            .eval("isSecureContext && !!navigator.mediaDevices")
            .await,
        Ok(json!(true)),
        "http://127.0.0.1 is a secure context"
    );
    again.close().await;

    // A data: URL's origin is opaque: no secure context, no mediaDevices.
    let data = browser.open("data:text/html,<title>d</title>").await;
    assert_eq!(
        data.eval("[isSecureContext, typeof navigator.mediaDevices]")
            .await,
        Ok(json!([false, "undefined"]))
    );
}

#[test]
fn caller_wav_is_48k_mono_16_bit_silence_then_speech() {
    let dir = Scratch::new("caller-wav").unwrap();
    let hello = caller_wav(&dir.path, &["hello there"], 0.0, 0.0);
    let bye = caller_wav(&dir.path, &["goodbye now"], 0.0, 0.0);
    let both = caller_wav(&dir.path, &["hello there", "goodbye now"], 0.5, 0.25);
    let both_again = caller_wav(&dir.path, &["hello there", "goodbye now"], 0.5, 0.25);
    assert_eq!(
        std::fs::read(&both).unwrap(),
        std::fs::read(&both_again).unwrap(),
        "not deterministic"
    );

    let (h, b, w) = (read_wav(&hello), read_wav(&bye), read_wav(&both));
    for s in [h.len(), b.len()] {
        let secs = s as f64 / 48_000.0;
        assert!((0.3..3.0).contains(&secs), "{secs} s of speech");
    }
    let want = 0.5 + secs(&h) + 0.25 + secs(&b) + 0.25;
    assert!(
        (secs(&w) - want).abs() < 0.002,
        "{} s long, want lead + speech + gaps = {want} s",
        secs(&w)
    );
    assert!(
        w[..24_000].iter().all(|&x| x == 0),
        "the lead is not silent"
    );
    let peak = w.iter().map(|x| x.unsigned_abs()).max().unwrap();
    // -3 dBFS of full scale.
    let target = 32_767.0 * 10f64.powf(-3.0 / 20.0);
    assert!(
        (f64::from(peak) / target - 1.0).abs() < 0.01,
        "peak {peak}, want ≈ {target:.0}"
    );
}

fn secs(samples: &[i16]) -> f64 {
    samples.len() as f64 / 48_000.0
}

/// The samples of a WAV, after asserting it is 48 kHz mono 16-bit PCM.
fn read_wav(path: &Path) -> Vec<i16> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..4], b"RIFF");
    assert_eq!(&bytes[8..12], b"WAVE");
    let (mut at, mut format, mut data) = (12, None, None);
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let body = &bytes[at + 8..(at + 8 + len).min(bytes.len())];
        match id {
            b"fmt " => format = Some(body.to_vec()),
            b"data" => data = Some(body.to_vec()),
            _ => {}
        }
        at += 8 + len + len % 2;
    }
    let f = format.expect("a fmt chunk");
    let u16_at = |i: usize| u16::from_le_bytes([f[i], f[i + 1]]);
    let rate = u32::from_le_bytes(f[4..8].try_into().unwrap());
    assert_eq!(
        (u16_at(0), u16_at(2), rate, u16_at(14)),
        (1, 1, 48_000, 16),
        "(PCM, channels, rate, bits) of {}",
        path.display()
    );
    data.expect("a data chunk")
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}
