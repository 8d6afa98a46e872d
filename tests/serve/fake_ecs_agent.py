"""A stand-in for the ECS container agent's task-protection endpoint, for
the scale-in protection tests: serves PUT .../task-protection/v1/state on
127.0.0.1, prints "listening PORT", then "arrived N" as request N (from 0)
arrives, and one JSON line per request ({"path", "body", "status"}) as it
answers.

    fake_ecs_agent.py [--statuses 500,200] [--hang-first SECONDS]
"""
import argparse
import http.server

import fake_api

args = argparse.ArgumentParser()
fake_api.add_arguments(args)
recorder = fake_api.Recorder(args.parse_args())


class Agent(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        n, request = recorder.arrive(self)
        status = recorder.status(n)
        reply = ({"protection": {"ProtectionEnabled": bool(
            request and request.get("ProtectionEnabled"))}}
                 if status == 200 else {"error": {"Code": "ServerException"}})
        recorder.answer(self, status, reply,
                        {"path": self.path, "body": request})

    def log_message(self, *unused):
        pass


fake_api.serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Agent))
