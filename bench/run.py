#!/usr/bin/env python3
"""Runs every benchmark with its floor and writes docs/PERFORMANCE.md.

    python3 bench/run.py --build build-bench --out docs/PERFORMANCE.md

worker-bench (Google Benchmark) gives the in-process figures, process-bench
the whole-process ones. Everything in the table is a median over repetitions
of this one run; the text after the END marker in the output file is kept.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

END = "<!-- end of the generated part; text below is kept by bench/run.py -->"

# Google Benchmark repetitions; process-bench repetitions per figure.
GBENCH_REPS = 5
START_REPS = 10
# Streaming (process-bench pipes): every direction at 1 GiB, then output and
# input once at 8 GiB, for peak RSS at a size far past any buffer.
PIPES_MIB = 1024
PIPES_REPS = 5
PIPES_BIG_MIB = 8192
PIPES_BIG_REPS = 1
RSS_LIMIT_MIB = 64
CPU_RATIO = 1.3  # issue 24: worker CPU per GiB and per job vs the floor's
EXEC_JOBS = 200  # process-bench exec: calls of /bin/true per run and server
EXEC_REPS = 5
# The job start after a pause: a cgroup.procs write then waits a whole RCU
# grace period, which a stream of back-to-back jobs hides.
PAUSED_JOBS = 20
PAUSED_REPS = 3
PAUSED_MS = 500
DETACHED_MIB = 512  # jobs as handles: attached vs detached, read by attach
DETACHED_REPS = 5
DETACHED_JOBS = 4  # detached jobs filling their buffers at once
TRICKLE_REPS = 5  # runs of 20 lines, 100 ms apart
RETIRE_REPS = 3
IDLE_POLL_CADENCE_S = 15  # serve's default idle poll interval
RETIRE_IDLE_TIMEOUT_S = 2
FLEET_WORKERS = 200  # issue 14: one reap over 200 workers in < 2 s
FLEET_REPS = 3
# reap against fleet-stub (one process, many ports of idle workers): the
# client's own cost, where that many real workers would not fit.
STUB_PORTS = 2000
STUB_REPS = 3
FLEET_SCALE = 10000  # the fleet the stub figures are extrapolated to


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout


def machine():
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    nproc = subprocess.run(["nproc"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return nproc, model, platform.release()


def gbench(build):
    out = run([f"{build}/bench/worker-bench",
               f"--benchmark_repetitions={GBENCH_REPS}",
               "--benchmark_report_aggregates_only=true",
               "--benchmark_format=json"])
    medians = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        # run_name is e.g. "NoopJob/BareStream/iterations:188/real_time/threads:16".
        parts = b["run_name"].split("/")
        name = "/".join(parts[:2])
        medians[(name, b.get("threads", 1))] = b
    return medians


def med(values):
    return statistics.median(values)


def fmt(x, digits=1):
    return f"{x:,.{digits}f}"


def verdict(ok):
    return "met" if ok else "**missed**"


def size(mib):
    return f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib} MiB"


def rate(series):
    """'median MiB/s (min-max)' of a carrier's rates."""
    r = series["mib_per_s"]
    if len(r) == 1:
        return f"{fmt(r[0], 0)} MiB/s"
    return f"{fmt(med(r), 0)} MiB/s ({fmt(min(r), 0)}-{fmt(max(r), 0)})"


def pipes_rows(pp, pb):
    """The streaming rows: each direction against its bare pipeline, peak RSS
    at both sizes, and the local pipelines and CPU as context."""
    gib = size(pp["mib"])
    ours = {d: pp[d]["ours"] for d in ("output", "input", "both")}
    bare = {d: pp[d]["bare"] for d in ("output", "input", "both")}
    m = {d: med(ours[d]["mib_per_s"]) for d in ours}
    f = {d: med(bare[d]["mib_per_s"]) for d in bare}
    floor_note = "(`bench/bare_pipe.cc`, same shape and chunks)"
    rows = []
    for d, what, target in (
            ("output", f"job stdout: `cat` of {gib} in the job, through "
                       "`dispatch --no-stdin`, drained", 0.9),
            ("input", f"job stdin: `cat` of {gib} piped into "
                      f"`dispatch -- {os.path.basename(pp['input_job'])}`", 0.8)):
        rows.append((what, rate(ours[d]), f"{rate(bare[d])} {floor_note}",
                     f"{m[d] / f[d]:.2f}×", f"≥ {target}×",
                     verdict(m[d] / f[d] >= target)))
    slower = min(("output", "input"), key=lambda d: f[d])
    rows.append((f"both: `cat` of {gib} piped through `dispatch -- cat`, drained",
                 rate(ours["both"]),
                 f"{fmt(f[slower], 0)} MiB/s (the slower floor, bare {slower}); "
                 f"bare both ways {rate(bare['both'])}",
                 f"{m['both'] / f[slower]:.2f}× ({m['both'] / f['both']:.2f}× "
                 "bare both ways)", "≥ 0.7× the slower floor",
                 verdict(m["both"] / f[slower] >= 0.7)))

    def growth(p, carrier):
        """Worst server and client peak RSS growth (MiB) over p's runs."""
        idle = med(p["idle_client_peak_kib"][carrier])
        runs = [p[d][carrier] for d in ("output", "input", "both") if d in p]
        server = max(max(r["server_growth_kib"]) for r in runs) / 1024
        client = max(max(r["client_peak_kib"]) for r in runs) / 1024 - idle / 1024
        return server, client, idle / 1024

    for p, dirs in ((pp, "output, input, both"), (pb, "output, input")):
        ws, wc, wi = growth(p, "ours")
        bs, bc, bi = growth(p, "bare")
        runs = f"{p['reps']} run{'s' if p['reps'] > 1 else ''} each"
        rows.append((f"peak RSS growth while streaming {size(p['mib'])} "
                     f"({dirs}; {runs}): worker; `dispatch`",
                     f"+{fmt(ws)} MiB; +{fmt(wc)} MiB (worst run; client over an "
                     f"idle `dispatch`'s {fmt(wi)} MiB)",
                     f"bare server +{fmt(bs)} MiB; bare client +{fmt(bc)} MiB "
                     f"(over {fmt(bi)} MiB)", "—",
                     f"< +{RSS_LIMIT_MIB} MiB each",
                     verdict(max(ws, wc) < RSS_LIMIT_MIB)))

    rows += cpu_rows(pp)
    dirs = ("output", "input", "both")
    local = {d: med(pp[d]["local"]["mib_per_s"]) for d in dirs}
    rows.append(("the same programs as a local pipeline, no gRPC (output; "
                 "input; both)",
                 "; ".join(f"{fmt(m[d], 0)}" for d in dirs) + " MiB/s through the worker",
                 "; ".join(f"{fmt(local[d], 0)}" for d in dirs) + " MiB/s local "
                 "(`cat` → pipe; `cat \\| " + os.path.basename(pp["input_job"]) +
                 "`; `cat \\| cat` → pipe)",
                 "; ".join(f"{m[d] / local[d]:.2f}×" for d in dirs),
                 "— (context)", "—"))
    return rows


def spread(values, unit="", digits=2):
    """'median (min-max)' of one figure's values over runs."""
    return (f"{fmt(med(values), digits)}{unit} ({fmt(min(values), digits)}-"
            f"{fmt(max(values), digits)})")


def paired(ours, bare):
    """The ratio of the medians, and the range of the run-by-run ratios
    (each run of ours against the floor's run next to it)."""
    each = [o / b for o, b in zip(ours, bare) if b > 0]
    return (f"{med(ours) / med(bare):.2f}× (run by run "
            f"{min(each):.2f}-{max(each):.2f}×)"), med(ours) / med(bare)


def cpu_rows(pp):
    """CPU seconds per GiB of each direction: the worker's against the bare
    server's (a verdict), `dispatch`'s against the bare client's."""
    per_gib = pp["mib"] / 1024
    what = {"output": "output (`cat` in the job)",
            "input": f"input (`\\| {os.path.basename(pp['input_job'])}`)",
            "both": "both (`\\| cat \\|`)"}
    rows = []
    for d in ("output", "input", "both"):
        if d not in pp:
            continue
        ours, bare = pp[d]["ours"], pp[d]["bare"]
        for side, floor, target in (("server", "bare server", CPU_RATIO),
                                    ("client", "bare client", None)):
            o = [x / per_gib for x in ours[f"{side}_cpu_s"]]
            b = [x / per_gib for x in bare[f"{side}_cpu_s"]]
            ratio, r = paired(o, b)
            name = "worker" if side == "server" else "`dispatch`"
            rows.append((f"{name} CPU per GiB, {what[d]}", spread(o, " s"),
                         f"{spread(b, ' s')} ({floor})", ratio,
                         f"≤ {target}×" if target else "— (stated)",
                         verdict(r <= target) if target else "—"))
    return rows


def exec_rows(ex):
    """The job start through whole processes: `/bin/true` per job, the
    worker against the bare pipeline's server, CPU and wall time."""
    ours, bare = ex["ours"], ex["bare"]
    cpu, r = paired(ours["server_cpu_us_per_job"], bare["server_cpu_us_per_job"])
    wall, w = paired(ours["p50_us"], bare["p50_us"])
    floor = "(`bench/bare_pipe.cc` server: `posix_spawn` + `waitpid`)"
    return [
        (f"worker CPU per job, `exec` of `/bin/true` ({ex['jobs']} calls a run "
         "on one channel, in turn)",
         spread(ours["server_cpu_us_per_job"], " µs", 0),
         f"{spread(bare['server_cpu_us_per_job'], ' µs', 0)} {floor}",
         cpu, f"≤ {CPU_RATIO}×", verdict(r <= CPU_RATIO)),
        ("the same calls' wall time, call → end of stream (p50; p99 median)",
         f"{spread(ours['p50_us'], ' µs', 0)}; {fmt(med(ours['p99_us']), 0)} µs",
         f"{spread(bare['p50_us'], ' µs', 0)}; {fmt(med(bare['p99_us']), 0)} µs "
         "(same)", wall, f"≤ {CPU_RATIO}×", verdict(w <= CPU_RATIO)),
    ]


def without_clone3(build, worker):
    """A wrapper that runs `worker` where the kernel refuses clone3
    (tests/support/no_clone3.py), so its jobs start the vfork way."""
    path = os.path.join(build, "worker-without-clone3")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec /usr/bin/python3 "
                f"{here}/../tests/support/no_clone3.py {worker} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def paused_rows(px, pv):
    """The job start after a pause, clone3 into the cgroup and the vfork
    fallback's cgroup.procs write, each against posix_spawn in the same
    run."""
    wall, w = paired(px["ours"]["p50_us"], px["bare"]["p50_us"])
    vwall, _ = paired(pv["ours"]["p50_us"], pv["bare"]["p50_us"])
    floor = "(`bare-pipe`: `posix_spawn` + `waitpid`, no cgroup)"
    return [
        (f"`exec` of `/bin/true` {PAUSED_MS} ms after the last job ends, "
         "call → end of stream (p50; p99 median): clone3 into the job's "
         "cgroup",
         f"{spread(px['ours']['p50_us'], ' µs', 0)}; "
         f"{fmt(med(px['ours']['p99_us']), 0)} µs",
         f"{spread(px['bare']['p50_us'], ' µs', 0)}; "
         f"{fmt(med(px['bare']['p99_us']), 0)} µs {floor}",
         wall, f"≤ {CPU_RATIO}×", verdict(w <= CPU_RATIO)),
        ("the same where the kernel refuses clone3 (the fallback: vfork, "
         "then a `cgroup.procs` write, which waits for an RCU grace period)",
         f"{spread(pv['ours']['p50_us'], ' µs', 0)}; "
         f"{fmt(med(pv['ours']['p99_us']), 0)} µs",
         f"{spread(pv['bare']['p50_us'], ' µs', 0)}; "
         f"{fmt(med(pv['bare']['p99_us']), 0)} µs (same)",
         vwall, "— (what clone3 saves)", "—"),
    ]


def knob_default(worker, flag):
    """A serve knob's default as `serve --help` states it (the knob table's),
    as a number."""
    text = run([worker, "serve", "--help"])
    m = re.search(re.escape(flag) + r"[^\n]*?\(default ([0-9.]+)\)", text)
    if m is None:
        sys.exit(f"bench: no default for {flag} in serve --help")
    return float(m.group(1))


def detached_rows(dt, buffer_mib):
    """Jobs as handles: a detached job's output read later by `attach`,
    against the same job attached, and the memory of full buffers."""
    a, later = dt["attached"], dt["attach_later"]
    ratio = med(later["mib_per_s"]) / med(a["mib_per_s"])
    per_gib = dt["mib"] / 1024
    k = dt["jobs"]
    # The documented bound (docs/RELIABILITY.md): K buffers in flight and as
    # much again for retained results, plus the outcomes (~4 MiB at most).
    bound = 2 * k * buffer_mib + 4
    growth = dt["full_buffers_growth_kib"] / 1024
    return [
        (f"a detached job's output ({size(dt['mib'])}, `cat`), read later by "
         "`attach` from offset 0, byte-exact",
         rate(later), f"{rate(a)} (the same job through `dispatch`, attached)",
         f"{ratio:.2f}×", "≥ 0.8×", verdict(ratio >= 0.8)),
        ("worker CPU per GiB: read later by `attach`; attached",
         f"{med(later['server_cpu_s']) / per_gib:.2f} s",
         f"{med(a['server_cpu_s']) / per_gib:.2f} s", "—", "—", "—"),
        (f"worker peak RSS growth, {k} detached jobs (= max_concurrent_tasks) "
         f"each filling its {fmt(buffer_mib, 0)} MiB buffer",
         f"+{fmt(growth)} MiB", f"{bound} MiB (the documented bound: "
         f"2 × {k} × {fmt(buffer_mib, 0)} MiB + 4 MiB of outcomes)",
         f"{growth / bound:.2f}×", "within the bound", verdict(growth <= bound)),
    ]


def stub_pki(directory):
    """A CA, a server certificate for SAN stub.fleet and a client
    certificate, as PEM files in `directory` (ca.pem, server.pem, server.key,
    client.pem, client.key), made by scripts/test-pki.sh."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "scripts", "test-pki.sh")
    subprocess.run([script, directory, "ca", "fleet-stub CA"], check=True)
    for name, san, usage in (("server", "DNS:stub.fleet", "serverAuth"),
                             ("client", "DNS:reaper.fleet", "clientAuth")):
        subprocess.run([script, directory, "leaf", name, san, usage],
                       check=True)


def fleet_rows(build, process, worker):
    """`reap` over real local workers, and over fleet-stub ports (plaintext
    and mutual TLS), extrapolated to FLEET_SCALE workers."""
    fl = json.loads(run([process, "fleet", "--worker", worker, "--workers",
                         str(FLEET_WORKERS), "--reps", str(FLEET_REPS)]))
    stub = [process, "stub-fleet", "--worker", worker, "--stub",
            f"{build}/bench/fleet-stub", "--workers", str(STUB_PORTS),
            "--reps", str(STUB_REPS)]
    st = json.loads(run(stub))
    with tempfile.TemporaryDirectory() as pki:
        stub_pki(pki)
        tl = json.loads(run(stub + ["--tls", pki]))

    rows = []
    n = fl["workers"]
    dry = med(fl["dry"]["wall_ms"]) / 1000
    stop = fl["stop"]["wall_ms"][0] / 1000
    exit_cpu = fl["worker_stop_cpu_s"]
    rows.append((f"`cfdb-worker reap` over {n} local workers: wall time "
                 "(dry run; the run that stops them all)",
                 f"{dry:.3f} s; {stop:.3f} s ({dry / n * 1000:.1f} ms; "
                 f"{stop / n * 1000:.1f} ms per worker)",
                 "—", "—", "< 2 s", verdict(max(dry, stop) < 2)))
    rows.append((f"where that stop run's time goes: reap's CPU; the workers' "
                 f"CPU from the stop to their exit; the last exit",
                 f"{fl['stop']['cpu_s'][0]:.2f} s; {sum(exit_cpu):.2f} s in all, "
                 f"{med(exit_cpu) * 1000:.0f} ms per worker (median); "
                 f"{max(fl['worker_exit_ms']) / 1000:.3f} s after reap started",
                 f"{n} workers' exits on {os.cpu_count()} CPUs: "
                 f"≥ {sum(exit_cpu) / os.cpu_count():.2f} s",
                 "—", "— (where the time goes)", "—"))
    for r, what in ((st, "plaintext"), (tl, "mutual TLS")):
        ports = r["ports"]
        for kind in ("dry", "stop"):
            wall = med(r[kind]["wall_ms"]) / 1000
            cpu = med(r[kind]["cpu_s"])
            rows.append((
                f"`reap` alone: {ports} ports of `bench/fleet_stub.cc` "
                f"(idle workers that stay), {what}, "
                f"{'dry run' if kind == 'dry' else 'stopping'}, "
                f"--concurrency {r['concurrency']}: wall; reap's CPU; peak RSS; "
                "most sockets at once",
                f"{wall:.2f} s; {cpu:.2f} s ({cpu / ports * 1000:.2f} ms a "
                f"worker); {max(r[kind]['peak_kib']) / 1024:.1f} MiB; "
                f"{max(r[kind]['most_sockets']):.0f}",
                f"{FLEET_SCALE:,}: {wall / ports * FLEET_SCALE:.0f} s wall, "
                f"{cpu / ports * FLEET_SCALE:.0f} s CPU (× {FLEET_SCALE // ports})",
                "—", "— (channels ≤ concurrency; a done connection's socket "
                "closes a moment after its channel)", "—"))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--out", default="docs/PERFORMANCE.md")
    ap.add_argument("--only", choices=["fleet"],
                    help="run only this part and print its rows; write nothing")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    worker = f"{build}/cfdb-worker"
    process = f"{build}/bench/process-bench"
    started = time.monotonic()
    if args.only == "fleet":
        for row in fleet_rows(build, process, worker):
            print("| " + " | ".join(row) + " |")
        return

    g = gbench(build)
    ws = json.loads(run([process, "start", "--reps", str(START_REPS), "--",
                         worker, "serve", "--port", "0"]))
    bs = json.loads(run([process, "start", "--reps", str(START_REPS), "--",
                         f"{build}/bench/bare-server", "--port", "0"]))
    pipes = [process, "pipes", "--worker", worker, "--bare", f"{build}/bench/bare-pipe"]
    pp = json.loads(run(pipes + ["--mib", str(PIPES_MIB), "--reps", str(PIPES_REPS)]))
    pb = json.loads(run(pipes + ["--mib", str(PIPES_BIG_MIB), "--reps", str(PIPES_BIG_REPS),
                                 "--directions", "output,input"]))
    ex = json.loads(run([process, "exec", "--worker", worker, "--bare",
                         f"{build}/bench/bare-pipe", "--jobs", str(EXEC_JOBS),
                         "--reps", str(EXEC_REPS)]))
    paused = [process, "exec", "--bare", f"{build}/bench/bare-pipe", "--jobs",
              str(PAUSED_JOBS), "--reps", str(PAUSED_REPS), "--pause-ms",
              str(PAUSED_MS)]
    px = json.loads(run(paused + ["--worker", worker]))
    pv = json.loads(run(paused + ["--worker", without_clone3(build, worker)]))
    dt = json.loads(run([process, "detached", "--worker", worker, "--mib",
                         str(DETACHED_MIB), "--reps", str(DETACHED_REPS),
                         "--jobs", str(DETACHED_JOBS)]))
    tr = json.loads(run([process, "trickle", "--worker", worker, "--reps",
                         str(TRICKLE_REPS)]))
    rt = json.loads(run([process, "retire", "--worker", worker, "--reps", str(RETIRE_REPS),
                         "--idle-timeout", str(RETIRE_IDLE_TIMEOUT_S)]))
    fleet = fleet_rows(build, process, worker)
    elapsed = time.monotonic() - started

    def c(name, key, threads=1):
        b = g[(name, threads)]
        return b[key] if key in b else b["counters"][key]

    rows = []
    ic, ib = c("Idle/WorkerConnection", "p50_us"), c("Idle/BareStub", "p50_us")
    rows.append(("`Idle` round trip p50, `WorkerConnection`", f"{fmt(ic)} µs",
                 f"{fmt(ib)} µs (generated stub, bare callback server)",
                 f"{ic / ib:.2f}×", "≤ 1.10×", verdict(ic / ib <= 1.10)))
    i99, b99 = c("Idle/WorkerConnection", "p99_us"), c("Idle/BareStub", "p99_us")
    rows.append(("`Idle` round trip p99, `WorkerConnection`", f"{fmt(i99)} µs",
                 f"{fmt(b99)} µs (same)", f"{i99 / b99:.2f}×", "—", "—"))
    sp = c("Idle/WhileScrapedEverySecond", "p50_us")
    scrapes = int(c("Idle/WhileScrapedEverySecond", "scrapes"))
    rows.append((f"`Idle` p50 while `/metrics` is scraped once a second "
                 f"({scrapes} scrapes)", f"{fmt(sp)} µs",
                 f"{fmt(ic)} µs (`Idle` p50, unscraped)", f"{sp / ic:.2f}×",
                 "≤ 1.05×", verdict(sp / ic <= 1.05)))
    render = c("Scrape/Render", "cpu_time")
    rows.append(("a scrape's CPU in the worker: read the worker and "
                 "`/proc`, render the text", f"{fmt(render)} µs", "—", "—",
                 "≤ 1 ms", verdict(render <= 1000)))
    http = c("Scrape/HttpRoundTrip", "p50_us")
    rows.append(("a whole scrape over HTTP, p50 (a connection each)",
                 f"{fmt(http)} µs (p99 "
                 f"{fmt(c('Scrape/HttpRoundTrip', 'p99_us'))} µs)",
                 f"{fmt(render)} µs (the render alone)",
                 f"{http / render:.2f}×", "—", "—"))
    l99 = c("Idle/UnderStreamingLoad", "p99_us")
    jobs = int(c("Idle/UnderStreamingLoad", "jobs"))
    rate = c("Idle/UnderStreamingLoad", "stream_MiB_per_s")
    rows.append((f"`Idle` p99 while {jobs} jobs (= max_concurrent_tasks = CPUs) "
                 f"stream `cat /dev/zero` ({fmt(rate, 0)} MiB/s)",
                 f"{fmt(l99)} µs (p50 {fmt(c('Idle/UnderStreamingLoad', 'p50_us'))} µs)",
                 f"{fmt(i99)} µs (`Idle` p99, idle worker)",
                 f"{l99 / i99:.2f}×", "≤ 3×", verdict(l99 / i99 <= 3)))
    u99 = c("Idle/UnderCpuLoad", "p99_us")
    rows.append((f"`Idle` p99 while {int(c('Idle/UnderCpuLoad', 'jobs'))} jobs burn CPU "
                 "without output (a shell loop at the default `--job-nice` 10)",
                 f"{fmt(u99)} µs (p50 {fmt(c('Idle/UnderCpuLoad', 'p50_us'))} µs)",
                 f"{fmt(i99)} µs (`Idle` p99, idle worker)",
                 f"{u99 / i99:.2f}×", "≤ 3×", verdict(u99 / i99 <= 3)))
    for threads in (1, 2):
        d = c("Docket/AdmitRelease", "real_time", threads)
        allocs = c("Docket/AdmitRelease", "allocs_per_op", threads)
        e = c("Floor/EmptyLoop", "real_time", threads)
        m = c("Floor/MutexLockUnlock", "real_time", threads)
        now = c("Floor/SteadyClockNow", "real_time")
        rows.append((f"docket Admit+Release pair, {threads} thread{'s' if threads > 1 else ''}",
                     f"{fmt(d)} ns, " + ("0 allocations/pair" if allocs == 0 else
                                         f"{allocs:.0e} allocations/pair (a few in all, not per pair)"),
                     f"empty loop {fmt(e, 2)} ns; `absl::Mutex` lock+unlock {fmt(m)} ns"
                     + ("" if threads > 1 else f"; `SteadyClock::Now` {fmt(now)} ns"),
                     f"{d / m:.1f}× the lock", "tens of ns, 0 allocations",
                     verdict(d < 100 and allocs < 1e-3)))
    for callers in (1, 16):
        w = c("NoopJob/WorkerConnection", "items_per_second", callers)
        b = c("NoopJob/BareStream", "items_per_second", callers)
        rows.append((f"no-op in-process job, {callers} concurrent caller{'s' if callers > 1 else ''}",
                     f"{fmt(w, 0)} jobs/s",
                     f"{fmt(b, 0)} calls/s (bare server-streaming RPC, 2 messages each)",
                     f"{w / b:.2f}×", "≥ 0.8×", verdict(w / b >= 0.8)))
    ew, ep = c("ExecTrue/WorkerConnection", "p50_us"), c("ExecTrue/PosixSpawnWaitpid", "p50_us")
    rows.append(("`exec` of `/bin/true`, per job (p50)",
                 f"{fmt(ew)} µs (p99 {fmt(c('ExecTrue/WorkerConnection', 'p99_us'))} µs)",
                 f"{fmt(ep)} µs (`posix_spawn` + `waitpid`)",
                 f"{ew / ep:.2f}×, +{fmt(ew - ep)} µs", f"≤ {CPU_RATIO}×",
                 verdict(ew / ep <= CPU_RATIO)))
    er, ed = c("ExecTrue/RunExecDirect", "p50_us"), c("ExecTrue/WorkerDirect", "p50_us")
    rows.append(("the same without gRPC (p50): `RunExec` alone; via `Worker::Dispatch`",
                 f"{fmt(er)} µs; {fmt(ed)} µs",
                 f"{fmt(ep)} µs (same floor)",
                 f"{er / ep:.2f}×; {ed / ep:.2f}×", "— (where the time goes)", "—"))
    rows += exec_rows(ex)
    rows += paused_rows(px, pv)
    rows += pipes_rows(pp, pb)
    rows += detached_rows(dt, knob_default(worker, "--job-output-buffer-mib"))
    first, line = med(tr["first_line_ms"]), max(tr["line_ms"])
    rows.append(("`producer \\| dispatch -- cat`, a line every 100 ms, never "
                 "closed: spawn → first line back (the job started); each "
                 "later line's write → return (worst)",
                 f"{fmt(first)} ms (max {fmt(max(tr['first_line_ms']))} ms); "
                 f"{fmt(line)} ms (p50 {fmt(med(tr['line_ms']))} ms)",
                 "100 ms; 200 ms (the issue's bounds)", "—",
                 "< 100 ms; < 200 ms",
                 verdict(max(tr["first_line_ms"]) < 100 and line < 200)))
    cw, cb = med(ws["cold_start_ms"]), med(bs["cold_start_ms"])
    rows.append(("cold start: exec → first answered `Idle`", f"{fmt(cw)} ms",
                 f"{fmt(cb)} ms (`bench/bare_server.cc`)", f"{cw / cb:.2f}×", "≤ 1.5×",
                 verdict(cw / cb <= 1.5)))
    rw, rb = med(ws["rss_kib"]) / 1024, med(bs["rss_kib"]) / 1024
    rows.append(("resident memory, idle worker (VmRSS)", f"{fmt(rw)} MiB",
                 f"{fmt(rb)} MiB (bare server)", f"{rw / rb:.2f}×", "≤ 1.5×",
                 verdict(rw / rb <= 1.5)))
    rows.append(("SIGTERM → process exit, empty docket",
                 f"{fmt(med(ws['sigterm_exit_ms']))} ms (max {fmt(max(ws['sigterm_exit_ms']))} ms)",
                 "—", "—", "stated", "—"))
    bn = c("Backoff/StopNoticed", "p50_us")
    rows.append(("stop noticed by `Backoff::Wait` during a 15-minute wait",
                 f"{fmt(bn)} µs (p99 {fmt(c('Backoff/StopNoticed', 'p99_us'))} µs)",
                 "—", "—", "stated", "—"))
    ov = med(rt["overshoot_ms"]) / 1000
    rows.append((f"idle retirement overshoot: exit − (start + {RETIRE_IDLE_TIMEOUT_S} s), "
                 f"idle timeout {RETIRE_IDLE_TIMEOUT_S} s, default cadence",
                 f"{ov:.3f} s (max {max(rt['overshoot_ms']) / 1000:.3f} s)",
                 f"{IDLE_POLL_CADENCE_S} s (the cadence: a fixed-cadence idle poll's overshoot)",
                 f"{ov / IDLE_POLL_CADENCE_S:.3f}×", "< 0.1×",
                 verdict(ov / IDLE_POLL_CADENCE_S < 0.1)))

    rows += fleet

    nproc, model, kernel = machine()
    lines = [
        "# Performance",
        "",
        "Each figure next to its floor, measured in the same run on the same "
        "machine. Reproduce with `make bench` (Release build in `build-bench/`, "
        f"then `bench/run.py`; this run took {elapsed / 60:.1f} min).",
        "",
        f"Machine: {nproc} CPUs (`nproc`), {model}, Linux {kernel}. The machine is "
        "shared with other builds, so figures move from run to run; the ratios "
        "against a floor from the same run are what to read.",
        "",
        f"Repetitions: in-process figures (`bench/worker_bench.cc`, Google Benchmark) "
        f"run {GBENCH_REPS} repetitions and show the median of them; a percentile is "
        "taken over the calls of one repetition (1,500-3,000 `Idle` calls, 400 "
        "execs, 40 stops), then the median over repetitions. Whole-process figures "
        f"(`bench/process_bench.cc`): cold start, memory and SIGTERM {START_REPS} "
        f"processes each, streaming {PIPES_REPS} runs of each direction at "
        f"{PIPES_MIB // 1024} GiB and {PIPES_BIG_REPS} at {PIPES_BIG_MIB // 1024} GiB "
        "(the worker's and the bare pipeline's runs interleaved, A B A B), "
        f"the job start {EXEC_REPS} runs of {EXEC_JOBS} calls on each server, "
        "interleaved, "
        f"jobs as handles {DETACHED_REPS} runs of each at {DETACHED_MIB} MiB, "
        f"idle retirement {RETIRE_REPS} workers, the fleet reap {FLEET_REPS} dry "
        f"runs then one that stops, the stub fleet {STUB_REPS} of each; medians "
        "(with the range where shown).",
        "",
        "| figure | measured (median) | floor, same run (median) | ratio | target | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += [
        "",
        "How each is measured: servers listen on 127.0.0.1 port 0 and are called "
        "over real channels; whole-process figures run the `cfdb-worker` binary "
        "(`serve --port 0`). The in-process worker logs to a null sink (its log "
        "lines are formatted, not written). The floor of the no-op job is "
        "`BareService` (`bench/bare_service.h`): the same proto, a callback "
        "service that writes the two events of a no-op job with no docket, "
        "thread or log. Streaming runs a sparse file through "
        "`cfdb-worker dispatch` and a worker, and, in the same run, the same "
        "shape of bare pipeline (`bench/bare_pipe.cc`: a sync-API gRPC server "
        "on the same proto that spawns the program and copies its pipes, and a "
        "client that copies its stdin and stdout; the worker's chunk sizes, "
        "plaintext, nothing else): output is `cat FILE` in the job, input is "
        "`cat FILE |` the client, both is `cat FILE |` a job `cat`; the "
        "benchmark drains the client's stdout, and the rate is the size over "
        "spawn-to-exit. The server's peak RSS is VmHWM after resetting it "
        "(`/proc/PID/clear_refs`) minus VmRSS before the run; the client's is "
        "its `ru_maxrss` (wait4) minus that of the same client running "
        "`/bin/true`. CPU per GiB is each process's user + system time over the "
        "run (`/proc/PID/stat`; the server's own threads, not its jobs); a CPU "
        "ratio is of the medians, with the range of the ratios of each run to "
        "the floor's run beside it. The job start (`process-bench exec`): "
        f"{EXEC_JOBS} `Dispatch` calls of `/bin/true` in turn on one channel to "
        "the worker, then as many to the bare pipeline's server, per run; the "
        "server's CPU over them divided by their number; after a pause, "
        f"{PAUSED_JOBS} calls {PAUSED_MS} ms apart, {PAUSED_REPS} runs. "
        "Allocations are counted by a replaced `operator new` in the benchmark. "
        "Counts of system calls, context switches and page faults per GiB and "
        "per job: `bench/where.py` (below).",
        "",
        END,
    ]
    kept = ""
    if os.path.exists(args.out):
        with open(args.out) as f:
            text = f.read()
        if END in text:
            kept = text.split(END, 1)[1]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + (kept if kept else "\n"))
    print("\n".join(lines[lines.index("| figure | measured (median) | floor, same run (median) | ratio | target | verdict |"):-2]))
    print(f"wrote {args.out} in {elapsed:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
