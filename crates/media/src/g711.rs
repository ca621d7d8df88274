//! ITU-T G.711 μ-law and A-law, as in the public-domain Sun reference code.
//!
//! Every byte is a valid code word, so decoding never fails; encoding clips.

const ULAW_BIAS: i32 = 0x84;
const ULAW_CLIP: i32 = 32_635;

/// Silence in μ-law (the code word for linear 0).
pub const ULAW_SILENCE: u8 = 0xFF;
/// Silence in A-law (the code word for linear +8, the smallest magnitude).
pub const ALAW_SILENCE: u8 = 0xD5;

/// Encodes one linear sample as μ-law.
pub fn linear_to_ulaw(sample: i16) -> u8 {
    let mut pcm = i32::from(sample);
    let sign = if pcm < 0 {
        pcm = -pcm;
        0x80
    } else {
        0
    };
    pcm = pcm.min(ULAW_CLIP) + ULAW_BIAS;
    // pcm >> 7 is in 1..=255; the segment is the position of its top bit.
    let exponent = 31 - ((pcm >> 7) as u32).leading_zeros() as i32;
    let mantissa = (pcm >> (exponent + 3)) & 0x0F;
    !((sign | (exponent << 4) | mantissa) as u8)
}

/// Decodes one μ-law code word.
pub fn ulaw_to_linear(code: u8) -> i16 {
    let u = !code;
    let exponent = i32::from((u >> 4) & 0x07);
    let mantissa = i32::from(u & 0x0F);
    let magnitude = (((mantissa << 3) + ULAW_BIAS) << exponent) - ULAW_BIAS;
    if u & 0x80 != 0 {
        -magnitude as i16
    } else {
        magnitude as i16
    }
}

/// Encodes one linear sample as A-law.
pub fn linear_to_alaw(sample: i16) -> u8 {
    let mut pcm = i32::from(sample) >> 3;
    let mask: i32 = if pcm >= 0 {
        0xD5
    } else {
        pcm = -pcm - 1;
        0x55
    };
    // Segment end points of the 13-bit magnitude.
    const SEG_END: [i32; 8] = [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF];
    let Some(seg) = SEG_END.iter().position(|&end| pcm <= end) else {
        return (0x7F ^ mask) as u8;
    };
    let shift = if seg < 2 { 1 } else { seg as i32 };
    let aval = ((seg as i32) << 4) | ((pcm >> shift) & 0x0F);
    (aval ^ mask) as u8
}

/// Decodes one A-law code word.
pub fn alaw_to_linear(code: u8) -> i16 {
    let a = code ^ 0x55;
    let mut t = i32::from(a & 0x0F) << 4;
    let seg = i32::from((a & 0x70) >> 4);
    match seg {
        0 => t += 8,
        1 => t += 0x108,
        _ => t = (t + 0x108) << (seg - 1),
    }
    if a & 0x80 != 0 { t as i16 } else { -t as i16 }
}

/// Decodes a μ-law buffer.
pub fn decode_ulaw(codes: &[u8]) -> Vec<i16> {
    codes.iter().map(|&c| ulaw_to_linear(c)).collect()
}

/// Encodes a buffer as μ-law.
pub fn encode_ulaw(samples: &[i16]) -> Vec<u8> {
    samples.iter().map(|&s| linear_to_ulaw(s)).collect()
}

/// Decodes an A-law buffer.
pub fn decode_alaw(codes: &[u8]) -> Vec<i16> {
    codes.iter().map(|&c| alaw_to_linear(c)).collect()
}

/// Encodes a buffer as A-law.
pub fn encode_alaw(samples: &[i16]) -> Vec<u8> {
    samples.iter().map(|&s| linear_to_alaw(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulaw_reference_points() {
        assert_eq!(ulaw_to_linear(0xFF), 0);
        assert_eq!(ulaw_to_linear(0x7F), 0);
        assert_eq!(ulaw_to_linear(0x80), 32_124);
        assert_eq!(ulaw_to_linear(0x00), -32_124);
        assert_eq!(linear_to_ulaw(0), 0xFF);
        assert_eq!(linear_to_ulaw(i16::MAX), 0x80);
        assert_eq!(linear_to_ulaw(i16::MIN), 0x00);
    }

    #[test]
    fn alaw_reference_points() {
        assert_eq!(alaw_to_linear(0xD5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xAA), 32_256);
        assert_eq!(alaw_to_linear(0x2A), -32_256);
        assert_eq!(linear_to_alaw(0), 0xD5);
    }

    #[test]
    fn every_code_word_round_trips() {
        for code in 0..=255u8 {
            let lin = ulaw_to_linear(code);
            assert_eq!(ulaw_to_linear(linear_to_ulaw(lin)), lin, "ulaw {code:#x}");
            let lin = alaw_to_linear(code);
            assert_eq!(alaw_to_linear(linear_to_alaw(lin)), lin, "alaw {code:#x}");
        }
    }

    #[test]
    fn quantisation_error_is_bounded() {
        // G.711 keeps roughly 13-14 bits of precision: the error of a round
        // trip never exceeds one step of the segment the sample falls in.
        for s in (i16::MIN..=i16::MAX).step_by(7) {
            let e = (i32::from(ulaw_to_linear(linear_to_ulaw(s))) - i32::from(s)).abs();
            assert!(e <= 1024, "ulaw error {e} at {s}");
            let e = (i32::from(alaw_to_linear(linear_to_alaw(s))) - i32::from(s)).abs();
            assert!(e <= 1024, "alaw error {e} at {s}");
        }
    }
}
