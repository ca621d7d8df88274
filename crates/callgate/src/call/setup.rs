//! Opening a call's four connections in parallel, each with its own deadline
//! (DESIGN.md principle 3). Whatever opened is released if anything fails.

use std::time::{Duration, Instant};

use state_store::{CallId, NewCall, OwnerEpoch};

use crate::app::App;
use crate::config::ms;

/// Margin added to each client's own connect timeout for the outer deadline:
/// the outer bound is defence in depth in case a client's inner bound fails.
const OUTER_MARGIN: Duration = Duration::from_millis(500);

/// The per-call resources, all open.
pub struct Resources {
    pub stt: (stt_client::SttHandle, stt_client::SttEvents),
    pub tts: (tts_client::TtsHandle, tts_client::TtsEvents),
    pub dialog: (dialog_grpc::DialogSession, dialog_grpc::DialogEvents),
    pub epoch: OwnerEpoch,
}

/// Which resource could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Stt,
    Tts,
    Dialog,
    State,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Stt => "stt",
            Resource::Tts => "tts",
            Resource::Dialog => "dialog",
            Resource::State => "state",
        }
    }
}

/// Setup failed: the first failing resource names the reason; all failures
/// are listed. `epoch` is set when the ledger row was created (it must then
/// be closed with the failure as end reason).
#[derive(Debug)]
pub struct SetupFailure {
    pub failures: Vec<(Resource, String)>,
    pub epoch: Option<OwnerEpoch>,
}

impl SetupFailure {
    /// `setup_failed:<resource>` for the first failure, e.g. `setup_failed:stt`.
    pub fn reason(&self) -> String {
        let first = self
            .failures
            .first()
            .map(|(r, _)| r.as_str())
            .unwrap_or("unknown");
        format!("setup_failed:{first}")
    }
}

/// What the caller told us, for the dialog service and the ledger.
pub struct CallInfo {
    pub call_id: CallId,
    pub carrier_call_id: String,
    pub metadata: Vec<(String, String)>,
    pub admitted_at: Instant,
    pub admission_wait: Duration,
}

fn describe<E: std::fmt::Display>(
    r: Result<Result<(), E>, tokio::time::error::Elapsed>,
) -> Option<String> {
    match r {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("deadline passed".to_string()),
    }
}

/// Opens STT, TTS, dialog and the call's state concurrently.
pub async fn open(
    app: &App,
    info: &CallInfo,
    clock: &super::record::CallClock,
) -> Result<Resources, SetupFailure> {
    let cfg = app.cfg();
    let label = info.call_id.to_string();
    let stt_cfg = app.stt_config();
    let tts_cfg = app.tts_config();
    let new_call = NewCall {
        call_id: info.call_id,
        ingress: "twilio".to_string(),
        carrier_call_id: Some(info.carrier_call_id.clone()).filter(|s| !s.is_empty()),
        admitted_at: clock.at(info.admitted_at),
        admission_wait: info.admission_wait,
    };
    let stt = tokio::time::timeout(
        stt_cfg.connect_timeout + OUTER_MARGIN,
        stt_client::connect(&stt_cfg, &label),
    );
    let tts = tokio::time::timeout(
        tts_cfg.connect_timeout + OUTER_MARGIN,
        tts_client::connect(&tts_cfg, &label),
    );
    let dialog = tokio::time::timeout(
        ms(cfg.dialog.open_timeout_ms) + OUTER_MARGIN,
        app.dialog.open(&label, info.metadata.clone()),
    );
    let state = tokio::time::timeout(
        ms(cfg.database.setup_timeout_ms),
        app.store.open_call(new_call),
    );
    let (stt, tts, dialog, state) = tokio::join!(stt, tts, dialog, state);

    let mut failures = Vec::new();
    let (stt, e) = split(stt);
    push(&mut failures, Resource::Stt, e);
    let (tts, e) = split(tts);
    push(&mut failures, Resource::Tts, e);
    let (dialog, e) = split(dialog);
    push(&mut failures, Resource::Dialog, e);
    let (epoch, e) = split(state);
    push(&mut failures, Resource::State, e);

    match (stt, tts, dialog, epoch) {
        (Some(stt), Some(tts), Some(dialog), Some(epoch)) if failures.is_empty() => Ok(Resources {
            stt,
            tts,
            dialog,
            epoch,
        }),
        (stt, tts, dialog, epoch) => {
            release(stt, tts, dialog).await;
            Err(SetupFailure { failures, epoch })
        }
    }
}

fn split<T, E: std::fmt::Display>(
    r: Result<Result<T, E>, tokio::time::error::Elapsed>,
) -> (Option<T>, Option<String>) {
    match r {
        Ok(Ok(v)) => (Some(v), None),
        other => (None, describe(other.map(|r| r.map(|_| ())))),
    }
}

fn push(failures: &mut Vec<(Resource, String)>, r: Resource, e: Option<String>) {
    if let Some(e) = e {
        failures.push((r, e));
    }
}

/// Closes whatever opened, concurrently and bounded by the clients' own
/// close timeouts. The dialog stream ends when its halves are dropped.
async fn release(
    stt: Option<(stt_client::SttHandle, stt_client::SttEvents)>,
    tts: Option<(tts_client::TtsHandle, tts_client::TtsEvents)>,
    dialog: Option<(dialog_grpc::DialogSession, dialog_grpc::DialogEvents)>,
) {
    if let Some((session, events)) = dialog {
        session.end("setup_failed");
        drop(events);
    }
    let stt = async {
        if let Some((h, _events)) = stt {
            let _ = h.close().await;
        }
    };
    let tts = async {
        if let Some((h, _events)) = tts {
            let _ = h.close().await;
        }
    };
    tokio::join!(stt, tts);
}
