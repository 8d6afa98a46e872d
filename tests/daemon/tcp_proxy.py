#!/usr/bin/env python3
"""A TCP proxy for tests: forwards every connection to 127.0.0.1:PORT
accepted on 127.0.0.1:LISTEN, until it is killed, which cuts every
connection it carries; SIGUSR1 cuts them too, and it goes on listening.
Prints "listening on 127.0.0.1:LISTEN (pid PID)" once it listens (LISTEN 0:
a free port).

    tcp_proxy.py LISTEN TARGET_PORT
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


def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
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
            serve_once(server, selector, target_port)
        except Cut:
            for key in list(selector.get_map().values()):
                if key.data is not None:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()


def serve_once(server, selector, target_port):
    """Forwards what is ready now."""
    for key, _ in selector.select():
        if key.data is None:
            client, _ = server.accept()
            upstream = socket.create_connection(("127.0.0.1", target_port))
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            continue
        data = b""
        try:
            data = key.fileobj.recv(1 << 16)
        except OSError:
            pass
        if data:
            key.data.sendall(data)
            continue
        for sock in (key.fileobj, key.data):
            selector.unregister(sock)
            sock.close()


if __name__ == "__main__":
    main()
