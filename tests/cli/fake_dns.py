"""A DNS server for one name, on port 53 of a loopback address of its own,
for `reap --addresses-from dns:NAME:PORT` (tests/cli/reap_test.cc). It
answers NAME's A and AAAA queries with the records given, SERVFAIL for the
--servfail name, NXDOMAIN for every other; prints "listening 53", then one
JSON line per query answered. Debian's python3-dnslib speaks the wire
format."""
import argparse
import json
import sys
import threading

from dnslib import AAAA, QTYPE, RCODE, RR, A
from dnslib.server import BaseResolver, DNSServer


class Resolver(BaseResolver):
    def __init__(self, options):
        self.options = options

    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".")
        kind = QTYPE[request.q.qtype]
        if name == self.options.servfail:
            reply.header.rcode = RCODE.SERVFAIL
        elif name != self.options.name:
            reply.header.rcode = RCODE.NXDOMAIN
        elif kind == "A":
            for address in self.options.a:
                reply.add_answer(RR(name, QTYPE.A, rdata=A(address), ttl=5))
        elif kind == "AAAA":
            for address in self.options.aaaa:
                reply.add_answer(
                    RR(name, QTYPE.AAAA, rdata=AAAA(address), ttl=5))
        print(json.dumps({"name": name, "type": kind,
                          "rcode": RCODE[reply.header.rcode]}), flush=True)
        return reply


class QuietLogger:
    def __getattr__(self, name):
        return lambda *args: None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--a", action="append", default=[])
    parser.add_argument("--aaaa", action="append", default=[])
    parser.add_argument("--servfail", default="")
    options = parser.parse_args()
    resolver = Resolver(options)
    for tcp in (False, True):
        DNSServer(resolver, address=options.listen, port=53, tcp=tcp,
                  logger=QuietLogger()).start_thread()
    print("listening 53", flush=True)
    threading.Event().wait()  # the servers' threads answer until killed


if __name__ == "__main__":
    sys.exit(main())
