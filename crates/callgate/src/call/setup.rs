//! Opening a call's four connections in parallel, each with its own deadline
//! (docs/design.md principle 3). Whatever opened is released if anything fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use admission::PartnerId;
use state_store::{CallId, NewCall, OwnerEpoch};

use super::labels::{Labels, Transport, opening_stats};
use crate::app::CallServices;
use crate::config::{Config, ms};
use crate::end::EndReason;
pub use crate::end::Resource;
use crate::leg::{Ingress, LegFormat};

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

/// Setup failed: the first failing resource names the reason; all failures
/// are listed. `epoch` is set when the ledger row was created (it must then
/// be closed with the failure as end reason).
#[derive(Debug)]
pub struct SetupFailure {
    pub failures: Vec<(Resource, String)>,
    pub epoch: Option<OwnerEpoch>,
}

impl SetupFailure {
    /// The first failing resource names the reason (`setup_failed:stt`).
    /// A failure always lists at least one resource; `State` stands in for
    /// an empty list, which [`open`] never returns.
    pub fn reason(&self) -> EndReason {
        let first = self.failures.first().map_or(Resource::State, |(r, _)| *r);
        EndReason::SetupFailed(first)
    }
}

/// What the ingress learned about a call before admission.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub call_id: CallId,
    pub ingress: Ingress,
    pub format: LegFormat,
    /// The carrier's or partner's own id for the call (a CallSid,
    /// partner `call_id`), when there is one.
    pub carrier_call_id: String,
    /// The authenticated partner, on the partner ingress.
    pub partner: Option<PartnerId>,
    /// For the dialog service (`ingress`, carrier ids, custom parameters).
    pub metadata: Vec<(String, String)>,
    /// Where a transfer sends the caller, when the leg can say.
    pub transfer_target: Option<String>,
    /// What the call's signalling arrived on (the receipt's `transport`).
    pub transport: Transport,
    /// The receipt's labels, already filtered and bounded by `[receipt]`.
    pub labels: Labels,
}

/// An admitted call: its arrival, its admission, and the one configuration
/// it runs on.
pub struct CallInfo {
    pub arrival: Arrival,
    pub admitted_at: Instant,
    pub admission_wait: Duration,
    /// Taken once, at admission: setup, the call and its receipt read this,
    /// never the live configuration, so a reload changes the next call and
    /// never hands this one two configurations.
    pub cfg: Arc<Config>,
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
    app: &CallServices,
    info: &CallInfo,
    clock: &super::record::CallClock,
) -> Result<Resources, SetupFailure> {
    let cfg = &info.cfg;
    let a = &info.arrival;
    let label = a.call_id.to_string();
    // STT and TTS speak the leg's own format: no call is transcoded twice.
    let stt_cfg = crate::app::stt_config(cfg, a.format);
    let tts_cfg = crate::app::tts_config(cfg, a.format);
    let new_call = NewCall {
        call_id: a.call_id,
        ingress: a.ingress.as_str().to_string(),
        carrier_call_id: Some(a.carrier_call_id.clone()).filter(|s| !s.is_empty()),
        partner_id: a.partner.as_ref().map(ToString::to_string),
        admitted_at: clock.at(info.admitted_at),
        admission_wait: info.admission_wait,
        stats: opening_stats(a.transport, &a.labels, &cfg.receipt.providers),
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
        app.dialog.open(&label, a.metadata.clone()),
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
