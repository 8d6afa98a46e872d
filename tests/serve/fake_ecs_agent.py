"""A stand-in for the ECS container agent's task-protection endpoint, for
the scale-in protection tests: serves PUT .../task-protection/v1/state on
127.0.0.1, prints "listening PORT", then "arrived N" as request N (from 0)
arrives, and one JSON line per request ({"path", "body", "status"}) as it
answers.

    fake_ecs_agent.py [--statuses 500,200] [--hang-first SECONDS]

--statuses: the HTTP status of each request in turn (the last repeats);
--hang-first: the first request is answered only after this long.
"""
import argparse
import http.server
import json
import threading
import time

args = argparse.ArgumentParser()
args.add_argument("--statuses", default="200")
args.add_argument("--hang-first", type=float, default=0)
options = args.parse_args()
statuses = [int(s) for s in options.statuses.split(",")]
lock = threading.Lock()
count = 0


class Agent(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        global count
        with lock:
            n = count
            count += 1
            print(f"arrived {n}", flush=True)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if n == 0 and options.hang_first > 0:
            time.sleep(options.hang_first)
        status = statuses[min(n, len(statuses) - 1)]
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        reply = ({"protection": {"ProtectionEnabled": bool(
            request and request.get("ProtectionEnabled"))}}
                 if status == 200 else {"error": {"Code": "ServerException"}})
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with lock:
            print(json.dumps({"path": self.path, "body": request,
                              "status": status}), flush=True)

    def log_message(self, *unused):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Agent)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()  # until the test ends it (SIGTERM)
