#!/bin/sh
# Regenerates the caller audio and DTMF captures that the sipp scenarios in
# tests/sip/ play. Needs espeak-ng, sox and text2pcap (wireshark-common).
#
#   tests/sip/audio/make.sh        # writes next to this script
#
# Every speech file is exactly UTTERANCE_S seconds of headerless 8 kHz mono
# G.711 (sipp's rtp_stream sends the file's bytes as they are, 160 per
# 20 ms packet: a RIFF header would be played as noise), so the scenarios
# can pause for a fixed time while it plays. Output is deterministic: no
# dither (-D), and text2pcap is given fixed times.
set -eu

cd "$(dirname "$0")"

UTTERANCE_S=6        # file length; the scenarios pause 6000 ms per utterance
LEAD_S=1.5           # silence before the speech
MIN_TAIL_S=1.5       # at least this much silence after it

speak() { # name text
    name=$1
    text=$2
    espeak-ng -v en-us -s 150 -w "$name.tmp.wav" "$text"
    speech=$(sox "$name.tmp.wav" -n stat 2>&1 | awk '/^Length/ {print $3}')
    if ! awk -v s="$speech" -v l="$LEAD_S" -v t="$MIN_TAIL_S" -v u="$UTTERANCE_S" \
        'BEGIN { exit !(s + l + t <= u) }'; then
        echo "$name: ${speech}s of speech does not fit in ${UTTERANCE_S}s" >&2
        exit 1
    fi
    for enc in mu-law:ulaw a-law:alaw; do
        # gain -n -3: peak at -3 dBFS; pad, then trim to the exact length.
        sox -V1 -D "$name.tmp.wav" -t raw -r 8000 -c 1 -e "${enc%%:*}" "$name.${enc##*:}" \
            gain -n -3 rate 8000 pad "$LEAD_S" "$UTTERANCE_S" trim 0 "$UTTERANCE_S"
    done
    rm -f "$name.tmp.wav"
}

speak book_table "I would like to book a table for two"
speak seven_oclock "Yes, seven o'clock please"

# One second of digital silence, looped by the scenarios between utterances.
for enc in mu-law:ulaw a-law:alaw; do
    sox -D -n -t raw -r 8000 -c 1 -e "${enc%%:*}" "silence.${enc##*:}" trim 0 1
done

# RFC 4733 telephone-events, payload type 101 (what the scenarios offer),
# one RTP stream (SSRC 0x4d544631), as a pcap for sipp's play_pcap_audio.
# Each digit: 8 packets 20 ms apart with growing duration (160..1280
# samples, marker on the first), then the end packet (E bit) three times,
# also 20 ms apart; 100 ms of nothing between digits. Ports/addresses are placeholders: sipp rewrites them.
dtmf_pcap() { # name digits...
    name=$1
    shift
    seq=1000
    ms=0
    {
        for d in "$@"; do
            case $d in
                '*') ev=10 ;;
                '#') ev=11 ;;
                *) ev=$d ;;
            esac
            ts=$((16000 + ms * 8)) # one timestamp per event: its start
            for i in 1 2 3 4 5 6 7 8 9 10 11; do
                if [ "$i" -le 8 ]; then dur=$((i * 160)); flags=10; else dur=1280; flags=138; fi
                if [ "$i" -eq 1 ]; then mpt=229; else mpt=101; fi
                printf '0:00:%02d.%06d %02x%02x%04x%08x%08x%02x%02x%04x\n' \
                    $((ms / 1000)) $(((ms % 1000) * 1000)) 128 "$mpt" "$seq" "$ts" 1297368625 \
                    "$ev" "$flags" "$dur"
                seq=$((seq + 1))
                ms=$((ms + 20))
            done
            ms=$((ms + 100))
        done
    } >"$name.tmp.txt"
    # (text2pcap's regex mode cannot read a pipe)
    text2pcap -q -F pcap -r '^(?<time>\d+:\d\d:\d\d\.\d+) (?<data>[0-9a-f]+)$' \
        -t '%H:%M:%S.%f' -4 10.0.0.1,10.0.0.2 -u 40000,40002 "$name.tmp.txt" "$name.pcap"
    rm -f "$name.tmp.txt"
}

dtmf_pcap dtmf_5 5
dtmf_pcap dtmf_123pound 1 2 3 '#'

ls -l
