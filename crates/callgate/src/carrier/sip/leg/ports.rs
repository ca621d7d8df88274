//! The RTP port range: a pool of even ports (RTP) with the odd port above
//! each (RTCP), leased as a bound socket pair.
//!
//! A [`PortLease`] is the only way to hold a port and its `Drop` returns
//! it, so every exit path of a call — answered, refused, failed, panicked
//! — frees its port; nothing balances a counter by hand. A port some other
//! process holds is skipped (and tried again later, at the back of the
//! queue).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::UdpSocket;

/// The pool. Cheap to clone.
#[derive(Clone)]
pub struct RtpPorts {
    inner: Arc<Inner>,
}

struct Inner {
    free: Mutex<VecDeque<u16>>,
    total: usize,
    ip: IpAddr,
}

/// A leased port pair, bound. Dropping it returns the port.
pub struct PortLease {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
    pub port: u16,
    pool: Arc<Inner>,
}

impl RtpPorts {
    /// Every even port in `[min, max]` whose odd neighbour is also in range,
    /// bound on `ip`.
    pub fn new(ip: IpAddr, min: u16, max: u16) -> RtpPorts {
        let first = min + (min % 2);
        let free: VecDeque<u16> = (first..max).step_by(2).collect();
        RtpPorts {
            inner: Arc::new(Inner {
                total: free.len(),
                free: Mutex::new(free),
                ip,
            }),
        }
    }

    /// Ports leased now.
    pub fn in_use(&self) -> usize {
        self.inner.total - self.inner.lock().len()
    }

    /// Port pairs in the range.
    pub fn total(&self) -> usize {
        self.inner.total
    }

    /// A bound pair, or `None` when every port is leased or unbindable.
    pub fn lease(&self) -> Option<PortLease> {
        let tries = self.inner.lock().len();
        for _ in 0..tries {
            let port = self.inner.lock().pop_front()?;
            match bind_pair(self.inner.ip, port) {
                Ok((rtp, rtcp)) => {
                    metrics::gauge!(crate::metrics::RTP_PORTS_IN_USE).increment(1.0);
                    return Some(PortLease {
                        rtp,
                        rtcp,
                        port,
                        pool: Arc::clone(&self.inner),
                    });
                }
                Err(e) => {
                    tracing::debug!(port, error = %e, "RTP port busy elsewhere; skipped");
                    self.inner.lock().push_back(port);
                }
            }
        }
        None
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<u16>> {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        // Returned at the back: a port is not reused at once, so a late
        // packet of the previous call does not land in the next one.
        self.pool.lock().push_back(self.port);
        metrics::gauge!(crate::metrics::RTP_PORTS_IN_USE).decrement(1.0);
    }
}

fn bind_pair(ip: IpAddr, port: u16) -> std::io::Result<(UdpSocket, UdpSocket)> {
    let rtp = std::net::UdpSocket::bind(SocketAddr::new(ip, port))?;
    let rtcp = std::net::UdpSocket::bind(SocketAddr::new(ip, port + 1))?;
    rtp.set_nonblocking(true)?;
    rtcp.set_nonblocking(true)?;
    Ok((UdpSocket::from_std(rtp)?, UdpSocket::from_std(rtcp)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn leases_return_on_drop_and_busy_ports_are_skipped() {
        // A range whose first pair another socket already holds.
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let base = probe.local_addr().unwrap().port() & !1;
        drop(probe);
        let squatter = std::net::UdpSocket::bind(("127.0.0.1", base)).ok();
        let pool = RtpPorts::new("127.0.0.1".parse().unwrap(), base, base + 5);
        assert_eq!(pool.total(), 3);
        let a = pool.lease().expect("a free pair");
        let b = pool.lease().expect("another free pair");
        if squatter.is_some() {
            assert_ne!(a.port, base);
            assert_ne!(b.port, base);
            assert!(pool.lease().is_none(), "the squatted pair is not leased");
        }
        assert_eq!(a.rtcp.local_addr().unwrap().port(), a.port + 1);
        assert_eq!(pool.in_use(), 2);
        drop(a);
        drop(b);
        assert_eq!(pool.in_use(), 0);
    }
}
