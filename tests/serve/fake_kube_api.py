"""A stand-in for the Kubernetes API server's pod endpoint, for the pod
deletion cost tests: serves PATCH /api/v1/namespaces/NS/pods/NAME over
HTTPS on 127.0.0.1, prints "listening PORT", then "arrived N" as request N
(from 0) arrives, and one JSON line per request ({"path", "body",
"content_type", "token", "status"}) as it answers.

    fake_kube_api.py --cert CERT --key KEY [--tokens a,b]
                     [--statuses 401,200] [--hang-first SECONDS]
                     [--rotate-on-401 FILE=TOKEN]

--tokens: the bearer tokens it takes (others get 401; default: any); the
statuses apply after the token and content type checks. --rotate-on-401:
before its first 401 answer, write TOKEN into FILE, as the kubelet rotates
a projected token that has just expired.
"""
import argparse
import http.server
import os
import ssl

import fake_api

args = argparse.ArgumentParser()
args.add_argument("--cert", required=True)
args.add_argument("--key", required=True)
args.add_argument("--tokens", default="")
args.add_argument("--rotate-on-401", default="")
fake_api.add_arguments(args)
options = args.parse_args()
tokens = [t for t in options.tokens.split(",") if t]
recorder = fake_api.Recorder(options)


def rotate():
    """Writes --rotate-on-401's token, once, replacing the file in one
    rename."""
    global rotation
    if not rotation:
        return
    path, token = rotation.split("=", 1)
    rotation = ""
    with open(path + ".rotated", "w") as f:
        f.write(token + "\n")
    os.rename(path + ".rotated", path)


rotation = options.rotate_on_401


class Api(http.server.BaseHTTPRequestHandler):
    def do_PATCH(self):
        n, request = recorder.arrive(self)
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        content_type = self.headers.get("Content-Type")
        if tokens and token not in tokens:
            status = 401
            rotate()
        elif content_type != "application/merge-patch+json":
            status = 415
        else:
            status = recorder.status(n)
        reply = ({"kind": "Pod", "metadata": request.get("metadata", {})}
                 if status == 200 and isinstance(request, dict)
                 else {"kind": "Status", "code": status})
        recorder.answer(self, status, reply,
                        {"path": self.path, "body": request,
                         "content_type": content_type, "token": token})

    def log_message(self, *unused):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(options.cert, options.key)
server.socket = context.wrap_socket(server.socket, server_side=True)
fake_api.serve(server)
