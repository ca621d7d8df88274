//! Tests of the RTCP module: layouts, round trips and malformed lengths.

use super::*;

fn block(ssrc: u32, cumulative_lost: i32) -> ReportBlock {
    ReportBlock {
        ssrc,
        fraction_lost: 42,
        cumulative_lost,
        highest_seq: 65_537,
        jitter: 9,
        last_sr: 0xB705_2000,
        delay_since_last_sr: 0x0005_4000,
    }
}

const INFO: SenderInfo = SenderInfo {
    ntp: 0x0102_0304_0506_0708,
    rtp_ts: 160_000,
    packets: 1_000,
    octets: 160_000,
};

#[test]
fn a_sender_report_round_trips_with_its_sdes() {
    let mut out = Vec::new();
    write_report(
        &mut out,
        Some(INFO),
        0xCAFE,
        &[block(1, 3), block(2, -2)],
        "callgate",
    );
    assert_eq!(out.len() % 4, 0);
    assert_eq!(out.len(), 4 + 24 + 48 + 4 + 4 + 2 + 8 + 2);
    let packets = parse_compound(&out).unwrap();
    assert_eq!(
        packets,
        vec![
            RtcpPacket::SenderReport {
                ssrc: 0xCAFE,
                ntp: INFO.ntp,
                rtp_ts: INFO.rtp_ts,
                packets: INFO.packets,
                octets: INFO.octets,
                reports: vec![block(1, 3), block(2, -2)],
            },
            RtcpPacket::Sdes,
        ]
    );
}

#[test]
fn a_receiver_report_has_the_rfc_layout() {
    let mut out = Vec::new();
    write_report(&mut out, None, 0x0A0B_0C0D, &[block(7, -1)], "ab");
    #[rustfmt::skip]
    let rr = [
        0x81, 201, 0, 7, 0x0A, 0x0B, 0x0C, 0x0D,
        0, 0, 0, 7, 42, 0xFF, 0xFF, 0xFF, 0, 1, 0, 1, 0, 0, 0, 9,
        0xB7, 0x05, 0x20, 0x00, 0x00, 0x05, 0x40, 0x00,
    ];
    assert_eq!(&out[..32], &rr);
    let sdes = [
        0x81, 202, 0, 3, 0x0A, 0x0B, 0x0C, 0x0D, 1, 2, b'a', b'b', 0, 0, 0, 0,
    ];
    assert_eq!(&out[32..], &sdes);
    let packets = parse_compound(&out).unwrap();
    assert_eq!(
        packets[0],
        RtcpPacket::ReceiverReport {
            ssrc: 0x0A0B_0C0D,
            reports: vec![block(7, -1)],
        }
    );
}

#[test]
fn blocks_beyond_31_go_in_more_receiver_reports() {
    let blocks: Vec<_> = (0..40).map(|i| block(i, 0)).collect();
    let mut out = Vec::new();
    write_report(&mut out, Some(INFO), 5, &blocks, "x");
    let packets = parse_compound(&out).unwrap();
    assert_eq!(packets.len(), 3);
    let RtcpPacket::SenderReport { reports, .. } = &packets[0] else {
        panic!("{packets:?}")
    };
    assert_eq!(reports[..], blocks[..31]);
    let RtcpPacket::ReceiverReport { reports, ssrc: 5 } = &packets[1] else {
        panic!("{packets:?}")
    };
    assert_eq!(reports[..], blocks[31..]);
    assert_eq!(packets[2], RtcpPacket::Sdes);
}

#[test]
fn loss_beyond_24_bits_is_clamped_on_the_wire() {
    let mut out = Vec::new();
    write_report(
        &mut out,
        None,
        5,
        &[block(1, i32::MIN), block(2, i32::MAX)],
        "",
    );
    let RtcpPacket::ReceiverReport { reports, .. } = &parse_compound(&out).unwrap()[0] else {
        panic!()
    };
    assert_eq!(reports[0].cumulative_lost, -0x80_0000);
    assert_eq!(reports[1].cumulative_lost, 0x7F_FFFF);
}

#[test]
fn a_long_cname_is_cut_at_a_char_boundary() {
    let mut out = Vec::new();
    write_report(&mut out, None, 5, &[], &"é".repeat(200));
    assert_eq!(
        out[8 + 9],
        254,
        "the CNAME length after RR, SDES header, SSRC, type"
    );
    assert_eq!(out.len() % 4, 0);
    assert_eq!(parse_compound(&out).unwrap().len(), 2);
}

#[test]
fn bye_and_unknown_packets_parse() {
    let buf = [
        0x82, 203, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, // BYE from 1 and 2
        0x80, 204, 0, 1, 1, 2, 3, 4, // APP
    ];
    assert_eq!(
        parse_compound(&buf).unwrap(),
        vec![
            RtcpPacket::Bye { ssrcs: vec![1, 2] },
            RtcpPacket::Other { packet_type: 204 }
        ]
    );
}

#[test]
fn malformed_lengths_are_refused() {
    let mut good = Vec::new();
    write_report(&mut good, None, 5, &[block(1, 0)], "x");
    assert_eq!(parse_compound(&[]), Err(RtcpError::TooShort { len: 0 }));
    let mut trailing = good.clone();
    trailing.extend([0x80, 201]);
    assert_eq!(
        parse_compound(&trailing),
        Err(RtcpError::TooShort { len: 2 })
    );
    let mut long = good.clone();
    long[3] = 200;
    let err = parse_compound(&long).unwrap_err();
    assert_eq!(
        err,
        RtcpError::LengthOverrun {
            packet_type: RR,
            length: 804,
            available: good.len()
        }
    );
    assert_eq!(
        err.to_string(),
        "RTCP packet type 201 claims 804 bytes, 44 left"
    );
    let mut counted = good.clone();
    counted[0] = 0x82; // two blocks in a packet holding one
    assert_eq!(
        parse_compound(&counted),
        Err(RtcpError::CountOverrun {
            packet_type: RR,
            count: 2
        })
    );
    let mut version = good.clone();
    version[0] = 0x41;
    assert_eq!(parse_compound(&version), Err(RtcpError::BadVersion(1)));
    let bye = [0x83, 203, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2];
    assert!(matches!(
        parse_compound(&bye),
        Err(RtcpError::CountOverrun { .. })
    ));
}

#[test]
fn padding_is_checked_and_stripped() {
    // An RR with no blocks and 4 bytes of padding.
    let mut rr = vec![0xA0, 201, 0, 2, 0, 0, 0, 9, 0, 0, 0, 4];
    assert_eq!(
        parse_compound(&rr).unwrap(),
        vec![RtcpPacket::ReceiverReport {
            ssrc: 9,
            reports: vec![]
        }]
    );
    rr[11] = 9; // more than the body
    assert_eq!(
        parse_compound(&rr),
        Err(RtcpError::BadPadding { packet_type: RR })
    );
    rr[11] = 0;
    assert_eq!(
        parse_compound(&rr),
        Err(RtcpError::BadPadding { packet_type: RR })
    );
    rr[11] = 5; // eats into the SSRC
    assert!(matches!(
        parse_compound(&rr),
        Err(RtcpError::CountOverrun { .. })
    ));
}

#[test]
fn ntp_time_counts_from_1900() {
    assert_eq!(ntp_from(UNIX_EPOCH), NTP_UNIX_OFFSET << 32);
    let half = UNIX_EPOCH + Duration::from_millis(1_500);
    assert_eq!(ntp_from(half), (NTP_UNIX_OFFSET + 1) << 32 | 0x8000_0000);
    assert_eq!(ntp_middle(0x1122_3344_5566_7788), 0x3344_5566);
}

/// RFC 3550 section 6.4.1's worked example: A = 0xb710:8000, LSR =
/// 0xb705:2000, DLSR = 0x0005:4000, so the round trip is 6.125 s.
#[test]
fn round_trip_follows_the_rfc_example() {
    let b = block(1, 0);
    let arrival = 0x0000_B710_8000_0000;
    assert_eq!(round_trip(&b, arrival), Some(Duration::from_millis(6_125)));
    assert_eq!(round_trip(&b, 0x0000_B705_2000_0000), None, "negative");
    assert_eq!(round_trip(&ReportBlock { last_sr: 0, ..b }, arrival), None);
}

/// Why the walk, the padding and count checks and the BYE source list
/// stay ours (the module docs say so): datagrams on which `rtcp-types`'
/// own checks and ours part. Should the crate change its mind, this test
/// says which part could move to it.
#[test]
fn where_the_crates_checks_part_from_ours() {
    use rtcp_types::{Bye, Compound, ReceiverReport, RtcpParseError};
    let rr_9 = RtcpPacket::ReceiverReport {
        ssrc: 9,
        reports: vec![],
    };
    let crate_refuses_a_packet = |buf: &[u8]| match Compound::parse(buf) {
        Err(_) => true,
        Ok(packets) => packets.into_iter().any(|p| p.is_err()),
    };

    // Padding on the first of two packets: ours accepts it, the crate's
    // compound walk refuses it.
    #[rustfmt::skip]
    let padded_first = [
        0xA0, 201, 0, 2, 0, 0, 0, 9, 0, 0, 0, 4, // RR, 4 bytes of padding
        0x81, 202, 0, 2, 0, 0, 0, 9, 1, 0, 0, 0, // SDES, empty CNAME
    ];
    assert_eq!(
        parse_compound(&padded_first),
        Ok(vec![rr_9.clone(), RtcpPacket::Sdes])
    );
    assert_eq!(
        Compound::parse(&padded_first).map(|_| ()),
        Err(RtcpParseError::InvalidPadding)
    );

    // An SDES item or an APP packet cut short: packets we never read, so
    // the SR or RR beside them still counts; the crate refuses them.
    #[rustfmt::skip]
    let odd_sdes = [
        0x80, 201, 0, 1, 0, 0, 0, 9,
        0x81, 202, 0, 2, 0, 0, 0, 9, 1, 200, 0, 0, // CNAME of 200 bytes in 2
    ];
    assert_eq!(
        parse_compound(&odd_sdes),
        Ok(vec![rr_9.clone(), RtcpPacket::Sdes])
    );
    assert!(crate_refuses_a_packet(&odd_sdes));
    let short_app = [0x80, 201, 0, 1, 0, 0, 0, 9, 0x80, 204, 0, 1, 0, 0, 0, 9];
    assert_eq!(
        parse_compound(&short_app),
        Ok(vec![rr_9.clone(), RtcpPacket::Other { packet_type: 204 }])
    );
    assert!(crate_refuses_a_packet(&short_app));

    // A BYE whose reason runs past the packet: we read its sources, the
    // crate refuses it.
    let long_reason = [0x81, 203, 0, 2, 0, 0, 0, 1, 10, b'x', b'y', b'z'];
    assert_eq!(
        parse_compound(&long_reason),
        Ok(vec![RtcpPacket::Bye { ssrcs: vec![1] }])
    );
    assert!(Bye::parse(&long_reason).is_err());

    // Padding longer than the body, and padding inside the one report
    // block the count promises: the crate's RR parser takes both (the
    // second with the padding bytes as the block's last word).
    let over_padded = [0xA0, 201, 0, 2, 0, 0, 0, 9, 0, 0, 0, 9];
    assert_eq!(
        parse_compound(&over_padded),
        Err(RtcpError::BadPadding { packet_type: RR })
    );
    assert!(ReceiverReport::parse(&over_padded).is_ok());
    let mut padded_block = vec![0xA1, 201, 0, 7, 0, 0, 0, 9];
    padded_block.extend([0; 20]);
    padded_block.extend([0, 0, 0, 4]);
    assert_eq!(
        parse_compound(&padded_block),
        Err(RtcpError::CountOverrun {
            packet_type: RR,
            count: 1
        })
    );
    let rr = ReceiverReport::parse(&padded_block).expect("the crate accepts it");
    assert_eq!(rr.report_blocks().count(), 1);
}
