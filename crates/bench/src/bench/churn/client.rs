//! The churn bench's WebRTC client: a str0m peer (the controlling ICE
//! agent, as a browser is) on its own loopback socket that offers one
//! Opus audio section, connects ICE and DTLS to the server, and hangs up
//! with `DELETE`. No media beyond what str0m sends by itself: the churn
//! bench measures what a session's life leaves behind, not a conversation
//! (the load tool's WebRTC caller does that).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc, RtcConfig};
use tokio::net::UdpSocket;

/// One session: offered, connected (ICE + DTLS), hung up. Returns the time
/// from the POST to DTLS done.
///
/// # Errors
/// What went wrong, in words: the POST's status, a timeout, a socket error.
pub async fn connect_and_hang_up(
    http: &reqwest::Client,
    url: &str,
    limit: Duration,
) -> Result<Duration, String> {
    let sock = UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let local = sock.local_addr().map_err(|e| e.to_string())?;
    let mut rtc = RtcConfig::new()
        .clear_codecs()
        .enable_opus(true, false)
        .build(Instant::now());
    let cand = Candidate::host(local, "udp").map_err(|e| e.to_string())?;
    rtc.add_local_candidate(cand);
    let mut change = rtc.sdp_api();
    change.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
    let (offer, pending) = change.apply().ok_or("no offer")?;
    let started = Instant::now();
    let r = http
        .post(url)
        .header("content-type", "application/sdp")
        .body(offer.to_sdp_string())
        .send()
        .await
        .map_err(|e| format!("POST: {e}"))?;
    if r.status().as_u16() != 201 {
        return Err(format!("POST answered {}", r.status()));
    }
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .ok_or("no Location")?
        .to_string();
    let answer = r.text().await.map_err(|e| e.to_string())?;
    let answer = SdpAnswer::from_sdp_string(&answer).map_err(|e| format!("answer: {e}"))?;
    rtc.sdp_api()
        .accept_answer(pending, answer)
        .map_err(|e| format!("accept: {e}"))?;
    let outcome = drive_until_connected(&mut rtc, &sock, local, started + limit).await;
    let session = url.replace("/v1/webrtc", &location);
    let deleted = http.delete(session).send().await;
    let connected = outcome?;
    match deleted {
        Ok(r) if r.status().as_u16() == 200 => Ok(connected.duration_since(started)),
        Ok(r) => Err(format!("DELETE answered {}", r.status())),
        Err(e) => Err(format!("DELETE: {e}")),
    }
}

async fn drive_until_connected(
    rtc: &mut Rtc,
    sock: &UdpSocket,
    local: SocketAddr,
    deadline: Instant,
) -> Result<Instant, String> {
    let mut buf = vec![0u8; 2_048];
    loop {
        let wait = match rtc.poll_output().map_err(|e| e.to_string())? {
            Output::Transmit(t) => {
                let _ = sock.send_to(&t.contents, t.destination).await;
                continue;
            }
            Output::Event(Event::Connected) => return Ok(Instant::now()),
            Output::Event(_) => continue,
            Output::Timeout(t) => t.saturating_duration_since(Instant::now()),
        };
        if Instant::now() >= deadline {
            return Err("not connected in time".into());
        }
        let wait = wait.clamp(Duration::from_millis(1), Duration::from_millis(50));
        let input = match tokio::time::timeout(wait, sock.recv_from(&mut buf)).await {
            Ok(Ok((n, from))) => {
                let Ok(contents) = buf[..n].try_into() else {
                    continue;
                };
                let recv = Receive {
                    proto: Protocol::Udp,
                    source: from,
                    destination: local,
                    contents,
                };
                rtc.handle_input(Input::Receive(Instant::now(), recv))
            }
            _ => rtc.handle_input(Input::Timeout(Instant::now())),
        };
        input.map_err(|e| e.to_string())?;
    }
}
