use super::twiml::*;
use super::*;

#[test]
fn the_connect_answer_streams_with_the_call_id_then_goes_onward() {
    let id: CallId = "7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77".parse().unwrap();
    let t = connect("wss://v.example.com/v1/media-stream", id, Some("+15550100"));
    assert_eq!(
        t,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Connect><Stream \
         url=\"wss://v.example.com/v1/media-stream\"><Parameter name=\"callgate_call_id\" \
         value=\"7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77\"/></Stream></Connect>\
         <Dial><Number>+15550100</Number></Dial></Response>"
    );
    assert!(connect("wss://h/x", id, None).ends_with("</Connect><Hangup/></Response>"));
}

#[test]
fn the_refusal_plays_the_prompt_then_dials_and_everything_is_escaped() {
    let t = refuse("https://h/p.wav?a=1&b=2", Some("sip:queue@pbx.example.com"));
    assert!(
        t.contains("<Play>https://h/p.wav?a=1&amp;b=2</Play>"),
        "{t}"
    );
    assert!(
        t.ends_with("<Dial><Sip>sip:queue@pbx.example.com</Sip></Dial></Response>"),
        "{t}"
    );
    assert_eq!(
        escape("<a href=\"x\">&'"),
        "&lt;a href=&quot;x&quot;&gt;&amp;&apos;"
    );
}

#[test]
fn the_form_is_decoded_and_call_sids_are_bounded() {
    let f = form(b"CallSid=CA0123&From=%2B15551234&Caller=a+b&Empty=").unwrap();
    assert_eq!(
        f,
        [
            ("CallSid".into(), "CA0123".into()),
            ("From".into(), "+15551234".into()),
            ("Caller".into(), "a b".into()),
            ("Empty".into(), String::new()),
        ]
    );
    assert!(form(b"a=%zz").is_none());
    assert!(form(b"a=%ff").is_none());
    assert!(is_call_sid("CA5c1a8f2f3e0c4b2d9a1b7e6f5d4c3b2a"));
    for bad in ["", "C", "CA-1", "CA 1", &"C".repeat(65)] {
        assert!(!is_call_sid(bad), "{bad:?}");
    }
}

#[test]
fn the_prompt_wav_is_mulaw_8k_mono_with_its_sizes_right() {
    let w = mulaw_wav(&[0xff; 1600]);
    assert_eq!(&w[0..4], b"RIFF");
    assert_eq!(
        u32::from_le_bytes(w[4..8].try_into().unwrap()) as usize,
        w.len() - 8
    );
    assert_eq!(&w[8..16], b"WAVEfmt ");
    assert_eq!(u16::from_le_bytes([w[20], w[21]]), 7, "μ-law");
    assert_eq!(u32::from_le_bytes(w[24..28].try_into().unwrap()), 8_000);
    assert_eq!(&w[38..42], b"fact");
    assert_eq!(&w[50..54], b"data");
    assert_eq!(u32::from_le_bytes(w[54..58].try_into().unwrap()), 1_600);
    assert_eq!(w.len(), 58 + 1_600);
}
