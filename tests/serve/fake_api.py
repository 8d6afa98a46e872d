"""What the stand-ins for orchestrators' APIs share (fake_ecs_agent.py,
fake_kube_api.py): --statuses and --hang-first, the "arrived N" and
"listening PORT" lines, and one JSON line per request answered."""
import json
import threading
import time


def add_arguments(parser):
    parser.add_argument("--statuses", default="200",
                        help="each request's HTTP status in turn (the last "
                             "repeats)")
    parser.add_argument("--hang-first", type=float, default=0,
                        help="answer the first request only after this long")


class Recorder:
    def __init__(self, options):
        self.statuses = [int(s) for s in options.statuses.split(",")]
        self.hang_first = options.hang_first
        self.lock = threading.Lock()
        self.count = 0

    def arrive(self, handler):
        """Counts a request, reads its body and hangs if asked; returns the
        request's number and its body parsed (None if it is no JSON)."""
        with self.lock:
            n = self.count
            self.count += 1
            print(f"arrived {n}", flush=True)
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        if n == 0 and self.hang_first > 0:
            time.sleep(self.hang_first)
        try:
            return n, json.loads(body)
        except ValueError:
            return n, None

    def status(self, n):
        return self.statuses[min(n, len(self.statuses) - 1)]

    def answer(self, handler, status, reply, record):
        data = json.dumps(reply).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        with self.lock:
            print(json.dumps(dict(record, status=status)), flush=True)


def serve(server):
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()  # until the test ends it (SIGTERM)
