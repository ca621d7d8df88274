//! The partner WebSocket ingress: `GET /v1/partner/stream`
//! (`docs/partner-protocol.md`).
//!
//! Closed by default: the upgrade needs `Authorization: Bearer <key>` whose
//! SHA-256 matches a configured `[partners.<id>]`; with no partner
//! configured every upgrade is refused. Refusals are 401 before the
//! upgrade, with a one-line reason, counted by why. After the upgrade the
//! leg reads `start`, callgate answers `started`, and the call takes the
//! path every leg takes ([`super::run`]) — with the partner's quota inside
//! the admission gate.

use std::sync::Arc;
use std::time::Instant;

use admission::PartnerId;
use axum::Router;
use axum::extract::{Extension, State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use state_store::CallId;
use tracing::{Instrument, info, info_span, warn};

use super::leg::{Attach, PartnerLeg, Registry, refuse_attach};
use super::resume::{self, Refusal};
use crate::app::CallServices;
use crate::call::labels::{Labels, Transport};
use crate::call::setup::Arrival;
use crate::carrier::ws;
use crate::config::{Config, ms};
use crate::leg::{Ingress, Leg};
use crate::metrics as m;

/// Why an upgrade was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    NoPartners,
    MissingKey,
    UnknownKey,
}

impl AuthError {
    pub const fn as_str(self) -> &'static str {
        match self {
            AuthError::NoPartners => "no_partners_configured",
            AuthError::MissingKey => "missing_key",
            AuthError::UnknownKey => "unknown_key",
        }
    }

    fn message(self) -> &'static str {
        match self {
            AuthError::NoPartners => "partner ingress disabled: no partners are configured\n",
            AuthError::MissingKey => "missing Authorization: Bearer <partner key>\n",
            AuthError::UnknownKey => "unknown partner key\n",
        }
    }
}

/// The partner whose key is presented in `authorization` (the header's
/// value). Digests are compared in constant time; the key is never logged.
pub fn authenticate(cfg: &Config, authorization: Option<&str>) -> Result<PartnerId, AuthError> {
    if cfg.partners.is_empty() {
        return Err(AuthError::NoPartners);
    }
    let key = authorization
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or(AuthError::MissingKey)?;
    let digest = hex(&Sha256::digest(key.as_bytes()));
    let mut found = None;
    for (id, p) in &cfg.partners {
        if constant_time_eq(
            digest.as_bytes(),
            p.key_sha256.to_ascii_lowercase().as_bytes(),
        ) {
            found = Some(id);
        }
    }
    found.map(PartnerId::new).ok_or(AuthError::UnknownKey)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The upgrade handler.
pub async fn partner_stream(
    State(app): State<Arc<CallServices>>,
    Extension(resumes): Extension<Arc<Registry>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = app.cfg();
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    let partner = match authenticate(&cfg, auth) {
        Ok(p) => p,
        Err(e) => {
            warn!(
                why = e.as_str(),
                "partner stream refused before the upgrade"
            );
            metrics::counter!(m::PARTNER_AUTH_REFUSED, "why" => e.as_str()).increment(1);
            return (StatusCode::UNAUTHORIZED, e.message()).into_response();
        }
    };
    let cap = ws::transport_cap(message_limit(&cfg));
    let ws = ws
        .max_message_size(cap)
        .max_frame_size(cap)
        .read_buffer_size(8 * 1024);
    let route = route_value(&cfg.server.instance);
    let mut response = match headers.get(RESUME_HEADER) {
        Some(token) => resume(&resumes, ws, token.to_str().unwrap_or(""), &partner),
        None => {
            let tracker = app.tasks.clone();
            ws.on_upgrade(move |socket| async move {
                tracker
                    .spawn(handle(app, resumes, socket, partner))
                    .await
                    .ok();
            })
        }
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        response.headers_mut().insert(ROUTE_HEADER, route);
    }
    response
}

/// The response header of every accepted partner upgrade that names this
/// instance, opaquely: a balancer sticks a resume (which sends it back) to
/// the instance holding the call, since resume tokens live there
/// (`deploy/haproxy`: `stick store-response` / `stick match`).
pub const ROUTE_HEADER: &str = "callgate-route";

/// This instance's route: the first 16 bytes of SHA-256 over its name, in
/// hex — stable across restarts, and naming nothing a partner can read.
pub fn route_value(instance: &str) -> axum::http::HeaderValue {
    let digest = Sha256::digest(format!("callgate-route:{instance}").as_bytes());
    // Hex digits are always a valid header value.
    axum::http::HeaderValue::from_str(&hex(&digest[..16]))
        .unwrap_or(axum::http::HeaderValue::from_static("0"))
}

/// The partner carrier's route, with the resume registry its handler
/// reads (kept in [`crate::carrier::Carriers`]).
pub fn routes(resumes: Arc<Registry>) -> Router<Arc<CallServices>> {
    Router::new()
        .route("/v1/partner/stream", get(partner_stream))
        .layer(Extension(resumes))
}

/// The request header that presents a resume token.
pub const RESUME_HEADER: &str = "callgate-resume";

/// The HTTP status that refuses a resume for `why`.
pub fn refusal_status(why: Refusal) -> StatusCode {
    match why {
        Refusal::Malformed => StatusCode::BAD_REQUEST,
        Refusal::WrongPartner => StatusCode::FORBIDDEN,
        Refusal::Unknown => StatusCode::NOT_FOUND,
        Refusal::Used => StatusCode::CONFLICT,
        Refusal::Expired => StatusCode::GONE,
    }
}

/// Claims `token` for `partner` and, once upgraded, hands the socket to the
/// call's leg. A refusal is answered before the upgrade.
fn resume(
    resumes: &Arc<Registry>,
    ws: WebSocketUpgrade,
    token: &str,
    partner: &PartnerId,
) -> Response {
    let claim = match resumes.claim(token, partner, Instant::now()) {
        Ok(c) => c,
        Err(why) => {
            warn!(partner = %partner, why = why.as_str(), token = %resume::redacted(token), "partner resume refused");
            metrics::counter!(m::PARTNER_RESUMES, "result" => why.as_str()).increment(1);
            let body = format!("{}: {why}\n", why.as_str());
            return (refusal_status(why), body).into_response();
        }
    };
    info!(partner = %partner, session = %claim.session, "partner resume accepted; upgrading");
    ws.on_upgrade(move |socket| async move {
        // The leg takes the socket in its own task; a call that ended
        // meanwhile has closed its queue, and the socket is told so.
        if let Err(attach) = claim.attach(Attach { socket }) {
            refuse_attach(attach);
        }
    })
}

async fn handle(
    app: Arc<CallServices>,
    resumes: Arc<Registry>,
    socket: axum::extract::ws::WebSocket,
    partner: PartnerId,
) {
    let cfg = app.cfg();
    let timeout = ms(cfg.partner.start_timeout_ms);
    let limit = message_limit(&cfg);
    let (mut leg, start) = match PartnerLeg::accept(socket, limit, timeout).await {
        Ok(x) => x,
        Err(e) => {
            warn!(partner = %partner, code = e.0.code(), error = %e.0, "partner stream closed before a call started");
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => e.0.code()).increment(1);
            return;
        }
    };
    let call_id = CallId::new_random();
    let window = ms(cfg.partner.resume_window_ms);
    leg.resumable(resumes, call_id, partner.clone(), window);
    leg.started(&call_id.to_string());
    let target = cfg
        .partners
        .get(partner.as_str())
        .and_then(|p| p.transfer_target.clone())
        .unwrap_or_else(|| cfg.partner.transfer_target.clone());
    let mut metadata = vec![
        ("ingress".to_string(), "partner".to_string()),
        ("partner_id".to_string(), partner.to_string()),
        ("carrier_call_id".to_string(), start.call_id.clone()),
    ];
    metadata.extend(
        start
            .metadata
            .iter()
            .map(|(k, v)| (format!("param.{k}"), v.clone())),
    );
    let arrival = Arrival {
        call_id,
        ingress: Ingress::Partner,
        format: leg.format(),
        carrier_call_id: start.call_id.clone(),
        partner: Some(partner.clone()),
        metadata,
        transfer_target: Some(target),
        transport: Transport::WebSocket,
        labels: Labels::from_params(&cfg.receipt, &start.metadata),
    };
    let span = info_span!("call", call_id = %call_id, partner = %partner, partner_call_id = %start.call_id, ingress = "partner");
    crate::ingress::run(app, leg, arrival)
        .instrument(span)
        .await;
}

/// The largest message a partner connection accepts: text messages are
/// bounded by config; a 20 ms audio frame is at most 640 bytes, so the
/// limit never goes under 4 KiB.
fn message_limit(cfg: &Config) -> usize {
    cfg.partner.max_message_bytes.max(4_096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PartnerConfig;

    fn cfg_with(key: &str) -> Config {
        let mut cfg = Config::default();
        cfg.partners.insert(
            "acme".into(),
            PartnerConfig {
                key_sha256: hex(&Sha256::digest(key.as_bytes())),
                ..PartnerConfig::default()
            },
        );
        cfg
    }

    #[test]
    fn only_a_configured_key_authenticates() {
        let cfg = cfg_with("s3cret");
        assert_eq!(
            authenticate(&cfg, Some("Bearer s3cret")).unwrap().as_str(),
            "acme"
        );
        assert_eq!(
            authenticate(&cfg, Some("Bearer wrong")),
            Err(AuthError::UnknownKey)
        );
        assert_eq!(
            authenticate(&cfg, Some("s3cret")),
            Err(AuthError::MissingKey)
        );
        assert_eq!(
            authenticate(&cfg, Some("Bearer ")),
            Err(AuthError::MissingKey)
        );
        assert_eq!(authenticate(&cfg, None), Err(AuthError::MissingKey));
        let none = Config::default();
        assert_eq!(
            authenticate(&none, Some("Bearer s3cret")),
            Err(AuthError::NoPartners)
        );
    }

    #[test]
    fn an_upper_case_digest_in_config_still_matches() {
        let mut cfg = cfg_with("k");
        let p = cfg.partners.get_mut("acme").unwrap();
        p.key_sha256 = p.key_sha256.to_ascii_uppercase();
        assert!(authenticate(&cfg, Some("Bearer k")).is_ok());
    }
}
