#!/usr/bin/env python3
"""Where the time goes: counts that do not depend on the machine's load.

    python3 bench/where.py --build build-bench [--mib 256] [--jobs 200]
        [--shapes output,input,both,exec] [--serve-args "--job-containment subreaper"]

Runs each path through the worker (`cfdb-worker serve` + `dispatch`) and
through the bare pipeline (`bare-pipe serve` + `bare-pipe client`), one
after the other, with `perf record` attached to the server (and running the
client), and counts per GiB (streaming) or per job (`exec` of /bin/true):
system calls by name, context switches (voluntary: the thread slept;
involuntary: it was preempted), wake-ups the process made (of its own
threads or others') and page faults. Only the server's (the client's) own
threads count, not the jobs it spawns. Needs `perf` and root (or
kernel.perf_event_paranoid <= -1) for the tracepoints.

Counts of events, unlike CPU seconds, barely move with the load of a
shared machine; the CPU seconds printed beside them do.
"""

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

EVENTS = "raw_syscalls:sys_enter,sched:sched_switch,sched:sched_wakeup,page-faults"
CLIENT_EVENTS = ("raw_syscalls:sys_enter,context-switches,sched:sched_wakeup,"
                 "page-faults")


def syscall_names():
    names = {}
    path = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                m = re.match(r"#define __NR_(\w+)\s+(\d+)", line)
                if m:
                    names[int(m.group(2))] = m.group(1)
    return names


NAMES = syscall_names()


class Server:
    """A server process that announces 'listening on 127.0.0.1:PORT'."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    ready.set()
        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(30):
            sys.exit(f"no listening line from {argv[0]}")
        self.address = f"127.0.0.1:{self.port}"

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()


def counts(data, pid):
    """Counts of `pid`'s own events in a perf.data file."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,event,trace"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    c = collections.Counter()
    sys_by = collections.Counter()
    for line in out.splitlines():
        head, _, rest = line.strip().partition(" ")
        if head != str(pid):
            continue
        rest = rest.strip()
        if rest.startswith("raw_syscalls:sys_enter"):
            c["syscalls"] += 1
            m = re.search(r"NR (\d+)", rest)
            if m:
                sys_by[NAMES.get(int(m.group(1)), m.group(1))] += 1
        elif rest.startswith("sched:sched_switch"):
            m = re.search(r"prev_state=(\S+)", rest)
            preempted = m is not None and m.group(1).startswith("R")
            c["involuntary" if preempted else "voluntary"] += 1
        elif rest.startswith("sched:sched_wakeup"):
            c["wakeups"] += 1
        elif rest.startswith("page-faults"):
            c["faults"] += 1
    return c, sys_by


def perf_attached(pid, data):
    p = subprocess.Popen(["perf", "record", "-q", "-e", EVENTS, "-c", "1",
                          "-p", str(pid), "-o", data],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached to every thread
    return p


def perf_stop(p):
    p.send_signal(signal.SIGINT)
    p.wait()


def run_path(shape, carrier, server, build, path, jobs, tmp):
    """Runs one path through one carrier; returns (server counts, server
    syscalls by name, client counts, server CPU s)."""
    worker = f"{build}/cfdb-worker"
    bare = f"{build}/bench/bare-pipe"
    job = {"output": ["/bin/cat", path], "input": ["/usr/bin/sha256sum"],
           "both": ["/bin/cat"], "exec": ["/bin/true"]}[shape]
    feed = shape in ("input", "both")
    if carrier == "ours":
        client = [worker, "dispatch", "--address", server.address]
        if not feed:
            client.append("--no-stdin")
    else:
        client = [bare, "client", server.address]
        if feed:
            client.append("--stdin")
    client += ["--", *job]
    sdata = os.path.join(tmp, f"{shape}-{carrier}-server.data")
    cdata = os.path.join(tmp, f"{shape}-{carrier}-client.data")
    cpu0 = server.cpu_s()
    rec = perf_attached(server.proc.pid, sdata)
    client_counts = collections.Counter()
    if shape == "exec":
        for _ in range(jobs):
            subprocess.run(client, check=True, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL)
    else:
        cat = subprocess.Popen(["/bin/cat", path], stdout=subprocess.PIPE) if feed else None
        # The client has no children: perf stat counts its threads alone.
        c = subprocess.Popen(["perf", "stat", "-x", ",", "-o", cdata, "-e",
                              CLIENT_EVENTS, "--", *client],
                             stdin=cat.stdout if cat else subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if cat:
            cat.stdout.close()
        if c.wait() != 0 or (cat and cat.wait() != 0):
            sys.exit(f"{shape} through {carrier} failed")
        with open(cdata) as f:
            for line in f:
                fields = line.strip().split(",")
                if len(fields) > 2 and fields[0].isdigit():
                    client_counts[fields[2]] = int(fields[0])
    time.sleep(0.2)
    perf_stop(rec)
    cpu = server.cpu_s() - cpu0
    s, by = counts(sdata, server.proc.pid)
    return s, by, client_counts, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--shapes", default="output,input,both,exec")
    ap.add_argument("--top", type=int, default=6, help="syscalls shown by name")
    ap.add_argument("--serve-args", default="",
                    help="more flags for `cfdb-worker serve`, space-separated")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "zeros")
        with open(path, "wb") as f:
            f.truncate(args.mib << 20)
        servers = {
            "ours": Server([f"{build}/cfdb-worker", "serve", "--port", "0",
                            "--max-concurrent-tasks", "1",
                            "--idle-timeout-seconds", "0",
                            *args.serve_args.split()]),
            "bare": Server([f"{build}/bench/bare-pipe", "serve", "--port", "0"]),
        }
        try:
            print("| path | carrier | per | syscalls | voluntary switches | "
                  "involuntary | wake-ups made | page faults | server CPU s "
                  "(load-dependent) | client: syscalls; voluntary switches; "
                  "wake-ups; faults | server syscalls by name |")
            print("| --- " * 11 + "|")
            for shape in args.shapes.split(","):
                for carrier in ("ours", "bare"):
                    s, by, c, cpu = run_path(shape, carrier, servers[carrier],
                                             build, path, args.jobs, tmp)
                    n = args.jobs if shape == "exec" else args.mib / 1024
                    per = "job" if shape == "exec" else "GiB"

                    def f(x):
                        return f"{x / n:,.1f}" if x / n < 100 else f"{x / n:,.0f}"
                    top = ", ".join(f"{name} {f(k)}" for name, k in
                                    by.most_common(args.top))
                    client = ("—" if shape == "exec" else
                              f"{f(c['raw_syscalls:sys_enter'])}; "
                              f"{f(c['context-switches'])}; "
                              f"{f(c['sched:sched_wakeup'])}; "
                              f"{f(c['page-faults'])}")
                    print(f"| {shape} | {carrier} | {per} | {f(s['syscalls'])} | "
                          f"{f(s['voluntary'])} | {f(s['involuntary'])} | "
                          f"{f(s['wakeups'])} | {f(s['faults'])} | "
                          f"{cpu / n:.4f} | {client} | {top} |", flush=True)
        finally:
            for server in servers.values():
                server.stop()


if __name__ == "__main__":
    main()
