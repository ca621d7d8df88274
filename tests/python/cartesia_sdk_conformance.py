"""Drives callgate's Cartesia simulator with the official `cartesia` SDK.

Every check uses the SDK as its README shows it, with the SDK's defaults
(its `cartesia-version`, `Authorization: Bearer`, model `sonic-latest`,
`pcm_f32le` at 44.1 kHz, the bare voice id `no_more_inputs()` sends):
nothing is adjusted to suit the simulator. Every message the simulator
sends is validated strictly against the SDK's own response models (the
SDK itself parses them unchecked), so a field of the wrong type or a
missing required one fails here.

Usage: cartesia_sdk_conformance.py --url ws://127.0.0.1:PORT --key KEY

The simulator must hold the key, the SDK README's voice, and a cap of two
concurrent contexts. Exit status 0 when every check passed; the last line
of stdout is a JSON summary the Rust test reads.
"""

import argparse
import asyncio
import json
import sys
import time

from cartesia import AsyncCartesia, Cartesia
from cartesia.types import websocket_response as wr
from websockets.exceptions import InvalidStatus

VOICE = "6ccbfb76-1fc6-48f7-b71d-91ac6298247b"  # the SDK README's voice
MODELS = {
    "chunk": wr.Chunk,
    "flush_done": wr.FlushDone,
    "done": wr.Done,
    "timestamps": wr.Timestamps,
    "phoneme_timestamps": wr.PhonemeTimestamps,
    "error": wr.Error,
}
CHARS_PER_SECOND = 15.0  # the simulator's default speaking rate
F32_BYTES = 4
SAMPLE_RATE = 44_100  # the SDK's default output format


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


def strict(raw_log):
    """A `parse_event` that validates against the SDK's models."""

    def parse(data):
        doc = json.loads(data)
        raw_log.append(doc)
        model = MODELS.get(doc.get("type"))
        expect(model is not None, f"unknown message type: {doc}")
        return model.model_validate(doc, strict=False)

    return parse


def connect(client, raw_log):
    conn = client.tts.websocket_connect().enter()
    conn.parse_event = strict(raw_log)
    return conn


def receive_all(ctx):
    return list(ctx.receive())


def audio_seconds(events):
    data = b"".join(e.audio or b"" for e in events if e.type == "chunk")
    return len(data) / F32_BYTES / SAMPLE_RATE


def check_readme_stream(client, log):
    conn = connect(client, log)
    text = ["The road ", "goes ever ", "on and ", "on."]
    ctx = conn.context(voice=VOICE, language="en")
    for part in text:
        ctx.push(part)
    ctx.no_more_inputs()
    events = receive_all(ctx)
    conn.close()
    kinds = [e.type for e in events]
    expect(kinds[-1] == "done" and kinds.count("done") == 1, f"one done, last: {kinds}")
    expect(kinds.count("chunk") >= 2, f"audio in chunks: {kinds}")
    expect(all(e.context_id == ctx._context_id for e in events), "every event names the context")
    want = len("".join(text)) / CHARS_PER_SECOND
    got = audio_seconds(events)
    expect(abs(got - want) <= want * 0.1, f"{got:.2f} s of audio for {want:.2f} s of text")
    return {"audio_s": round(got, 3), "chunks": kinds.count("chunk")}


def check_timestamps(client, log):
    conn = connect(client, log)
    ctx = conn.context(voice=VOICE, add_timestamps=True, add_phoneme_timestamps=True)
    ctx.push("Table for two at eight.")
    ctx.no_more_inputs()
    events = receive_all(ctx)
    conn.close()
    words = [w for e in events if e.type == "timestamps" for w in e.word_timestamps.words]
    expect(words == ["Table", "for", "two", "at", "eight."], f"words: {words}")
    starts = [s for e in events if e.type == "timestamps" for s in e.word_timestamps.start]
    expect(all(a < b for a, b in zip(starts, starts[1:])), f"word starts rise: {starts}")
    phonemes = [e.phoneme_timestamps for e in events if e.type == "phoneme_timestamps"]
    expect(phonemes, "phoneme timestamps were asked for")
    ends = [t for p in phonemes for t in p.end]
    expect(all(a <= b for a, b in zip(ends, ends[1:])), f"phoneme ends rise: {ends}")
    expect(all(len(p.phonemes) == len(p.start) == len(p.end) for p in phonemes), "aligned lists")
    return {"words": len(words), "phonemes": sum(len(p.phonemes) for p in phonemes)}


def check_flush(client, log):
    conn = connect(client, log)
    ctx = conn.context(voice=VOICE)
    ctx.push("Hello there, ", flush=True)
    ctx.push("and welcome back.", flush=True)
    ctx.no_more_inputs()
    events = receive_all(ctx)
    conn.close()
    flushes = [e.flush_id for e in events if e.type == "flush_done"]
    expect(flushes == [1, 2], f"flush ids: {flushes}")
    chunk_ids = {e.flush_id for e in events if e.type == "chunk"}
    expect(chunk_ids == {1, 2}, f"chunks carry their flush id: {chunk_ids}")
    return {"flush_ids": flushes}


def check_cancel(client, log):
    conn = connect(client, log)
    long = conn.context(voice=VOICE)
    long.push("This is a long answer that the caller interrupts after its first words. " * 3,
              flush=True)
    first = next(iter(long.receive()))
    expect(first.type == "chunk", f"audio before the cancel: {first}")
    long.cancel()
    time.sleep(0.3)
    after = conn.context(voice=VOICE)
    after.push("Yes?")
    after.no_more_inputs()
    events = receive_all(after)
    conn.close()
    stray = [e for e in events if e.context_id == long._context_id]
    expect(not any(e.type == "done" for e in stray), "a cancelled context gets no done")
    expect(len(stray) <= 2, f"audio stops at the cancel: {len(stray)} late messages")
    expect(events[-1].type == "done" and events[-1].context_id == after._context_id,
           "the next context is served")
    return {"late_messages": len(stray)}


def refused(client, log, **ctx_args):
    conn = connect(client, log)
    ctx = conn.context(timeout=5, **ctx_args)
    ctx.push("Hello.")
    started = time.monotonic()
    events = receive_all(ctx)
    waited = time.monotonic() - started
    conn.close()
    expect(len(events) == 1 and events[0].type == "error", f"one error: {events}")
    err = events[0]
    expect(err.context_id == ctx._context_id, f"the error names its context: {err}")
    expect(err.done and err.title and err.message and err.request_id, f"structured: {err}")
    expect(waited < 2.0, f"receive() ended on the error, after {waited:.2f} s")
    return err


def check_bad_model(client, log):
    err = refused(client, log, voice=VOICE, model_id="eleven_flash_v2_5")
    expect(err.error_code == "model_not_found" and err.status_code == 400, f"{err}")
    return {"error_code": err.error_code}


def check_unknown_voice(client, log):
    err = refused(client, log, voice="00000000-0000-4000-8000-000000000000")
    expect(err.error_code == "voice_not_found" and err.status_code == 404, f"{err}")
    return {"error_code": err.error_code}


def check_concurrency(client, log):
    conn = connect(client, log)
    held = [conn.context(voice=VOICE) for _ in range(2)]
    for ctx in held:
        ctx.push("Still thinking,")  # continued: the context stays open
    over = conn.context(voice=VOICE, timeout=5)
    over.push("One too many.")
    events = receive_all(over)
    for ctx in held:
        ctx.cancel()
    conn.close()
    err = events[-1]
    expect(err.type == "error" and err.status_code == 429, f"a 429: {events}")
    expect(err.error_code == "concurrency_limited" and err.context_id == over._context_id, f"{err}")
    return {"error_code": err.error_code}


def check_wrong_key(url, _log):
    client = Cartesia(api_key="sk_car_wrong", websocket_base_url=url)
    try:
        client.tts.websocket_connect().enter()
    except InvalidStatus as e:
        status = e.response.status_code
        body = json.loads(e.response.body or b"{}")
        expect(status == 401 and body.get("error_code"), f"401 with an error object: {status} {body}")
        return {"status": status, "error_code": body["error_code"]}
    raise Failed("a wrong key was accepted")


def check_async(url, key, log):
    async def run():
        client = AsyncCartesia(api_key=key, websocket_base_url=url)
        async with client.tts.websocket_connect() as conn:
            conn.parse_event = strict(log)
            ctx = conn.context(voice=VOICE)
            await ctx.push("Async works too.")
            await ctx.no_more_inputs()
            return [e async for e in ctx.receive()]

    events = asyncio.run(asyncio.wait_for(run(), 20))
    expect(events[-1].type == "done", f"async stream ends with done: {[e.type for e in events]}")
    return {"audio_s": round(audio_seconds(events), 3)}


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--url", required=True)
    args.add_argument("--key", required=True)
    opts = args.parse_args()
    client = Cartesia(api_key=opts.key, websocket_base_url=opts.url)
    checks = {
        "readme_stream": lambda log: check_readme_stream(client, log),
        "timestamps": lambda log: check_timestamps(client, log),
        "flush": lambda log: check_flush(client, log),
        "cancel": lambda log: check_cancel(client, log),
        "bad_model": lambda log: check_bad_model(client, log),
        "unknown_voice": lambda log: check_unknown_voice(client, log),
        "concurrency": lambda log: check_concurrency(client, log),
        "wrong_key": lambda log: check_wrong_key(opts.url, log),
        "async": lambda log: check_async(opts.url, opts.key, log),
    }
    results, failed = {}, []
    for name, check in checks.items():
        log = []
        try:
            results[name] = check(log)
            print(f"ok   {name}: {results[name]}")
        except Exception as e:  # a failed check, or the SDK refusing a message
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            for doc in log[-5:]:
                print(f"     last messages: {json.dumps(doc)[:300]}")
    print(json.dumps({"passed": sorted(results), "failed": failed, "results": results}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
