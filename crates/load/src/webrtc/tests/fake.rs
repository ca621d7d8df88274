//! A stand-in for callgate's WebRTC ingress, just enough for the caller:
//! the signalling of `docs/webrtc.md` (POST → 201 answer + `Location`, GET
//! status, DELETE) over axum, and per session a str0m ICE-lite answerer
//! that plays a scripted bot in Opus: optional hold prompt, a greeting,
//! and for each utterance it hears (speech, then 300 ms of quiet) an
//! optional apology and a reply, 200 ms apart; digital silence in
//! between, a frame every 20 ms.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use str0m::change::SdpOffer;
use str0m::format::Codec as RtpCodec;
use str0m::media::{Frequency, MediaKind, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc, RtcConfig};
use tokio::net::UdpSocket;

use crate::prompts::lossy::{prompt_samples, server_encoder};
use crate::record::Prompt;

pub const KEY: &str = "pk_test";
const FRAME: Duration = Duration::from_millis(20);

/// What the bot does.
#[derive(Debug, Clone, Copy, Default)]
pub struct Script {
    /// Play the hold prompt before the greeting (a queued call).
    pub hold: bool,
    /// Apologise before each reply (a stalled provider).
    pub apology: bool,
    /// End the call this long after the greeting, with this reason.
    pub end_after_greeting: Option<(&'static str, Duration)>,
    /// Refuse every offer: `503` and this reason.
    pub refuse: Option<&'static str>,
}

/// What the test can look at afterwards.
#[derive(Debug, Default)]
pub struct Seen {
    pub offers: u32,
    pub offer_sdp: String,
    pub deleted: bool,
    pub polls: u32,
    pub utterances_heard: u32,
    /// Loud frames received from the caller.
    pub speech_frames: u32,
    pub state: &'static str,
    pub end_reason: Option<String>,
}

type Shared = (Script, Arc<Mutex<Seen>>);

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serves the fake ingress on 127.0.0.1; returns the offer URL.
pub async fn serve(script: Script) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen {
        state: "admitted",
        ..Seen::default()
    }));
    let app = Router::new()
        .route("/v1/webrtc", post(offer))
        .route("/v1/webrtc/sessions/s1", get(status).delete(delete))
        .with_state((script, Arc::clone(&seen)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1/webrtc"), seen)
}

async fn offer(State((script, seen)): State<Shared>, headers: HeaderMap, body: String) -> Response {
    lock(&seen).offers += 1;
    lock(&seen).offer_sdp = body.clone();
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth != Some(&format!("Bearer {KEY}")) {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error":"unauthorized","detail":"unknown key"}"#,
        )
            .into_response();
    }
    let sdp = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    assert_eq!(sdp, Some("application/sdp"));
    if let Some(reason) = script.refuse {
        let body = format!(r#"{{"error":"refused","reason":"{reason}","retry_after_s":30}}"#);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "30")],
            body,
        )
            .into_response();
    }
    let (bot, answer) = Bot::answer(&body, script, Arc::clone(&seen)).await;
    tokio::spawn(bot.run());
    (
        StatusCode::CREATED,
        [
            (header::CONTENT_TYPE, "application/sdp"),
            (header::LOCATION, "/v1/webrtc/sessions/s1"),
        ],
        answer,
    )
        .into_response()
}

async fn status(State((_, seen)): State<Shared>) -> Response {
    let mut s = lock(&seen);
    s.polls += 1;
    let body = serde_json::json!({"state": s.state, "end_reason": s.end_reason, "call_id": "c-1"});
    axum::Json(body).into_response()
}

async fn delete(State((_, seen)): State<Shared>) -> StatusCode {
    let mut s = lock(&seen);
    s.deleted = true;
    s.state = "ended";
    s.end_reason = Some("caller_hangup".into());
    StatusCode::OK
}

/// One session's ICE-lite answerer and scripted bot.
pub struct Bot {
    rtc: Rtc,
    socket: UdpSocket,
    local: SocketAddr,
    script: Script,
    seen: Arc<Mutex<Seen>>,
    audio: Option<(Mid, Pt)>,
    enc: opus::Encoder,
    dec: opus::Decoder,
    queue: VecDeque<i16>,
    next_tick: Option<Instant>,
    media_time: u64,
    /// Caller speech: heard, and quiet frames since.
    speaking: bool,
    quiet: u32,
    greeted_at: Option<Instant>,
}

impl Bot {
    pub async fn answer(offer: &str, script: Script, seen: Arc<Mutex<Seen>>) -> (Bot, String) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let local = socket.local_addr().unwrap();
        let mut rtc = RtcConfig::new()
            .set_ice_lite(true)
            .clear_codecs()
            .enable_opus(true, false)
            .build(Instant::now());
        rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
        let offer = SdpOffer::from_sdp_string(offer).unwrap();
        let answer = rtc.sdp_api().accept_offer(offer).unwrap().to_sdp_string();
        let bot = Bot {
            rtc,
            socket,
            local,
            script,
            seen,
            audio: None,
            enc: server_encoder().unwrap(),
            dec: opus::Decoder::new(16_000, opus::Channels::Mono).unwrap(),
            queue: VecDeque::new(),
            next_tick: None,
            media_time: 0,
            speaking: false,
            quiet: 0,
            greeted_at: None,
        };
        (bot, answer)
    }

    /// Runs until the session ends (or 20 s, whatever happens).
    pub async fn run(mut self) {
        let stop = Instant::now() + Duration::from_secs(20);
        let mut buf = vec![0u8; 2_048];
        while Instant::now() < stop && !self.ended() {
            let timeout = self.drain();
            let wake = self.next_tick.map_or(timeout, |t| t.min(timeout));
            tokio::select! {
                r = self.socket.recv_from(&mut buf) => {
                    let Ok((n, from)) = r else { continue };
                    let Ok(contents) = buf[..n].try_into() else { continue };
                    let input = Input::Receive(Instant::now(), Receive {
                        proto: Protocol::Udp, source: from, destination: self.local, contents,
                    });
                    let _ = self.rtc.handle_input(input);
                }
                () = tokio::time::sleep_until(wake.into()) => {
                    let now = Instant::now();
                    if self.next_tick.is_some_and(|t| t <= now) {
                        self.tick(now);
                        let _ = self.drain();
                    }
                    let _ = self.rtc.handle_input(Input::Timeout(now));
                }
            }
        }
    }

    fn ended(&self) -> bool {
        lock(&self.seen).state != "admitted"
    }

    fn drain(&mut self) -> Instant {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return t,
                Ok(Output::Transmit(t)) => {
                    let _ = self.socket.try_send_to(&t.contents, t.destination);
                }
                Ok(Output::Event(e)) => self.event(e),
                Err(_) => return Instant::now() + FRAME,
            }
        }
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Connected => {
                self.next_tick = Some(Instant::now());
                if self.script.hold {
                    self.queue.extend(prompt_samples(Prompt::Hold));
                }
                self.queue.extend(speech(11, 600));
                self.greeted_at = Some(Instant::now());
            }
            Event::MediaAdded(a) if a.kind == MediaKind::Audio => {
                let pt = self.rtc.writer(a.mid).and_then(|w| {
                    w.payload_params()
                        .find(|p| p.spec().codec == RtpCodec::Opus)
                        .map(|p| p.pt())
                });
                self.audio = pt.map(|pt| (a.mid, pt));
            }
            Event::MediaData(d) => self.heard(&d.data),
            _ => {}
        }
    }

    /// The caller's audio: an utterance is speech and then 300 ms of quiet.
    fn heard(&mut self, packet: &[u8]) {
        let mut pcm = [0i16; 320];
        let Ok(n) = self.dec.decode(packet, &mut pcm, false) else {
            return;
        };
        let loud = media::vad::level_dbfs(&pcm[..n]) > -35.0;
        if loud {
            lock(&self.seen).speech_frames += 1;
            (self.speaking, self.quiet) = (true, 0);
            return;
        }
        self.quiet += 1;
        if self.speaking && self.quiet >= 15 {
            self.speaking = false;
            lock(&self.seen).utterances_heard += 1;
            self.queue.extend(std::iter::repeat_n(0, 16 * 200));
            if self.script.apology {
                self.queue.extend(prompt_samples(Prompt::Apology));
                self.queue.extend(std::iter::repeat_n(0, 16 * 200));
            }
            self.queue.extend(speech(12, 600));
        }
    }

    /// One 20 ms frame out: queued audio or silence.
    fn tick(&mut self, now: Instant) {
        self.next_tick = self.next_tick.map(|t| t + FRAME);
        if let Some((reason, after)) = self.script.end_after_greeting
            && self.greeted_at.is_some_and(|g| now >= g + after)
        {
            let mut s = lock(&self.seen);
            s.state = "ended";
            s.end_reason = Some(reason.into());
            return;
        }
        let frame: Vec<i16> = (0..320)
            .map(|_| self.queue.pop_front().unwrap_or(0))
            .collect();
        let mut packet = vec![0u8; 1_275];
        let n = self.enc.encode(&frame, &mut packet).unwrap();
        packet.truncate(n);
        let Some((mid, pt)) = self.audio else { return };
        let time = MediaTime::new(self.media_time, Frequency::FORTY_EIGHT_KHZ);
        self.media_time += 960;
        if let Some(w) = self.rtc.writer(mid) {
            let _ = w.write(pt, now, time, packet);
        }
    }
}

fn speech(seed: u64, ms: u32) -> Vec<i16> {
    media::synth::SpeechSynth::new(16_000, seed).utterance(ms)
}
