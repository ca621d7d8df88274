//! The WebRTC carrier: browsers call over Opus, signalled the WHIP way
//! (RFC 9725 shape, two-way; `docs/webrtc.md` is the contract), every
//! session on one UDP socket.
//!
//! | file | what |
//! |---|---|
//! | [`signalling`] | `POST /v1/webrtc` (offer → admission → `201` answer or `503`), `GET`/`DELETE`/`PATCH` on the session URL, client evidence, `OPTIONS`, `GET /call` |
//! | [`sdp`] | the offer screen (bounds, Opus, ICE credentials, fingerprint), fuzzed |
//! | [`router`] | the shared socket's datagram router (by address, else by STUN ufrag), fuzzed |
//! | [`session`] | one session's media task: str0m `Rtc`, deadlines, the 20 ms playout clock |
//! | [`opus`] | Opus ↔ 16 kHz L16, PLC and FEC |
//! | [`leg`] | [`leg::WebrtcLeg`], the seam |
//! | [`registry`] | sessions by unguessable id, RAII-held |
//! | [`report`] | what the receipt's `media.transport` holds |
//!
//! str0m is sans-IO (datagrams and time in, transmits and events out), the
//! server is ICE-lite (it answers checks, never sends them) and shares one
//! DTLS certificate, generated at start, across sessions. Never here: a
//! socket per session, a TURN client, video.

pub mod evidence;
pub mod leg;
pub mod opus;
pub mod registry;
pub mod report;
pub mod router;
pub mod sdp;
pub mod session;
pub mod signalling;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::UdpSocket;
use tracing::{info, warn};

use crate::config::WebrtcConfig;
use crate::metrics as m;
use router::{Datagram, Kind, Routed, Routes};

/// What every WebRTC session shares for the server's life.
pub struct WebrtcShared {
    pub cfg: WebrtcConfig,
    pub socket: Arc<UdpSocket>,
    /// Where the socket is bound.
    pub local: SocketAddr,
    /// Our ICE candidate's address (`webrtc.advertise_ip`, the bound port).
    pub advertised: SocketAddr,
    pub routes: Arc<Routes>,
    pub cert: str0m::config::DtlsCert,
    pub registry: Arc<registry::Registry>,
    /// The router task; stopped when the last holder lets go.
    router: tokio::task::AbortHandle,
}

impl Drop for WebrtcShared {
    fn drop(&mut self) {
        self.router.abort();
    }
}

impl WebrtcShared {
    /// Binds the socket, makes the certificate and starts the router task.
    pub async fn start(cfg: WebrtcConfig) -> anyhow::Result<Arc<WebrtcShared>> {
        let socket = Arc::new(UdpSocket::bind(cfg.listen).await?);
        let local = socket.local_addr()?;
        let advertised = SocketAddr::new(cfg.advertised(), local.port());
        let cert = str0m::crypto::from_feature_flags()
            .dtls_provider
            .generate_certificate()
            .ok_or_else(|| anyhow::anyhow!("no DTLS certificate could be generated"))?;
        let routes = Arc::new(Routes::default());
        let router = tokio::spawn(route_datagrams(Arc::clone(&socket), Arc::clone(&routes)));
        let shared = Arc::new(WebrtcShared {
            cfg,
            socket,
            local,
            advertised,
            routes,
            cert,
            registry: Arc::default(),
            router: router.abort_handle(),
        });
        info!(%local, %advertised, "WebRTC media socket listening");
        Ok(shared)
    }
}

/// The one reader of the shared socket: every datagram to its session's
/// inbox, or dropped and counted.
async fn route_datagrams(socket: Arc<UdpSocket>, routes: Arc<Routes>) {
    let mut buf = vec![0u8; 2_048];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            // ICMP port-unreachable from a gone peer surfaces here on some
            // platforms: it concerns one peer, never the socket.
            Err(e) => {
                warn!(error = %e, "WebRTC socket receive error (ignored)");
                continue;
            }
        };
        let bytes = &buf[..n];
        let (routed, inbox) = routes.route(from, bytes);
        let why = match (routed, inbox) {
            (Routed::To(_), Some(inbox)) => {
                let d = Datagram {
                    from,
                    at: Instant::now(),
                    bytes: bytes.to_vec(),
                };
                match inbox.try_send(d) {
                    Ok(()) => continue,
                    Err(_) => "inbox_full",
                }
            }
            (Routed::TooManyAddrs, _) => "too_many_addrs",
            _ => "no_session",
        };
        metrics::counter!(m::WEBRTC_DROPPED, "kind" => Kind::of(bytes).as_str(), "why" => why)
            .increment(1);
    }
}
