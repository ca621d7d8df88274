//! A real headless Chromium (Debian's `/usr/bin/chromium`) for the
//! end-to-end tests, driven over the Chrome DevTools Protocol (CDP) straight
//! from Rust: no WebDriver binary, no Selenium, no Python.
//!
//! What it is: [`Browser::launch`] starts Chromium in a scratch profile
//! with a fake camera and microphone (the microphone plays a WAV, see
//! [`caller_wav`]), media permissions granted without a prompt and
//! autoplay allowed; [`Browser::open`] opens a tab on a URL and waits for
//! its `load` event; [`Tab::eval`] runs JavaScript in it (promises are
//! awaited, values come back as JSON), [`Tab::wait_for`] polls an
//! expression until it is truthy, and [`Tab::close`] closes the tab as a
//! user would. [`serve_html`] serves a page on `http://127.0.0.1:<port>/`,
//! a potentially trustworthy origin where `getUserMedia` and WebRTC work
//! (a `data:` URL's opaque origin is not a secure context: no
//! `navigator.mediaDevices` there).
//!
//! What it never does: wait without a bound (every CDP command, page load
//! and poll has a limit and panics naming what it waited for, with the
//! page's console and Chromium's log), reach beyond loopback, write
//! outside its scratch directory (`HOME` points there too: Crashpad keeps
//! its database under it), or leave Chromium running: it leads its own
//! process group, stopped whole when the [`Browser`] drops, and a watchdog
//! shell in that group kills it within a fraction of a second if the test
//! process dies without unwinding (a nextest timeout, SIGKILL).
//!
//! Known behaviour of headless Chromium: received WebRTC audio is decoded
//! only while an `<audio>` element plays its stream (attach the remote
//! stream to one and call `play()`).
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use callgate_rig::peers::chromium::{Browser, caller_wav, serve_html};
//!
//! let dir = std::env::temp_dir();
//! let wav = caller_wav(&dir, &["I would like to book a table"], 0.5, 1.0);
//! let browser = Browser::launch(Some(&wav)).await;
//! let page = serve_html("<script>window.ready = true</script>".into()).await;
//! let tab = browser.open(&page.url).await;
//! tab.wait_for("window.ready", Duration::from_secs(5), "the page's script").await;
//! assert_eq!(tab.eval("1 + 1").await, Ok(serde_json::json!(2)));
//! tab.close().await;
//! # }
//! ```

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, oneshot};
use tokio::time::{Instant, sleep, timeout};
use tokio_tungstenite::tungstenite::Message;

use crate::process::{Group, Scratch, run_bounded};

/// The browser (Debian's launcher script, which execs the real binary).
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long Chromium gets to write its `DevToolsActivePort`.
const START_LIMIT: Duration = Duration::from_secs(20);
/// Bound on one CDP command (connecting included).
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// Bound on a page's load after navigation.
const LOAD_LIMIT: Duration = Duration::from_secs(15);
/// Bound on one [`Tab::eval`], its promise included.
const EVAL_LIMIT: Duration = Duration::from_secs(20);
/// How often [`Tab::wait_for`] evaluates again.
const POLL: Duration = Duration::from_millis(100);
/// Events a connection buffers for a waiter that has not read them yet.
const EVENT_BUFFER: usize = 4096;
/// Console lines a tab keeps for diagnostics.
const CONSOLE_LINES: usize = 50;
/// Lines of Chromium's log shown in a panic.
const LOG_TAIL_LINES: usize = 30;
/// Bound on one espeak-ng or sox run.
const TOOL_LIMIT: Duration = Duration::from_secs(30);

/// Runs Chromium (`"$@"`) in the background and kills the whole process
/// group (itself included) once Chromium exits or the test process — its
/// parent — is gone: the test may die without running any destructor.
/// The script [`Tab::cue_mic`] evaluates (`__WAV_B64__` replaced by the
/// WAV's bytes): a running audio context, the decoded WAV, and a
/// `getUserMedia` that answers the context's stream destination.
const CUED_MIC: &str = r#"(async () => {
  const bytes = Uint8Array.from(atob('__WAV_B64__'), (c) => c.charCodeAt(0));
  const ctx = new AudioContext({ sampleRate: 48000 });
  await ctx.resume();
  const buf = await ctx.decodeAudioData(bytes.buffer);
  const dest = ctx.createMediaStreamDestination();
  let played = 0;
  window.__cuedMic = { speak() {
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(dest);
    src.start();
    played += 1;
    return played;
  } };
  navigator.mediaDevices.getUserMedia = async () => dest.stream;
  return ctx.state;
})()"#;

const WATCHDOG: &str = r#""$@" &
child=$!
while kill -0 "$PPID" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 0.2; done
kill -KILL 0"#;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;
type Console = Arc<Mutex<VecDeque<String>>>;
/// A CDP event: its method and params.
type Event = (String, Value);

/// A headless Chromium with a scratch profile. Dropping it stops the
/// browser (TERM, then KILL) and removes the profile (kept, and its path
/// printed, when the test is panicking).
pub struct Browser {
    cdp: Arc<Cdp>,
    port: u16,
    // Dropped in this order: the connection, the processes, their files.
    group: Group,
    scratch: Scratch,
}

impl Browser {
    /// Launches Chromium headless with a fake camera and microphone, the
    /// microphone playing `mic_wav` once (then silence; without a WAV it
    /// plays Chromium's beep), media permissions granted, autoplay allowed
    /// and DevTools on a loopback port the OS chooses. Panics, with
    /// Chromium's log, when the browser does not come up within 20 s.
    pub async fn launch(mic_wav: Option<&Path>) -> Browser {
        let scratch = Scratch::new("chromium").expect("create a scratch directory for Chromium");
        let profile = scratch.path.join("profile");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("chromium-watchdog")
            .arg(CHROMIUM)
            .args(flags(&profile, mic_wav))
            // Crashpad keeps its database under $HOME whatever the profile.
            .env("HOME", &scratch.path)
            .env("XDG_CONFIG_HOME", scratch.path.join("config"))
            .env("XDG_CACHE_HOME", scratch.path.join("cache"));
        let log = scratch.path.join("chromium.log");
        let mut group = Group::spawn("chromium", &mut cmd, &log)
            .unwrap_or_else(|e| panic!("starting {CHROMIUM}: {e}"));
        let (port, path) = devtools_port(&mut group, &profile).await;
        let url = format!("ws://127.0.0.1:{port}{path}");
        let cdp = Cdp::connect(&url, "the browser".into())
            .await
            .unwrap_or_else(|e| panic!("{e}; Chromium's log ends:\n{}", log_tail(&group)));
        Browser {
            cdp: Arc::new(cdp),
            port,
            group,
            scratch,
        }
    }

    /// Opens a new tab, navigates it to `url` and waits (15 s at most) for
    /// the page's `load` event. Panics when the navigation fails (with
    /// Chromium's error text, e.g. `net::ERR_CONNECTION_REFUSED`).
    pub async fn open(&self, url: &str) -> Tab {
        let created = self
            .cdp
            .call(
                "Target.createTarget",
                json!({"url": "about:blank"}),
                CALL_LIMIT,
            )
            .await
            .unwrap_or_else(|e| panic!("opening a tab for {url}: {e}{}", self.log_note()));
        let target_id = created["targetId"]
            .as_str()
            .unwrap_or_else(|| panic!("Target.createTarget answered {created}"))
            .to_owned();
        let ws = format!("ws://127.0.0.1:{}/devtools/page/{target_id}", self.port);
        let cdp = Cdp::connect(&ws, format!("the tab for {url}"))
            .await
            .unwrap_or_else(|e| panic!("{e}{}", self.log_note()));
        let tab = Tab {
            cdp,
            browser: Arc::clone(&self.cdp),
            target_id,
            url: url.to_owned(),
        };
        tab.navigate().await;
        tab
    }

    /// The last lines of Chromium's own output (D-Bus noise left out).
    pub fn log_tail(&self) -> String {
        log_tail(&self.group)
    }

    /// The scratch directory (profile and `chromium.log`).
    pub fn dir(&self) -> &Path {
        &self.scratch.path
    }

    fn log_note(&self) -> String {
        format!("; Chromium's log ends:\n{}", self.log_tail())
    }
}

/// Chromium's command line.
fn flags(profile: &Path, mic_wav: Option<&Path>) -> Vec<String> {
    let mut flags: Vec<String> = [
        "--headless=new",
        "--no-sandbox",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        "--autoplay-policy=no-user-gesture-required",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-breakpad",
        "--disable-crash-reporter",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        // Every tab is a caller: none may be throttled as a background tab.
        "--disable-background-timer-throttling",
        "--disable-backgrounding-occluded-windows",
        "--disable-renderer-backgrounding",
    ]
    .map(String::from)
    .into();
    flags.push(format!("--user-data-dir={}", profile.display()));
    if let Some(wav) = mic_wav {
        let wav = std::path::absolute(wav).expect("an absolute path for the microphone's WAV");
        flags.push(format!(
            "--use-file-for-fake-audio-capture={}%noloop",
            wav.display()
        ));
    }
    flags.push("about:blank".into());
    flags
}

/// Waits for `<profile>/DevToolsActivePort` (its port, then the browser
/// target's path) while checking that Chromium still runs.
async fn devtools_port(group: &mut Group, profile: &Path) -> (u16, String) {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + START_LIMIT;
    loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let mut lines = text.lines();
        if let (Some(Ok(port)), Some(path)) = (lines.next().map(str::parse), lines.next()) {
            return (port, path.to_owned());
        }
        if let Err(e) = group.ensure_running() {
            panic!("Chromium did not start: {e}");
        }
        assert!(
            Instant::now() < deadline,
            "Chromium wrote no {} within {START_LIMIT:?}; its log ends:\n{}",
            file.display(),
            log_tail(group)
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// The last lines of Chromium's output, without its D-Bus complaints (a
/// container has no system bus; they are harmless and drown the rest).
fn log_tail(group: &Group) -> String {
    let text = std::fs::read_to_string(group.log_path()).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains(":ERROR:dbus/"))
        .collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// One tab, with its own DevTools connection. Dropping it leaves the tab
/// open (the browser closes it when it stops); [`Tab::close`] closes it.
pub struct Tab {
    cdp: Cdp,
    browser: Arc<Cdp>,
    target_id: String,
    url: String,
}

impl Tab {
    /// Evaluates `js` in the page (as a script: statements are fine),
    /// awaiting the promise it returns, and returns the result as JSON
    /// (`undefined`, `NaN` and other values JSON cannot carry come back as
    /// `null`). A thrown exception or rejected promise is `Err` with the
    /// exception's description (`"Error: boom\n    at …"`); so is a CDP
    /// failure, or a promise still pending after 20 s.
    pub async fn eval(&self, js: &str) -> Result<Value, String> {
        let params = json!({"expression": js, "awaitPromise": true, "returnByValue": true});
        let mut reply = self
            .cdp
            .call("Runtime.evaluate", params, EVAL_LIMIT)
            .await?;
        if let Some(details) = reply.get("exceptionDetails") {
            return Err(exception_text(details));
        }
        Ok(reply
            .pointer_mut("/result/value")
            .map(Value::take)
            .unwrap_or_default())
    }

    /// Evaluates the expression `js` every 100 ms until its value is truthy
    /// (as JavaScript judges it; an exception counts as not yet) and returns
    /// that value. Panics after `within`, naming `what`, with the last value
    /// or exception and the page's recent console output.
    pub async fn wait_for(&self, js: &str, within: Duration, what: &str) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let last = match timeout(left, self.eval(js)).await {
                Ok(Ok(value)) if truthy(&value) => return value,
                Ok(outcome) => outcome,
                Err(_) => Err(format!("`{js}` still evaluating at the deadline")),
            };
            assert!(
                Instant::now() + POLL < deadline,
                "timed out after {within:?} waiting for {what} (`{js}` in {}); last: {last:?}; \
                 console:\n{}",
                self.url,
                self.console().join("\n")
            );
            sleep(POLL).await;
        }
    }

    /// The page's recent console messages and uncaught exceptions (the
    /// last 50), oldest first, as `"<level>: <text>"`.
    pub fn console(&self) -> Vec<String> {
        lock(&self.cdp.console).iter().cloned().collect()
    }

    /// Replaces the page's microphone with one the test cues: after this,
    /// `getUserMedia` answers a WebAudio stream that carries silence until
    /// [`Tab::speak`] plays `wav` into it, once per call. For speech that
    /// must land at a moment the test observes (over the bot's greeting),
    /// which a file-fed fake device, started when the page opens it,
    /// cannot promise on a busy machine. Panics when the page cannot
    /// decode the WAV or its audio context does not run.
    pub async fn cue_mic(&self, wav: &Path) {
        use base64::Engine as _;
        let bytes = std::fs::read(wav).unwrap_or_else(|e| panic!("reading {}: {e}", wav.display()));
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        let js = CUED_MIC.replace("__WAV_B64__", &b64);
        let state = self.eval(&js).await;
        assert_eq!(
            state,
            Ok(json!("running")),
            "installing the cued microphone in {}; console:\n{}",
            self.url,
            self.console().join("\n")
        );
    }

    /// Plays the WAV given to [`Tab::cue_mic`] into the page's microphone,
    /// from now. Panics when no cued microphone is installed.
    pub async fn speak(&self) {
        let played = self.eval("window.__cuedMic.speak()").await;
        assert!(
            matches!(played, Ok(Value::Number(_))),
            "cueing speech in {}: {played:?}",
            self.url
        );
    }

    /// Saves a PNG of the whole page (beyond the viewport too) to `path`
    /// (`Page.captureScreenshot`), creating its directory. Panics when
    /// Chromium cannot capture it or the file cannot be written.
    pub async fn screenshot(&self, path: &Path) {
        use base64::Engine as _;
        let params = json!({"format": "png", "captureBeyondViewport": true});
        let reply = self
            .cdp
            .call("Page.captureScreenshot", params, CALL_LIMIT)
            .await
            .unwrap_or_else(|e| panic!("capturing {}: {e}", self.url));
        let data = reply["data"].as_str().unwrap_or_default();
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_else(|e| panic!("the screenshot of {} is not base64: {e}", self.url));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG from {}", self.url);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Closes the tab as a user closing it would (`Target.closeTarget`
    /// through the browser): nothing waits for the page's unload work.
    pub async fn close(self) {
        let params = json!({"targetId": self.target_id});
        if let Err(e) = self
            .browser
            .call("Target.closeTarget", params, CALL_LIMIT)
            .await
        {
            panic!("closing the tab for {}: {e}", self.url);
        }
    }

    /// Navigates to the tab's URL and waits for that document's `load`.
    async fn navigate(&self) {
        for (method, params) in [
            ("Page.enable", json!({})),
            ("Runtime.enable", json!({})),
            ("Page.setLifecycleEventsEnabled", json!({"enabled": true})),
        ] {
            self.must(method, params).await;
        }
        let mut events = self.cdp.events.subscribe();
        let nav = self.must("Page.navigate", json!({"url": self.url})).await;
        if let Some(error) = nav["errorText"].as_str() {
            panic!("navigating to {}: {error}", self.url);
        }
        // A navigation within the document has no loader and no load.
        let Some(loader) = nav["loaderId"].as_str() else {
            return;
        };
        let loaded = async {
            loop {
                match events.recv().await {
                    Ok((method, p)) if method == "Page.lifecycleEvent" => {
                        if p["name"] == "load" && p["loaderId"] == loader {
                            return true;
                        }
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return false,
                }
            }
        };
        let outcome = timeout(LOAD_LIMIT, loaded).await;
        assert!(
            outcome == Ok(true),
            "{} did not load within {LOAD_LIMIT:?} ({}); console:\n{}",
            self.url,
            if outcome.is_ok() {
                "the DevTools connection closed"
            } else {
                "no load event"
            },
            self.console().join("\n")
        );
    }

    async fn must(&self, method: &str, params: Value) -> Value {
        self.cdp
            .call(method, params, CALL_LIMIT)
            .await
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.url))
    }
}

/// JavaScript's truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// What an exception says: its description (message and stack), else the
/// thrown value, else CDP's summary ("Uncaught").
fn exception_text(details: &Value) -> String {
    let exception = &details["exception"];
    if let Some(description) = exception["description"].as_str() {
        return description.to_owned();
    }
    match &exception["value"] {
        Value::String(s) => s.clone(),
        Value::Null => details["text"].as_str().unwrap_or("exception").to_owned(),
        other => other.to_string(),
    }
}

/// One DevTools websocket: commands are matched to their answers by id by
/// a reader task, which broadcasts events (for whoever subscribed) and
/// records console output.
struct Cdp {
    what: String,
    out: tokio::sync::Mutex<SplitSink<Ws, Message>>,
    pending: Pending,
    events: broadcast::Sender<Event>,
    console: Console,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Cdp {
    async fn connect(url: &str, what: String) -> Result<Cdp, String> {
        let (ws, _) = timeout(CALL_LIMIT, tokio_tungstenite::connect_async(url))
            .await
            .map_err(|_| format!("no DevTools connection to {what} within {CALL_LIMIT:?}"))?
            .map_err(|e| format!("connecting to {what}'s DevTools at {url}: {e}"))?;
        let (out, input) = ws.split();
        let pending = Pending::default();
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let console = Console::default();
        let reader = tokio::spawn(read_loop(
            input,
            Arc::clone(&pending),
            events.clone(),
            Arc::clone(&console),
        ));
        Ok(Cdp {
            what,
            out: tokio::sync::Mutex::new(out),
            pending,
            events,
            console,
            next_id: AtomicU64::new(1),
            reader,
        })
    }

    /// Sends one command and waits (up to `limit`) for its answer: the
    /// `result`, or the CDP error as `Err`.
    async fn call(&self, method: &str, params: Value, limit: Duration) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let text = json!({"id": id, "method": method, "params": params}).to_string();
        let sent = self.out.lock().await.send(Message::Text(text.into())).await;
        if let Err(e) = sent {
            lock(&self.pending).remove(&id);
            return Err(format!("sending {method} to {}: {e}", self.what));
        }
        let mut reply = match timeout(limit, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => {
                return Err(format!(
                    "{}'s DevTools connection closed before {method} was answered",
                    self.what
                ));
            }
            Err(_) => {
                lock(&self.pending).remove(&id);
                return Err(format!(
                    "{} did not answer {method} within {limit:?}",
                    self.what
                ));
            }
        };
        match reply.get("error") {
            Some(error) => Err(format!("{method} failed in {}: {error}", self.what)),
            None => Ok(reply.get_mut("result").map(Value::take).unwrap_or_default()),
        }
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Routes answers to their callers and events to the subscribers until the
/// socket closes; then fails whatever is still pending.
async fn read_loop(
    mut input: SplitStream<Ws>,
    pending: Pending,
    events: broadcast::Sender<Event>,
    console: Console,
) {
    while let Some(Ok(msg)) = input.next().await {
        let Message::Text(text) = msg else { continue };
        let Ok(mut v) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        if let Some(id) = v.get("id").and_then(Value::as_u64) {
            if let Some(tx) = lock(&pending).remove(&id) {
                let _ = tx.send(v);
            }
        } else if let Some(method) = v.get("method").and_then(Value::as_str).map(str::to_owned) {
            let params = v.get_mut("params").map(Value::take).unwrap_or_default();
            if let Some(line) = console_line(&method, &params) {
                let mut log = lock(&console);
                if log.len() == CONSOLE_LINES {
                    log.pop_front();
                }
                log.push_back(line);
            }
            // No subscriber is fine: nobody waits for this event.
            let _ = events.send((method, params));
        }
    }
    lock(&pending).clear();
}

/// A console message or uncaught exception, as one line.
fn console_line(method: &str, params: &Value) -> Option<String> {
    match method {
        "Runtime.consoleAPICalled" => {
            let args: Vec<String> = params["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| match (&a["value"], a["description"].as_str()) {
                    (Value::String(s), _) => s.clone(),
                    (_, Some(d)) => d.to_owned(),
                    (v, None) => v.to_string(),
                })
                .collect();
            let level = params["type"].as_str().unwrap_or("log");
            Some(format!("{level}: {}", args.join(" ")))
        }
        "Runtime.exceptionThrown" => Some(format!(
            "uncaught: {}",
            exception_text(&params["exceptionDetails"])
        )),
        _ => None,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A page served on loopback by [`serve_html`]; stops serving on drop.
pub struct Served {
    /// `http://127.0.0.1:<port>/` (any path serves the same page).
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `html` as `text/html` to every GET on a loopback port the OS
/// chooses: an `http://127.0.0.1` origin is potentially trustworthy, so
/// the page is a secure context (`getUserMedia`, WebRTC) without TLS.
pub async fn serve_html(html: String) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port for the test page");
    let addr = listener.local_addr().expect("the test page's address");
    let body: Arc<str> = html.into();
    let task = tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(answer(conn, Arc::clone(&body)));
        }
    });
    Served {
        url: format!("http://{addr}/"),
        task,
    }
}

/// Reads one request's head (bounded) and answers it with the page.
async fn answer(mut conn: tokio::net::TcpStream, body: Arc<str>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let read_head = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    };
    if timeout(CALL_LIMIT, read_head).await != Ok(true) {
        return;
    }
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// Writes a 48 kHz mono 16-bit WAV into `dir` for the fake microphone:
/// `lead_s` of silence, then each sentence spoken by espeak-ng (`-v en-us
/// -s 150`) followed by `gap_s` of silence, peak-normalised to -3 dBFS.
/// Deterministic (no dither: `sox -D`), so the same text gives the same
/// bytes. Returns its path. Panics, with the tools' output, when espeak-ng
/// or sox fails or is missing.
pub fn caller_wav(dir: &Path, sentences: &[&str], lead_s: f32, gap_s: f32) -> PathBuf {
    assert!(!sentences.is_empty(), "caller_wav needs a sentence");
    assert!(
        lead_s >= 0.0 && gap_s >= 0.0,
        "negative silence: {lead_s}, {gap_s}"
    );
    let stem = format!("caller-{}", uuid::Uuid::new_v4().simple());
    let log = dir.join(format!("{stem}.log"));
    let mut parts = Vec::new();
    for (i, sentence) in sentences.iter().enumerate() {
        let spoken = dir.join(format!("{stem}-{i}-spoken.wav"));
        let part = dir.join(format!("{stem}-{i}.wav"));
        tool(
            &log,
            Command::new("espeak-ng")
                .args(["-v", "en-us", "-s", "150", "-w"])
                .arg(&spoken)
                .arg(sentence),
        );
        let gap = gap_s.to_string();
        tool(&log, sox(&spoken, &part).args(["pad", "0", &gap]));
        let _ = std::fs::remove_file(&spoken);
        parts.push(part);
    }
    let out = dir.join(format!("{stem}.wav"));
    let mut all = Command::new("sox");
    all.args(["-V1", "-D"]).args(&parts);
    all.args(["-r", "48000", "-c", "1", "-b", "16", "-e", "signed-integer"]);
    all.arg(&out)
        .args(["rate", "48000", "gain", "-n", "-3", "pad"]);
    tool(&log, all.arg(lead_s.to_string()));
    for part in parts {
        let _ = std::fs::remove_file(part);
    }
    let _ = std::fs::remove_file(&log);
    out
}

/// `sox -V1 -D <input> <output>`, for effects to be appended.
fn sox(input: &Path, output: &Path) -> Command {
    let mut cmd = Command::new("sox");
    cmd.args(["-V1", "-D"]).arg(input).arg(output);
    cmd
}

/// Runs an audio tool (bounded), its output appended to `log`; panics with
/// that output when it fails.
fn tool(log: &Path, cmd: &mut Command) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
    let err = file.try_clone().expect("clone a file handle");
    cmd.stdout(file).stderr(err);
    let what = format!("{cmd:?}");
    match run_bounded(cmd, &what, TOOL_LIMIT) {
        Ok(status) if status.success() => {}
        Ok(status) => panic!(
            "{what} failed ({status}):\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
        Err(e) => panic!("{e}"),
    }
}
