#!/usr/bin/env python3
"""Regenerates the SIP torture corpus under tests/sip/torture/.

    python3 tests/sip/torture/make.py          # writes rfc4475/ and extra/

rfc4475/<name>.dat: the 49 test messages of RFC 4475 ("SIP Torture Test
Messages"), built from rfc4475.txt, which carries them in the RFC's own
notation (RFC 4475 section 2):

  * every line of a message ends in CRLF;
  * <allOneLine> ... </allOneLine>: the lines in between are one line
    (joined with nothing in between);
  * <hex>..</hex>: the octets with those hex values (non-printables, the
    UTF-8 in intmeth/unreason, the binary body of mpart01, and trailing
    spaces, which text editors would eat).

extra/<name>.dat: malformed input the RFC does not cover (see INDEX.md).

Output is deterministic; the random-bytes case uses a fixed seed. The sizes
and SHA-256 of every file are printed and listed in INDEX.md.
"""

import hashlib
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRLF = b"\r\n"
TOKEN = re.compile(r"<hex>([0-9A-Fa-f\s]*)</hex>")


def decode_line(text):
    """One source line (after <allOneLine> joining) to its octets."""
    out = bytearray()
    pos = 0
    for m in TOKEN.finditer(text):
        out += text[pos:m.start()].encode("ascii")
        out += bytes.fromhex("".join(m.group(1).split()))
        pos = m.end()
    out += text[pos:].encode("ascii")
    return bytes(out)


def parse(path):
    """rfc4475.txt: `--- begin NAME SECTION TITLE` ... `--- end NAME`."""
    messages = []
    current = None
    joined = None
    with open(path, encoding="ascii") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if current is None:
                if line.startswith("--- begin "):
                    name, section, title = line[len("--- begin "):].split(" ", 2)
                    current = (name, section, title, [])
                continue
            if line == "--- end " + current[0]:
                if joined is not None:
                    sys.exit(f"{current[0]}: <allOneLine> not closed")
                messages.append(current)
                current = None
            elif line == "<allOneLine>":
                joined = ""
            elif line == "</allOneLine>":
                current[3].append(joined)
                joined = None
            elif joined is not None:
                joined += line
            else:
                current[3].append(line)
    if current is not None:
        sys.exit(f"{current[0]}: no end marker")
    return messages


def invite(content_length, body=b"", extra_headers=b""):
    """A well-formed INVITE whose Content-Length header says what we tell it."""
    return (
        b"INVITE sip:bot@127.0.0.1 SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-torture-1\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: <sip:caller@127.0.0.1>;tag=torture\r\n"
        b"To: <sip:bot@127.0.0.1>\r\n"
        b"Call-ID: torture-extra@127.0.0.1\r\n"
        b"CSeq: 1 INVITE\r\n"
        b"Contact: <sip:caller@127.0.0.1:5070>\r\n"
        + extra_headers
        + b"Content-Type: application/sdp\r\n"
        b"Content-Length: " + content_length + b"\r\n"
        b"\r\n" + body
    )


SDP = (
    b"v=0\r\n"
    b"o=caller 1 1 IN IP4 127.0.0.1\r\n"
    b"s=-\r\n"
    b"c=IN IP4 127.0.0.1\r\n"
    b"t=0 0\r\n"
    b"m=audio 40000 RTP/AVP 0\r\n"
    b"a=rtpmap:0 PCMU/8000\r\n"
)


def extras():
    whole = invite(str(len(SDP)).encode(), SDP)
    cut = whole.index(b"Call-ID:") + len(b"Call-ID: tort")
    big_header = b"X-Padding: " + b"a" * (70 * 1024) + b"\r\n"
    # The largest IPv4 UDP payload is 65507 octets: this one fits in a
    # datagram, the 70 KiB one only in a stream.
    udp_header = b"X-Padding: " + b"a" * (65000 - len(invite(b"000", SDP)) - 13) + b"\r\n"
    rng = random.Random(4475)
    return [
        ("truncated", whole[:cut]),
        ("cl_larger", invite(str(len(SDP) + 100).encode(), SDP)),
        ("cl_smaller", invite(str(len(SDP) - 40).encode(), SDP)),
        ("cl_nonnumeric", invite(b"five", SDP)),
        ("oversized_header", invite(str(len(SDP)).encode(), SDP, big_header)),
        ("oversized_udp", invite(str(len(SDP)).encode(), SDP, udp_header)),
        ("random_binary", bytes(rng.randrange(256) for _ in range(512))),
        ("empty", b""),
        ("response_no_via", (
            b"SIP/2.0 200 OK\r\n"
            b"From: <sip:caller@127.0.0.1>;tag=torture\r\n"
            b"To: <sip:bot@127.0.0.1>;tag=x\r\n"
            b"Call-ID: torture-noVia@127.0.0.1\r\n"
            b"CSeq: 1 INVITE\r\n"
            b"Content-Length: 0\r\n"
            b"\r\n")),
    ]


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name + ".dat"), "wb") as f:
        f.write(data)
    digest = hashlib.sha256(data).hexdigest()
    print(f"{os.path.basename(directory)}/{name}.dat {len(data)} {digest}")


def main():
    messages = parse(os.path.join(HERE, "rfc4475.txt"))
    if len(messages) != 49:
        sys.exit(f"expected the RFC's 49 messages, found {len(messages)}")
    for name, _section, _title, lines in messages:
        write(os.path.join(HERE, "rfc4475"), name,
              b"".join(decode_line(line) + CRLF for line in lines))
    for name, data in extras():
        write(os.path.join(HERE, "extra"), name, data)


if __name__ == "__main__":
    main()
