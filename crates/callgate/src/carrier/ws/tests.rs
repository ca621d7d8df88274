use super::*;

#[test]
fn a_message_over_the_limit_is_named_by_kind_and_size() {
    let text = Message::Text("x".repeat(17).into());
    assert_eq!(
        oversize(&text, 16),
        Some(Oversize {
            kind: MessageKind::Text,
            len: 17,
            limit: 16
        })
    );
    let binary = Message::Binary(vec![0; 65_536].into());
    let over = oversize(&binary, 16_384).expect("over");
    assert_eq!((over.kind.as_str(), over.len), ("binary", 65_536));
    // At the limit is within it; control frames are not measured here.
    assert_eq!(oversize(&Message::Text("x".repeat(16).into()), 16), None);
    assert_eq!(oversize(&Message::Ping(vec![0; 100].into()), 16), None);
}

#[test]
fn the_transport_refusal_carries_the_size_its_header_announced() {
    use tungstenite::error::{CapacityError, Error};
    let refused = axum::Error::new(Error::Capacity(CapacityError::MessageTooLong {
        size: 300_000,
        max_size: TRANSPORT_CAP,
    }));
    let over = transport_oversize(&refused, 16_384).expect("a capacity error");
    assert_eq!(
        (over.kind.as_str(), over.len, over.limit),
        ("WebSocket", 300_000, 16_384)
    );
    let other = axum::Error::new(Error::ConnectionClosed);
    assert_eq!(transport_oversize(&other, 16_384), None);
}

#[test]
fn the_transport_cap_is_never_under_a_carrier_limit() {
    assert_eq!(transport_cap(16 * 1024), TRANSPORT_CAP);
    assert_eq!(transport_cap(1 << 20), 1 << 20);
}
