#!/usr/bin/env python3
"""The fleet budget of docs/SCALE.md: what N workers cost the ECS control
plane, CloudWatch and the caller that reaps, at the default knobs.

    python3 bench/fleet_budget.py measure --build build > fleet.json  # ~1 min
    python3 bench/fleet_budget.py table [--measured fleet.json]

`measure` runs real workers here: the log lines and bytes of a start, a job
and an exit (text and JSON) and of an EMF line, and the protection calls job
streams make against tests/serve/fake_ecs_agent.py, on time compressed 30×
(a 2 s hold stands for the default 60 s). `table` computes the budget from
those figures (MEASURED holds the last measurement), the reap figures of
docs/PERFORMANCE.md (REAP) and the published prices (PRICES); docs/SCALE.md
says where each comes from.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The defaults this budget is for (src/serve/*.h).
HOLD_S = 60  # --ecs-protection-hold-seconds
EXPIRES_MIN = 120  # --ecs-protection-expires-minutes: a renewal an hour
IDLE_POLL_S = 15  # --idle-poll-interval-seconds
IDLE_TIMEOUT_S = 600  # --idle-timeout-seconds
LIFETIME_H = 12  # --max-lifetime-seconds
METRICS_S = 60  # --metrics-interval-seconds
# EMF: 7 metrics under the one Service dimension, and 2 at exit under
# (Service, ExitReason): idle, max lifetime, signal, stop rpc, listener lost.
EMF_INTERVAL_METRICS = 7
EMF_METRICS = EMF_INTERVAL_METRICS + 2 * 5

# CloudWatch, US East (N. Virginia), standard log class; docs/SCALE.md cites
# the pages and their dates.
PRICES = {"log_ingest_per_gb": 0.50, "log_store_per_gb_month": 0.03,
          "metric_per_month": 0.30}
HOURS_PER_MONTH = 730
# ECS: the page documents per-account token buckets but its stored copy does
# not show UpdateTaskProtection's; assumed, and said so in SCALE.md.
ECS_ASSUMED_RATE = 20

# The last `measure` on this repository's 2-core machine (docs/SCALE.md).
MEASURED = json.loads("""
{"logs": {"text": {"start": [5, 950], "job": [1.0, 155.0], "exit": [4,
541]}, "json": {"start": [5, 1120], "job": [1.0, 191.0], "exit": [4, 680]}},
"emf": {"interval_line_bytes": 627.0, "exit_line_bytes": 388}, "protection":
[{"hold_s": 0, "jobs": 20, "gap_s": 0, "calls": 40}, {"hold_s": 2, "jobs":
20, "gap_s": 0, "calls": 2}, {"hold_s": 2, "jobs": 10, "gap_s": 1, "calls":
2}, {"hold_s": 2, "jobs": 5, "gap_s": 4, "calls": 10}]}
""")
# reap per worker, ranges over runs (docs/PERFORMANCE.md: 2,000 stub
# workers, --concurrency 64, the stub on the same two CPUs)
REAP = {"plaintext": {"cpu_ms": (0.84, 1.02), "wall_ms": (0.79, 1.53),
                      "peak_mib": "27 (24 at 200)"},
        "mutual TLS": {"cpu_ms": (4.6, 5.6), "wall_ms": (6.4, 11.0),
                       "peak_mib": "48 (40 at 200)"}}

RATES = (("1/s", 3600), ("1/min", 60), ("1/10 min", 6), ("1/h", 1))
FLEETS = (100, 1000, 10000)


def spawn_worker(worker, args, env=None):
    """Starts `worker serve` and returns (process, address, log path)."""
    log = f"/tmp/fleet-budget-{os.getpid()}-{time.monotonic_ns()}.log"
    proc = subprocess.Popen([worker, "serve", "--port", "0",
                             "--idle-timeout-seconds", "0"] + args,
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                            env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", open(log).read())
        if m:
            return proc, m.group(1), log
        time.sleep(0.05)
    sys.exit(f"no listening line in {log}")


def settled_size(path):
    """The file's size once it has stopped growing for 0.5 s."""
    size = -1
    while True:
        time.sleep(0.5)
        now = os.path.getsize(path)
        if now == size:
            return now
        size = now


def lines_and_bytes(text):
    return text.count("\n"), len(text.encode())


def client(worker, address, *args):
    subprocess.run([worker, *args[:1], "--address", address, *args[1:]],
                   check=True, stdout=subprocess.DEVNULL)


def measure_logs(worker, log_format, jobs=40):
    """Lines and bytes at info level: the start, one `true` job, the exit
    (a Stop RPC), averaged over `jobs`; EMF apart (measure_emf)."""
    proc, address, log = spawn_worker(
        worker, ["--log-format", log_format, "--metrics-interval-seconds", "0"])
    start = settled_size(log)
    for _ in range(jobs):
        client(worker, address, "dispatch", "--", "true")
    after_jobs = settled_size(log)
    client(worker, address, "stop", "--grace-seconds", "5")
    proc.wait()
    text = open(log, "rb").read().decode(errors="replace")
    os.remove(log)
    data = text.encode()
    job_lines = data[start:after_jobs].decode(errors="replace")
    n, b = lines_and_bytes(job_lines)
    return {"start": lines_and_bytes(data[:start].decode(errors="replace")),
            "job": [n / jobs, b / jobs],
            "exit": lines_and_bytes(data[after_jobs:].decode(errors="replace"))}


def measure_emf(worker):
    """Bytes of an interval EMF line and of the exit one (JSON logs)."""
    proc, address, log = spawn_worker(
        worker, ["--log-format", "json", "--metrics-interval-seconds", "1"])
    time.sleep(3.5)
    client(worker, address, "stop", "--grace-seconds", "5")
    proc.wait()
    lines = open(log).read().splitlines()
    os.remove(log)
    interval = [len(l.encode()) + 1 for l in lines if '"message":"metrics"' in l]
    at_exit = [len(l.encode()) + 1 for l in lines
               if '"message":"metrics at exit"' in l]
    return {"interval_line_bytes": sum(interval) / len(interval),
            "exit_line_bytes": at_exit[0]}


def measure_protection(worker, hold_s, jobs, gap_s):
    """Protection calls of `jobs` sequential `true` jobs, `gap_s` apart,
    against the fake ECS agent, the hold then allowed to end."""
    agent = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/serve/fake_ecs_agent.py")],
        stdout=subprocess.PIPE, text=True)
    port = agent.stdout.readline().split()[1]
    requests = []
    reader = threading.Thread(
        target=lambda: requests.extend(l for l in agent.stdout if l.startswith("{")))
    reader.start()
    env = dict(os.environ, ECS_AGENT_URI=f"http://127.0.0.1:{port}/api/t")
    proc, address, log = spawn_worker(
        worker, ["--ecs-scale-in-protection", "--ecs-protection-hold-seconds",
                 str(hold_s)], env)
    for i in range(jobs):
        if i:
            time.sleep(gap_s)
        client(worker, address, "dispatch", "--", "true")
    time.sleep(hold_s + 2)  # the hold ends, and its disable is answered
    client(worker, address, "stop", "--grace-seconds", "5")
    proc.wait()
    os.remove(log)
    agent.terminate()
    reader.join()
    return {"hold_s": hold_s, "jobs": jobs, "gap_s": gap_s,
            "calls": len(requests)}


def measure(build):
    worker = os.path.join(os.path.abspath(build), "cfdb-worker")
    result = {"logs": {f: measure_logs(worker, f) for f in ("text", "json")},
              "emf": measure_emf(worker),
              # 2 s stands for the 60 s hold: gaps of 1 s and 4 s stand for
              # 30 s and 2 min.
              "protection": [measure_protection(worker, 0, 20, 0),
                             measure_protection(worker, 2, 20, 0),
                             measure_protection(worker, 2, 10, 1),
                             measure_protection(worker, 2, 5, 4)]}
    json.dump(result, sys.stdout, indent=1)
    print()


def calls_per_second(n, per_hour, hold_s):
    """Protection calls a second for n workers, each given `per_hour` short
    jobs at random (Poisson): an enable and a disable per busy period, which
    a gap longer than the hold ends (probability e^(-rate * hold)), and at
    most a renewal an hour per protected worker."""
    rate = per_hour / 3600
    edges = 2 * rate * math.exp(-rate * hold_s)
    renewals = 1 / 3600 if rate * hold_s > 5 else 0  # protected throughout
    return n * (edges + renewals)


def fmt(x):
    if x == 0:
        return "0"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:.1f}"
    return f"{x:.2g}"


def size(b):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def table(m):
    logs, emf = m["logs"], m["emf"]
    out = []
    out.append("### Protection calls a second, the whole fleet "
               f"(`UpdateTaskProtection` through the agents; hold {HOLD_S} s)")
    out.append("")
    out.append("| jobs per worker | " + " | ".join(f"N = {n:,}" for n in FLEETS) +
               " | without the hold, N = 1,000 |")
    out.append("| --- |" + " --- |" * (len(FLEETS) + 1))
    for name, per_hour in RATES:
        cells = [fmt(calls_per_second(n, per_hour, HOLD_S)) for n in FLEETS]
        cells.append(fmt(calls_per_second(1000, per_hour, 0)))
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    peak = 2 / math.e / HOLD_S
    out.append("")
    out.append(f"Whatever the job rate, edges cost at most 2/(e·hold) = "
               f"{peak:.4f} calls a second per worker (at one job per hold), "
               f"so {fmt(peak * 10000)} a second for 10,000 workers.")
    out.append("")
    out.append("### Per worker and hour, at info level")
    out.append("")
    out.append("| jobs per worker | self-poll calls (loopback) | log lines | "
               "text bytes | JSON bytes | JSON + EMF bytes | EMF data points |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    polls = 3600 / IDLE_POLL_S
    emf_lines = 3600 / METRICS_S
    for name, per_hour in RATES:
        # A start and an exit per lifetime (12 h), or per idle retirement
        # when jobs come less often than the idle timeout.
        lives = max(1 / LIFETIME_H, min(1, per_hour * math.exp(
            -per_hour / 3600 * IDLE_TIMEOUT_S)))
        def per_hour_of(log):
            fixed = [(log["start"][i] + log["exit"][i]) * lives for i in (0, 1)]
            return [per_hour * log["job"][i] + fixed[i] for i in (0, 1)]
        text, js = per_hour_of(logs["text"]), per_hour_of(logs["json"])
        with_emf = js[1] + emf_lines * emf["interval_line_bytes"] + \
            lives * emf["exit_line_bytes"]
        out.append(f"| {name} | {polls:.0f} | {fmt(text[0])} | {size(text[1])} | "
                   f"{size(js[1])} | {size(with_emf)} | "
                   f"{emf_lines * EMF_INTERVAL_METRICS:.0f} |")
    out.append("")
    out.append("### CloudWatch a month, the whole fleet (JSON + EMF, "
               f"${PRICES['log_ingest_per_gb']:.2f}/GB ingested, "
               f"${PRICES['metric_per_month']:.2f} a metric)")
    out.append("")
    out.append("| jobs per worker | " + " | ".join(f"N = {n:,}" for n in FLEETS) + " |")
    out.append("| --- |" + " --- |" * len(FLEETS))
    for name, per_hour in RATES:
        lives = max(1 / LIFETIME_H, min(1, per_hour * math.exp(
            -per_hour / 3600 * IDLE_TIMEOUT_S)))
        js = logs["json"]
        per_worker = (per_hour * js["job"][1] + (js["start"][1] + js["exit"][1]) * lives
                      + emf_lines * emf["interval_line_bytes"]
                      + lives * emf["exit_line_bytes"])
        cells = []
        for n in FLEETS:
            gb = n * per_worker * HOURS_PER_MONTH / 1e9
            cost = gb * PRICES["log_ingest_per_gb"] + EMF_METRICS * PRICES["metric_per_month"]
            cells.append(f"{fmt(gb)} GB: ${fmt(cost)}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("")
    out.append(f"EMF metrics: {EMF_METRICS} (the dimensions name the fleet, not "
               f"the task), ${EMF_METRICS * PRICES['metric_per_month']:.2f} a month "
               "at any N; their data points are not billed.")
    out.append("")
    out.append("### `reap` over 10,000 workers (--concurrency 64), "
               "extrapolated from 2,000")
    out.append("")
    out.append("| transport | reap's CPU | wall time here (the stub on the "
               "same 2 CPUs) | on 2 free CPUs, workers elsewhere | peak RSS |")
    out.append("| --- | --- | --- | --- | --- |")
    for name, r in REAP.items():
        cpu = [x * 10 for x in r["cpu_ms"]]
        wall = [x * 10 for x in r["wall_ms"]]
        out.append(f"| {name} | {cpu[0]:.0f}-{cpu[1]:.0f} s | "
                   f"{wall[0]:.0f}-{wall[1]:.0f} s | "
                   f"~{cpu[0] / 2:.0f}-{cpu[1] / 2:.0f} s (CPU-bound) | "
                   f"{r['peak_mib']} MiB |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--build", default="build")
    t = sub.add_parser("table")
    t.add_argument("--measured", help="a `measure` output (default: MEASURED)")
    args = ap.parse_args()
    if args.command == "measure":
        measure(args.build)
    else:
        measured = MEASURED
        if args.measured:
            with open(args.measured) as f:
                measured = json.load(f)
        print(table(measured))


if __name__ == "__main__":
    main()
