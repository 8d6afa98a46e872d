#!/usr/bin/env python3
"""A TCP proxy for tests: forwards every connection to 127.0.0.1:PORT
accepted on 127.0.0.1:LISTEN, until it is killed, which cuts every
connection it carries; SIGUSR1 cuts them too, and it goes on listening.
Prints "listening on 127.0.0.1:LISTEN (pid PID)" once it listens (LISTEN 0:
a free port).

    tcp_proxy.py LISTEN TARGET_PORT [--hold-replies]

--hold-replies: until the first cut, what the target sends on a connection
after its first read (its HTTP/2 SETTINGS, with which the client's channel
gets ready and sends its call) is held back, e.g. a dispatch's Accepted: a
call lost on the way, as the client sees it, after the worker took it.
"""
import os
import selectors
import signal
import socket
import sys


class Cut(Exception):
    """SIGUSR1 arrived: cut every connection carried."""


def on_cut(signo, frame):
    raise Cut()


class Hold:
    """Which connections hold back what the target sends (--hold-replies):
    each forwards the target's first read, and drops the rest."""

    def __init__(self, on):
        self.on = on
        self.held = set()  # target sockets of connections that hold
        self.answered = set()  # those whose first read went


def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    hold = Hold("--hold-replies" in sys.argv[3:])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ, None)
    signal.signal(signal.SIGUSR1, on_cut)
    print(f"listening on 127.0.0.1:{server.getsockname()[1]} "
          f"(pid {os.getpid()})", flush=True)
    while True:
        try:
            serve_once(server, selector, target_port, hold)
        except Cut:
            hold.on = False
            hold.held.clear()
            hold.answered.clear()
            for key in list(selector.get_map().values()):
                if key.data is not None:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()


def serve_once(server, selector, target_port, hold):
    """Forwards what is ready now."""
    for key, _ in selector.select():
        if key.data is None:
            client, _ = server.accept()
            upstream = socket.create_connection(("127.0.0.1", target_port))
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            if hold.on:
                hold.held.add(upstream)
            continue
        if key.fileobj.fileno() == -1:
            continue  # closed with its pair earlier in this batch
        data = b""
        try:
            data = key.fileobj.recv(1 << 16)
        except OSError:
            pass
        if data:
            if key.fileobj not in hold.answered:
                key.data.sendall(data)
            if key.fileobj in hold.held:
                hold.answered.add(key.fileobj)
            continue
        for sock in (key.fileobj, key.data):
            selector.unregister(sock)
            hold.held.discard(sock)
            hold.answered.discard(sock)
            sock.close()


if __name__ == "__main__":
    main()
