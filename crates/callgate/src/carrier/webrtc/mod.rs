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
//!
//! The shared socket is read on a thread of its own (`webrtc-router`, a
//! current-thread runtime with its own reactor), not as one more task on
//! the call runtime: at 200 calls it carries 10,000 datagrams a second,
//! and a reader queued behind hundreds of session tasks on two busy
//! workers let the kernel buffer overflow (packets dropped, frames
//! concealed) while calls were being set up. Sessions send on the same
//! socket from their own tasks.

pub mod conversation;
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
    /// Stops the router thread when the last holder lets go.
    _router: tokio_util::sync::DropGuard,
}

impl WebrtcShared {
    /// Binds the socket, makes the certificate and starts the router task.
    pub async fn start(cfg: WebrtcConfig) -> anyhow::Result<Arc<WebrtcShared>> {
        let bound = bind(cfg.listen, cfg.socket_buffer_bytes)?;
        let reader = bound.try_clone()?;
        let socket = Arc::new(UdpSocket::from_std(bound)?);
        let local = socket.local_addr()?;
        let advertised = SocketAddr::new(cfg.advertised(), local.port());
        let cert = str0m::crypto::from_feature_flags()
            .dtls_provider
            .generate_certificate()
            .ok_or_else(|| anyhow::anyhow!("no DTLS certificate could be generated"))?;
        let routes = Arc::new(Routes::default());
        let router = spawn_router(reader, Arc::clone(&routes))?;
        let shared = Arc::new(WebrtcShared {
            cfg,
            socket,
            local,
            advertised,
            routes,
            cert,
            registry: Arc::default(),
            _router: router,
        });
        info!(%local, %advertised, "WebRTC media socket listening");
        Ok(shared)
    }
}

/// Binds the shared media socket with `buffer` bytes of kernel buffer each
/// way, warning when the kernel grants less (its `rmem_max`/`wmem_max`).
fn bind(listen: SocketAddr, buffer: usize) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(
        Domain::for_address(listen),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    // Best effort: a kernel that refuses a size keeps its default.
    let _ = s.set_recv_buffer_size(buffer);
    let _ = s.set_send_buffer_size(buffer);
    s.set_nonblocking(true)?;
    s.bind(&listen.into())?;
    // Linux reports twice what it grants (the doubling covers bookkeeping).
    let granted = |got: std::io::Result<usize>| got.map(|b| b / 2).unwrap_or(0);
    let (rcv, snd) = (granted(s.recv_buffer_size()), granted(s.send_buffer_size()));
    if rcv < buffer || snd < buffer {
        warn!(
            asked = buffer,
            receive = rcv,
            send = snd,
            "the WebRTC socket got smaller kernel buffers than webrtc.socket_buffer_bytes: \
             raise net.core.rmem_max / wmem_max, or packets drop under load"
        );
    }
    Ok(s.into())
}

/// Starts the router on its own thread and runtime, reading `socket` (a
/// clone of the shared one); it stops when the guard is dropped.
fn spawn_router(
    socket: std::net::UdpSocket,
    routes: Arc<Routes>,
) -> std::io::Result<tokio_util::sync::DropGuard> {
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Registered with the router's own reactor here, so a failure is the
    // caller's error rather than a router that never reads.
    let socket = {
        let _in_router_runtime = rt.enter();
        UdpSocket::from_std(socket)?
    };
    std::thread::Builder::new()
        .name("webrtc-router".into())
        .spawn(move || {
            rt.block_on(async move {
                tokio::select! {
                    () = route_datagrams(socket, routes) => {}
                    () = stopped.cancelled() => {}
                }
            });
        })?;
    Ok(stop.drop_guard())
}

/// The one reader of the shared socket: every datagram to its session's
/// inbox, or dropped and counted.
async fn route_datagrams(socket: UdpSocket, routes: Arc<Routes>) {
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
