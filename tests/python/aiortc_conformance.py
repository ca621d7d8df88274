"""An outside WebRTC stack against callgate: aiortc (pinned in
requirements.txt; the stack Pipecat's SmallWebRTC transport is built on),
written from docs/webrtc.md alone. It places a call the documented way
(POST the offer, apply the answer, poll the session URL) and does one
scenario; tests/tests/e2e/webrtc_aiortc.rs runs it and checks the ledger.

Each line on stdout is one JSON event: {"event": ..., "ms": <since start>,
...}. Scenarios:

  call     speak the WAV (silence after it), hear the bot, hang up with
           DELETE once the call has lasted --talk-s seconds
  vanish   connect, hear the greeting, print "ready" and wait to be killed
           (the test's SIGKILL is the vanish: nothing more is sent)
  close    connect, hear the greeting, pc.close() without DELETE (DTLS
           close_notify and RTCP BYE), then read the status until it ends
  refusal  one call admitted, a second offer POSTed: print its refusal,
           then hang the first up
  no-ice   POST an offer and never apply the answer (no ICE check is ever
           sent), then read the status until the call ends
"""

import argparse
import asyncio
import json
import math
import sys
import time
import wave
from array import array
from fractions import Fraction

import httpx
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack, MediaStreamError
from av import AudioFrame

START = time.monotonic()
PTIME = 0.020
# A received 20 ms frame louder than this (dBFS) is the bot speaking.
LOUD_DBFS = -45.0


def emit(event, **fields):
    print(json.dumps({"event": event, "ms": round((time.monotonic() - START) * 1000), **fields}),
          flush=True)


class WavThenSilence(AudioStreamTrack):
    """The WAV's samples (mono s16), paced in real time, then silence for
    as long as the call lasts: a caller who keeps the line open."""

    def __init__(self, path):
        super().__init__()
        if path:
            with wave.open(path, "rb") as w:
                assert w.getnchannels() == 1 and w.getsampwidth() == 2, "mono s16 WAV"
                self.rate = w.getframerate()
                self.pcm = w.readframes(w.getnframes())
        else:
            self.rate, self.pcm = 16000, b""
        self.samples = int(self.rate * PTIME)
        self.sent = 0
        self.t0 = None

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        if self.t0 is None:
            self.t0 = time.monotonic()
        else:
            due = self.t0 + self.sent / self.rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        n = self.samples * 2
        chunk = self.pcm[self.sent * 2:self.sent * 2 + n]
        chunk += bytes(n - len(chunk))
        frame = AudioFrame(format="s16", layout="mono", samples=self.samples)
        frame.planes[0].update(chunk)
        frame.pts = self.sent
        frame.sample_rate = self.rate
        frame.time_base = Fraction(1, self.rate)
        self.sent += self.samples
        return frame


def dbfs(frame):
    """RMS of a decoded frame (packed s16, as aiortc's Opus decoder gives)."""
    assert frame.format.name == "s16", frame.format.name
    n = frame.samples * len(frame.layout.channels)
    pcm = array("h", bytes(frame.planes[0])[:n * 2])
    power = sum(x * x for x in pcm) / (len(pcm) * 32768.0 * 32768.0) if pcm else 0.0
    return 10 * math.log10(power) if power > 0 else -120.0


class Call:
    def __init__(self, base, key, wav):
        self.base = base
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(timeout=10.0)
        self.pc = RTCPeerConnection()
        self.pc.addTrack(WavThenSilence(wav))
        self.session = None
        self.loud_frames = 0
        self.greeting = asyncio.Event()
        self.connected = asyncio.Event()
        self.pc.on("track", self.on_track)
        self.pc.on("connectionstatechange", self.on_state)

    def on_state(self):
        emit("peer", state=self.pc.connectionState)
        if self.pc.connectionState == "connected":
            self.connected.set()

    def on_track(self, track):
        asyncio.ensure_future(self.listen(track))

    async def listen(self, track):
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if dbfs(frame) > LOUD_DBFS:
                self.loud_frames += 1
                if not self.greeting.is_set():
                    self.greeting.set()
                    emit("bot_heard")

    async def offer(self):
        await self.pc.setLocalDescription(await self.pc.createOffer())
        r = await self.http.post(f"{self.base}/v1/webrtc", content=self.pc.localDescription.sdp,
                                 headers={**self.headers, "Content-Type": "application/sdp"})
        return r

    async def dial(self):
        r = await self.offer()
        emit("posted", status=r.status_code)
        if r.status_code != 201:
            raise SystemExit(f"POST answered {r.status_code}: {r.text}")
        # The Location is used as it is, resolved against the POST's URL.
        self.session = str(httpx.URL(f"{self.base}/v1/webrtc").join(r.headers["location"]))
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=r.text, type="answer"))
        emit("answered", session=self.session, answer=r.text)

    async def status(self):
        r = await self.http.get(self.session, headers=self.headers)
        return r.status_code, (r.json() if r.status_code == 200 else {})

    async def until_ended(self, every_s, within_s):
        """Reads the status until the call is over; its last answer."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            code, s = await self.status()
            if code != 200 or s.get("state") in ("ended", "refused"):
                return code, s
            await asyncio.sleep(every_s)
        return None, {}

    async def greeted(self):
        await asyncio.wait_for(self.connected.wait(), 15)
        await asyncio.wait_for(self.greeting.wait(), 20)
        code, s = await self.status()
        emit("status", code=code, **s)

    async def hang_up(self):
        r = await self.http.delete(self.session, headers=self.headers)
        emit("deleted", status=r.status_code)
        await self.pc.close()


async def call(args):
    c = Call(args.base, args.key, args.wav)
    await c.dial()
    await c.greeted()
    await asyncio.sleep(args.talk_s)
    code, s = await c.status()
    emit("before_hangup", code=code, loud_frames=c.loud_frames, **s)
    await c.hang_up()


async def vanish(args):
    c = Call(args.base, args.key, None)
    await c.dial()
    await c.greeted()
    emit("ready")
    await asyncio.sleep(3600)


async def close(args):
    c = Call(args.base, args.key, None)
    await c.dial()
    await c.greeted()
    await c.pc.close()
    closed = time.monotonic()
    emit("closed")
    code, s = await c.until_ended(0.01, 10)
    emit("ended", code=code, after_ms=round((time.monotonic() - closed) * 1000), **s)


async def refusal(args):
    first = Call(args.base, args.key, None)
    await first.dial()
    await first.greeted()
    second = Call(args.base, args.key, None)
    r = await second.offer()
    emit("refused", status=r.status_code, retry_after=r.headers.get("retry-after"),
         body=r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text)
    await second.pc.close()
    await first.hang_up()


async def no_ice(args):
    c = Call(args.base, args.key, None)
    r = await c.offer()
    posted = time.monotonic()
    emit("posted", status=r.status_code)
    c.session = str(httpx.URL(f"{args.base}/v1/webrtc").join(r.headers["location"]))
    await c.pc.close()  # the answer is never applied: no check, no DTLS
    code, s = await c.until_ended(0.05, 30)
    emit("ended", code=code, after_ms=round((time.monotonic() - posted) * 1000), **s)


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True, help="http://host:port of callgate")
    p.add_argument("--scenario", required=True,
                   choices=["call", "vanish", "close", "refusal", "no-ice"])
    p.add_argument("--key", default=None, help="partner key (none on an open server)")
    p.add_argument("--wav", default=None, help="the caller's speech (mono s16 WAV)")
    p.add_argument("--talk-s", type=float, default=30.0)
    args = p.parse_args()
    run = {"call": call, "vanish": vanish, "close": close, "refusal": refusal,
           "no-ice": no_ice}[args.scenario]
    await run(args)
    emit("done")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except SystemExit:
        raise
    except BaseException as e:  # a failure is a line the test shows, and a non-zero exit
        emit("error", error=repr(e))
        sys.exit(1)
