"""Streamed stdin (DispatchStream) from both clients, against real workers
over TCP plaintext, mutual TLS and the Unix socket: every kind of source,
byte-exact round trips at the sizes where chunking and the whole-request
limit change, a 70 MB stream, and a job that stops reading: the client
reads its source only as fast as the job takes it."""
import hashlib
import io
import os
import tempfile
import threading
import time
import unittest

import cfdb_worker
from support import test_cases, wait_for

KIB = 1024
# 0 and 1 byte; around 64 KiB (a pipe's buffer, gRPC's first window); more
# than the whole-request limit (1 MiB) and several chunks (256 KiB).
SIZES = (0, 1, 64 * KIB - 1, 64 * KIB, 64 * KIB + 1, 8 << 20)


def pattern(size):
    """`size` bytes that show a misplaced chunk (not one repeated byte)."""
    block = hashlib.sha256(str(size).encode()).digest() * 4096
    return (block * (size // len(block) + 1))[:size]


class StdinTests:
    """Streamed stdin over one transport from one client (fixtures and
    clients of support.py)."""

    def connect(self):
        return self.open(self.address(), self.credentials())

    def test_bytes_and_file_objects_round_trip_byte_exact(self):
        with self.connect() as c:
            for size in SIZES:
                data = pattern(size)
                for source in (data, io.BytesIO(data)):
                    with self.subTest(size=size, source=type(source).__name__):
                        result = c.dispatch(["cat"], stdin=source)
                        self.assertEqual(result.exit_code, 0)
                        self.assertEqual(len(result.stdout), size)
                        self.assertEqual(result.stdout, data)

    def test_an_iterable_and_a_pipe_round_trip_byte_exact(self):
        data = pattern(3 << 20)
        # Uneven pieces, one larger than a chunk, one empty.
        pieces = [data[:1], data[1:7], b"", data[7:(1 << 20) + 7],
                  data[(1 << 20) + 7:]]
        read_end, write_end = os.pipe()

        def feed():
            with os.fdopen(write_end, "wb") as f:
                f.write(data)
        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            with self.connect() as c:
                from_iterable = c.dispatch(["cat"], stdin=iter(pieces))
                from_pipe = c.dispatch(["cat"], stdin=read_end)
        finally:
            # Closed first: a feeder nobody reads from (the first dispatch
            # failed) gets EPIPE instead of waiting for a reader forever.
            os.close(read_end)
            feeder.join()
        self.assertEqual(from_iterable.stdout, data)
        self.assertEqual(from_pipe.stdout, data)

    def test_a_70_mb_stream(self):
        size, piece = 70_000_000, pattern(1 << 20)
        sent = hashlib.sha256()

        def source():
            left = size
            while left:
                data = piece[:min(left, len(piece))]
                sent.update(data)
                left -= len(data)
                yield data
        with self.connect() as c:
            result = c.dispatch(["cat"], stdin=source())
        self.assertEqual(len(result.stdout), size)
        self.assertEqual(hashlib.sha256(result.stdout).hexdigest(),
                         sent.hexdigest())

    def test_a_job_that_stops_reading_stops_the_reading(self):
        pulled = []

        def endless():
            while True:
                pulled.append(1)
                yield b"x" * (256 * KIB)
        with tempfile.TemporaryDirectory() as directory, \
                self.connect() as c:
            # The job reads nothing until `go` exists, then 5 bytes, then
            # closes its stdin.
            go = os.path.join(directory, "go")
            events = c.events(
                ["/bin/sh", "-c", 'while [ ! -e "$GO" ]; do sleep 0.02; done; '
                 "head -c 5 >/dev/null; sleep 0.5; echo read"],
                env={"GO": go, "PATH": "/usr/bin:/bin"}, stdin=endless())
            self.assertIsInstance(next(events), cfdb_worker.Accepted)
            self.assertTrue(wait_for(lambda: len(pulled) > 1))

            def settled():
                before = len(pulled)
                time.sleep(0.5)  # time to take much more, were it unbounded
                return len(pulled) == before
            self.assertTrue(wait_for(settled, timeout=30),
                            "the client went on reading its source")
            held = len(pulled) * 256 * KIB
            open(go, "w").close()
            rest = list(events)
        kinds = [type(e) for e in rest]
        self.assertIn(cfdb_worker.InputClosed, kinds)
        self.assertLess(kinds.index(cfdb_worker.InputClosed),
                        kinds.index(cfdb_worker.Exit))
        self.assertEqual(rest[-1], cfdb_worker.Exit(code=0))
        # While the job read nothing, the client stopped reading its source
        # (above) after a bounded window of it: the job's pipe, a chunk or
        # two and the worker's HTTP/2 receive window, which gRPC sizes from
        # the bandwidth-delay product it measures, at least 4 MiB, and
        # shrinks under memory pressure: 5-8 MiB taken on a quiet or busy
        # machine, 20 MiB once in an ASan suite at ctest -j6, where the
        # measured delay is long. The bound is of the worker's memory
        # quota's scale (256 MiB); a client that kept reading never settles.
        self.assertLess(held, 64 << 20)

    def test_a_source_that_fails_cancels_the_job(self):
        def failing():
            yield b"start\n"
            raise OSError("the disk went away")
        with self.connect() as c:
            with self.assertRaises(cfdb_worker.OutcomeUnknown) as raised:
                c.dispatch(["cat"], stdin=failing(), job_id="cut-short",
                           detach_grace=30)
            self.assertIn("the disk went away", str(raised.exception))
            ended = c.attach("cut-short")
        self.assertEqual(ended.failure.reason, "CANCELLED",
                         "a cut-short input is never taken for a whole one")

    def test_str_is_not_stdin(self):
        with self.connect() as c:
            with self.assertRaises(TypeError):
                c.dispatch(["cat"], stdin="text")


test_cases(globals(), StdinTests)

if __name__ == "__main__":
    unittest.main()
