//! The answer as `docs/webrtc.md` promises it. str0m writes a browser-style
//! answer: the discard port and address in `m=` and `c=` (`9`,
//! `0.0.0.0`), `a=ice-options:trickle`, and no `a=end-of-candidates`.
//! callgate is ICE-lite with one host candidate known before it answers,
//! so the answer says so: the candidate's address in `m=`, `c=` and
//! `a=rtcp:`, no trickle option (`PATCH` is refused), and the candidates
//! closed with `a=end-of-candidates` (RFC 8840 §4.1; RFC 9725 §4.3.1).

use std::net::SocketAddr;

/// `answer` with its connection data set to `advertised`, the trickle
/// option removed and the candidate list ended. Lines are kept in order,
/// CRLF-terminated.
pub fn finish(answer: &str, advertised: SocketAddr) -> String {
    let ip = advertised.ip();
    let family = if ip.is_ipv4() { "IP4" } else { "IP6" };
    let mut out = String::with_capacity(answer.len() + 64);
    let mut lines = answer
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty())
        .peekable();
    let mut ended = false;
    while let Some(line) = lines.next() {
        if line == "a=ice-options:trickle" {
            continue;
        }
        ended |= line == "a=end-of-candidates";
        let fixed = if let Some(rest) = line.strip_prefix("m=audio ") {
            let after_port = rest.split_once(' ').map_or("", |(_, r)| r);
            format!("m=audio {} {after_port}", advertised.port())
        } else if line.starts_with("c=IN ") {
            format!("c=IN {family} {ip}")
        } else if line.starts_with("a=rtcp:") {
            format!("a=rtcp:{} IN {family} {ip}", advertised.port())
        } else {
            line.to_string()
        };
        out.push_str(&fixed);
        out.push_str("\r\n");
        let last_candidate = line.starts_with("a=candidate:")
            && !lines.peek().is_some_and(|n| n.starts_with("a=candidate:"));
        if last_candidate && !ended && lines.peek() != Some(&"a=end-of-candidates") {
            out.push_str("a=end-of-candidates\r\n");
            ended = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape str0m 0.x writes (trimmed).
    const STR0M: &str = "v=0\r\no=str0m-1 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
a=group:BUNDLE 0\r\na=ice-lite\r\n\
m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=rtcp:9 IN IP4 0.0.0.0\r\n\
a=ice-ufrag:abcd\r\na=ice-pwd:efghijklmnopqrstuvwxyz12\r\na=ice-options:trickle\r\n\
a=setup:passive\r\na=mid:0\r\na=sendrecv\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\n\
a=candidate:1 1 udp 2130706175 203.0.113.10 3478 typ host\r\n";

    #[test]
    fn the_answer_names_the_candidate_address_and_ends_its_candidates() {
        let out = finish(STR0M, "203.0.113.10:3478".parse().unwrap());
        let lines: Vec<&str> = out.split("\r\n").collect();
        assert!(
            lines.contains(&"m=audio 3478 UDP/TLS/RTP/SAVPF 111"),
            "{out}"
        );
        assert!(lines.contains(&"c=IN IP4 203.0.113.10"), "{out}");
        assert!(lines.contains(&"a=rtcp:3478 IN IP4 203.0.113.10"), "{out}");
        assert!(!out.contains("trickle"), "{out}");
        let cand = lines
            .iter()
            .position(|l| l.starts_with("a=candidate:"))
            .unwrap();
        assert_eq!(lines[cand + 1], "a=end-of-candidates", "{out}");
        assert_eq!(out.matches("a=end-of-candidates").count(), 1);
        assert!(out.ends_with("\r\n"));
        // Everything else is kept, in order.
        assert!(out.contains("a=ice-lite\r\nm=audio"), "{out}");
        assert!(out.contains("a=sendrecv\r\na=rtcp-mux\r\n"), "{out}");
    }

    #[test]
    fn ipv6_and_an_already_ended_list_are_handled() {
        let done = format!("{STR0M}a=end-of-candidates\r\n");
        let out = finish(&done, "[2001:db8::1]:4000".parse().unwrap());
        assert!(out.contains("c=IN IP6 2001:db8::1\r\n"), "{out}");
        assert!(out.contains("m=audio 4000 "), "{out}");
        assert_eq!(out.matches("a=end-of-candidates").count(), 1);
        assert_eq!(finish(&out, "[2001:db8::1]:4000".parse().unwrap()), out);
    }
}
