#!/usr/bin/env python3
"""One push-to-talk member's media engine for the media test (PushToTalkMediaTests).

A real WebRTC stack (aiortc): one peer connection per other member, Opus audio only,
ICE restricted to relay candidates on the TURN server the test names (coturn, with
credentials from turn-cred). The test process does everything else: it holds the
member's identity, carries offers and answers through the gateway (ptt_signal), checks
floor grants, and tells this engine whose audio to play.

Commands arrive on stdin and events leave on stdout, one JSON object per line:

  {"op": "ice", "urls": [...], "username": "...", "credential": "..."}  -> {"ev": "ready"}
  {"op": "offer", "peer": P}                     -> {"ev": "offer", "peer": P, "sdp": ...}
  {"op": "answer", "peer": P, "sdp": OFFER}      -> {"ev": "answer", "peer": P, "sdp": ...}
  {"op": "accept", "peer": P, "sdp": ANSWER}     (no reply)
  {"op": "transmit", "frequency": HZ or null}    the microphone: a sine tone, or silence
  {"op": "play", "holder": P or null}            only this peer's audio is played
  {"op": "listen", "id": N, "ms": MS}            -> {"ev": "heard", "id": N, "played": {...},
                                                     "peers": {P: {...}}}
  {"op": "route", "peer": P}                     -> {"ev": "route", "peer": P, "offered":
                                                     [candidate types], "chosen": {"local": type,
                                                     "remote": type}, "codecs": [mime types]}

Events also report each connection's state ({"ev": "state", "peer": P, "state": ...})
and each arriving track ({"ev": "track", "peer": P, "kind": "audio"}). A heard figure is
{"frequency": dominant Hz, "level": RMS of full scale, "purity": the share of the
spectrum's energy within 25 Hz of the dominant frequency (near 1 for one tone, about
half for two equal ones), "seconds": audio analysed}.
Stdout carries nothing else; diagnostics go to stderr.
"""

import asyncio
import fractions
import json
import math
import sys
import time

import numpy
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCIceServer,
    RTCIceTransportPolicy,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.rtcrtpsender import RTCRtpSender
from av import AudioFrame

RATE = 48_000
FRAME_SAMPLES = 960  # 20 ms, Opus's usual packet
AMPLITUDE = 0.3 * 32_767


class Microphone:
    """What this member says: a tone at `frequency`, or silence when None."""

    def __init__(self):
        self.frequency = None


class ToneTrack(MediaStreamTrack):
    """The microphone as a WebRTC audio track, paced in real time (one per connection)."""

    kind = "audio"

    def __init__(self, microphone):
        super().__init__()
        self.microphone = microphone
        self.start = None
        self.sent = 0
        self.phase = 0.0

    async def recv(self):
        if self.start is None:
            self.start = time.time()
        else:
            due = self.start + self.sent / RATE
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
        frequency = self.microphone.frequency
        if frequency:
            step = 2 * math.pi * frequency / RATE
            phases = self.phase + step * numpy.arange(FRAME_SAMPLES)
            samples = (AMPLITUDE * numpy.sin(phases)).astype(numpy.int16)
            self.phase = float((self.phase + step * FRAME_SAMPLES) % (2 * math.pi))
        else:
            samples = numpy.zeros(FRAME_SAMPLES, dtype=numpy.int16)
        frame = AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self.sent
        frame.time_base = fractions.Fraction(1, RATE)
        self.sent += FRAME_SAMPLES
        return frame


def mono(frame):
    """A decoded frame's samples as floats in [-1, 1], channels averaged."""
    data = frame.to_ndarray().astype(numpy.float64) / 32_768
    channels = len(frame.layout.channels)
    if data.shape[0] == 1 and channels > 1:  # packed: samples interleaved in one plane
        data = data.reshape(-1, channels).T
    return data.mean(axis=0)


def analyse(chunks, rate):
    if not chunks:
        return {"frequency": 0.0, "level": 0.0, "purity": 0.0, "seconds": 0.0}
    samples = numpy.concatenate(chunks)
    level = float(numpy.sqrt(numpy.mean(samples**2)))
    spectrum = numpy.abs(numpy.fft.rfft(samples * numpy.hanning(len(samples))))
    frequencies = numpy.fft.rfftfreq(len(samples), 1 / rate)
    spectrum[frequencies < 50] = 0  # no DC or rumble
    peak = float(frequencies[int(numpy.argmax(spectrum))])
    energy = spectrum**2
    total = float(energy.sum())
    near = float(energy[numpy.abs(frequencies - peak) <= 25].sum())
    return {
        "frequency": peak,
        "level": level,
        "purity": near / total if total > 0 else 0.0,
        "seconds": len(samples) / rate,
    }


class Member:
    def __init__(self):
        self.microphone = Microphone()
        self.configuration = None
        self.connections = {}
        self.holder = None
        self.rate = RATE
        # Recording, while a listen is running: what was played, and each peer's audio.
        self.recording = None

    def emit(self, **event):
        try:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the test has gone; nobody to tell
            pass

    def connection(self, peer):
        pc = RTCPeerConnection(self.configuration)
        self.connections[peer] = pc

        @pc.on("connectionstatechange")
        async def changed():
            self.emit(ev="state", peer=peer, state=pc.connectionState)

        @pc.on("track")
        def arrived(track):
            self.emit(ev="track", peer=peer, kind=track.kind)
            asyncio.ensure_future(self.receive(peer, track))

        return pc

    @staticmethod
    def opus_only(pc):
        capabilities = RTCRtpSender.getCapabilities("audio")
        opus = [codec for codec in capabilities.codecs if codec.mimeType.lower() == "audio/opus"]
        for transceiver in pc.getTransceivers():
            transceiver.setCodecPreferences(opus)

    async def receive(self, peer, track):
        """Decodes everything that arrives (the jitter buffer must keep moving)."""
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            self.rate = frame.sample_rate
            if self.recording is None:
                continue
            samples = mono(frame)
            self.recording["peers"].setdefault(peer, []).append(samples)
            # A compliant receiver plays the floor holder and nobody else.
            if peer == self.holder:
                self.recording["played"].append(samples)

    async def handle(self, command):
        op = command["op"]
        if op == "ice":
            server = RTCIceServer(urls=command["urls"], username=command["username"], credential=command["credential"])
            self.configuration = RTCConfiguration(iceServers=[server], iceTransportPolicy=RTCIceTransportPolicy.RELAY)
            self.emit(ev="ready")
        elif op == "offer":
            pc = self.connection(command["peer"])
            pc.addTrack(ToneTrack(self.microphone))
            self.opus_only(pc)
            await pc.setLocalDescription(await pc.createOffer())
            self.emit(ev="offer", peer=command["peer"], sdp=pc.localDescription.sdp)
        elif op == "answer":
            pc = self.connection(command["peer"])
            await pc.setRemoteDescription(RTCSessionDescription(sdp=command["sdp"], type="offer"))
            pc.addTrack(ToneTrack(self.microphone))
            self.opus_only(pc)
            await pc.setLocalDescription(await pc.createAnswer())
            self.emit(ev="answer", peer=command["peer"], sdp=pc.localDescription.sdp)
        elif op == "accept":
            pc = self.connections[command["peer"]]
            await pc.setRemoteDescription(RTCSessionDescription(sdp=command["sdp"], type="answer"))
        elif op == "transmit":
            self.microphone.frequency = command.get("frequency")
        elif op == "play":
            self.holder = command.get("holder")
        elif op == "listen":
            self.recording = {"played": [], "peers": {}}
            await asyncio.sleep(command["ms"] / 1000)
            recording, self.recording = self.recording, None
            self.emit(
                ev="heard",
                id=command["id"],
                played=analyse(recording["played"], self.rate),
                peers={peer: analyse(chunks, self.rate) for peer, chunks in recording["peers"].items()},
            )
        elif op == "route":
            self.emit(ev="route", peer=command["peer"], **self.route(command["peer"]))
        else:
            raise ValueError(f"unknown op {op}")

    def route(self, peer):
        """The candidates this side offered and the pair ICE chose (relay, if forced)."""
        pc = self.connections[peer]
        transceiver = pc.getTransceivers()[0]
        ice = transceiver.sender.transport.transport
        offered = sorted({candidate.type for candidate in ice.iceGatherer.getLocalCandidates()})
        chosen = {}
        for component, pair in ice._connection._nominated.items():
            chosen = {"local": pair.local_candidate.type, "remote": pair.remote_candidate.type}
        codecs = [codec.mimeType for codec in transceiver._codecs]
        return {"offered": offered, "chosen": chosen, "codecs": codecs}


async def main():
    member = Member()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending = set()
    while True:
        line = await reader.readline()
        if not line:
            break
        command = json.loads(line)

        async def run(command=command):
            try:
                await member.handle(command)
            except Exception as error:  # reported to the test, which fails on it
                member.emit(ev="error", op=command.get("op"), message=repr(error))

        task = asyncio.ensure_future(run())
        pending.add(task)
        task.add_done_callback(pending.discard)
    for pc in member.connections.values():
        await pc.close()


if __name__ == "__main__":
    asyncio.run(main())
