#!/usr/bin/python3
"""A hostile HTTP/2 client for the stream-abuse tests (tests/serve/hostile_client_test.cc).

Frames are written by hand (hyperframe, hpack from Debian's python3-h2), so the
client can ignore what a polite one obeys: the server's stream limit and its
flow-control windows.

Each mode is one scenario whatever the scheduling. gRPC applies its stream
limit once the client has acknowledged the server's SETTINGS, so every
connection acknowledges them before its first stream, except in `unacked`,
which never does (the gap docs/SECURITY.md states).

  h2_abuse.py HOST PORT streams COUNT HOLD_S    COUNT streams with headers and
                                                no message, held HOLD_S seconds
  h2_abuse.py HOST PORT unacked COUNT HOLD_S    the same, on a connection that
                                                never acknowledges SETTINGS
  h2_abuse.py HOST PORT partial COUNT BYTES HOLD_S
                                                COUNT Dispatch requests that
                                                announce 60 MB and send BYTES
  h2_abuse.py HOST PORT reset SECONDS           HEADERS + RST_STREAM in a loop
  h2_abuse.py HOST PORT resets SECONDS          the same, on a new connection
                                                whenever the server cuts one

Prints one line: what it sent (in the reset modes, also how many streams each
cut connection had reset, median and most), and how the server answered
(frames by type).
"""
import socket
import struct
import sys
import threading
import time
from collections import Counter

from hpack import Encoder
from hyperframe.frame import (DataFrame, Frame, GoAwayFrame, HeadersFrame,
                              PingFrame, RstStreamFrame, SettingsFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Connection:
    def __init__(self, host, port, ack_settings=True):
        self.sock_address = (host, port)
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.encoder = Encoder()
        self.authority = f"{host}:{port}"
        self.received = Counter()
        self.lock = threading.Lock()
        self.closed = False
        self.ack_settings = ack_settings
        # Set once the server's SETTINGS are acknowledged, or the
        # connection is closed.
        self.ready = threading.Event()
        self.send(PREFACE + SettingsFrame(0).serialize())
        threading.Thread(target=self.read, daemon=True).start()
        # Frames are read in order: the acknowledgement reaches the server
        # before the first HEADERS, so its limit applies to every stream.
        if ack_settings and not self.ready.wait(30):
            raise RuntimeError("the server sent no SETTINGS within 30 s")

    def send(self, data):
        with self.lock:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def read(self):
        """Reads every frame; acknowledges SETTINGS (unless told not to) and
        PING like a live peer."""
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                self.ready.set()
                return
            buffer += chunk
            while len(buffer) >= 9:
                frame, length = Frame.parse_frame_header(buffer[:9])
                if len(buffer) < 9 + length:
                    break
                frame.parse_body(memoryview(buffer[9:9 + length]))
                buffer = buffer[9 + length:]
                self.received[type(frame).__name__] += 1
                if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                    if self.ack_settings:
                        self.send(SettingsFrame(0, flags=["ACK"]).serialize())
                        self.ready.set()
                elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                    self.send(PingFrame(0, opaque_data=frame.opaque_data,
                                        flags=["ACK"]).serialize())

    def headers(self, stream_id, method="Dispatch", end_stream=False):
        block = self.encoder.encode([
            (":method", "POST"), (":scheme", "http"),
            (":path", f"/cfdb.worker.v1.Worker/{method}"),
            (":authority", self.authority),
            ("content-type", "application/grpc"), ("te", "trailers"),
        ])
        flags = ["END_HEADERS"] + (["END_STREAM"] if end_stream else [])
        return HeadersFrame(stream_id, data=block, flags=flags).serialize()


def streams(conn, count, hold):
    batch = []
    for i in range(count):
        batch.append(conn.headers(1 + 2 * i))
        if len(batch) == 500:
            conn.send(b"".join(batch))
            batch = []
    conn.send(b"".join(batch))
    time.sleep(hold)
    return f"opened {count} streams"


def partial(conn, count, size, hold):
    announced = 60 << 20
    for i in range(count):
        stream_id = 1 + 2 * i
        data = struct.pack(">BI", 0, announced) + b"\0" * size
        frames = [conn.headers(stream_id)]
        for at in range(0, len(data), 16384):
            frames.append(DataFrame(stream_id, data=data[at:at + 16384]).serialize())
        conn.send(b"".join(frames))
    time.sleep(hold)
    return f"sent {count} partial requests of {size} bytes"


def reset(conn, seconds, come_back=False):
    end = time.monotonic() + seconds
    stream_id = 1
    sent = 0
    connections = 1
    cut = []  # streams reset on each connection the server cut
    while time.monotonic() < end:
        if conn.closed:
            cut.append((stream_id - 1) // 2)
        if conn.closed and not come_back:
            break
        if conn.closed:  # cut: come back, as an attacker would
            conn.sock.close()
            conn = Connection(*conn.sock_address)
            connections += 1
            stream_id = 1
        batch = []
        for _ in range(200):
            batch.append(conn.headers(stream_id, method="Idle"))
            batch.append(RstStreamFrame(stream_id, error_code=8).serialize())
            stream_id += 2
        conn.send(b"".join(batch))
        sent += 200
        if stream_id > (1 << 31) - 1000:
            break
    cut.sort()
    most = f", at most {cut[-1]}" if cut else ""
    median = f"{cut[len(cut) // 2]}" if cut else "none"
    return (f"reset {sent} streams on {connections} connections; before a "
            f"cut: median {median}{most}")


def main():
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    args = [int(a) for a in sys.argv[4:]]
    conn = Connection(host, port, ack_settings=mode != "unacked")
    what = {"streams": streams, "unacked": streams, "partial": partial,
            "reset": reset,
            "resets": lambda c, s: reset(c, s, come_back=True)}[mode](conn, *args)
    conn.send(GoAwayFrame(0, last_stream_id=0).serialize())
    conn.sock.close()
    print(f"{what}; server sent {dict(conn.received)}; "
          f"closed by server: {conn.closed}")


if __name__ == "__main__":
    main()
