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
import statistics
import subprocess
import sys
import time

END = "<!-- end of the generated part; text below is kept by bench/run.py -->"

# Google Benchmark repetitions; process-bench repetitions per figure.
GBENCH_REPS = 5
START_REPS = 10
STREAM_REPS = 3
REAP_REPS = 3
REAP_CADENCE_S = 15  # serve's default idle poll interval
REAP_IDLE_TIMEOUT_S = 2
FLEET_WORKERS = 200  # issue 14: one reap over 200 workers in < 2 s
FLEET_REPS = 3


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--out", default="docs/PERFORMANCE.md")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    worker = f"{build}/cfdb-worker"
    process = f"{build}/bench/process-bench"
    started = time.monotonic()

    g = gbench(build)
    ws = json.loads(run([process, "start", "--reps", str(START_REPS), "--",
                         worker, "serve", "--port", "0"]))
    bs = json.loads(run([process, "start", "--reps", str(START_REPS), "--",
                         f"{build}/bench/bare-server", "--port", "0"]))
    st = json.loads(run([process, "stream", "--worker", worker, "--mib", "1024",
                         "--reps", str(STREAM_REPS)]))
    rp = json.loads(run([process, "reap", "--worker", worker, "--reps", str(REAP_REPS),
                         "--idle-timeout", str(REAP_IDLE_TIMEOUT_S)]))
    fl = json.loads(run([process, "fleet", "--worker", worker, "--workers",
                         str(FLEET_WORKERS), "--reps", str(FLEET_REPS)]))
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
                 f"{ew / ep:.2f}×, +{fmt(ew - ep)} µs", "≤ 1.5×", verdict(ew / ep <= 1.5)))
    er, ed = c("ExecTrue/RunExecDirect", "p50_us"), c("ExecTrue/WorkerDirect", "p50_us")
    rows.append(("the same without gRPC (p50): `RunExec` alone; via `Worker::Dispatch`",
                 f"{fmt(er)} µs; {fmt(ed)} µs",
                 f"{fmt(ep)} µs (same floor)",
                 f"{er / ep:.2f}×; {ed / ep:.2f}×", "— (where the time goes)", "—"))
    sw, sc = med(st["worker_mib_per_s"]), med(st["cat_mib_per_s"])
    growth = max(st["worker_rss_growth_kib"]) / 1024
    rows.append((f"stdout of `cat` on {st['mib'] // 1024} GiB, through `dispatch`",
                 f"{fmt(sw, 0)} MiB/s; worker peak RSS +{fmt(growth)} MiB (worst run)",
                 f"{fmt(sc, 0)} MiB/s (local `cat` into a pipe)",
                 f"{sw / sc:.2f}×", "≥ 0.5×; RSS < +64 MiB",
                 verdict(sw / sc >= 0.5 and growth < 64)))
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
    ov = med(rp["overshoot_ms"]) / 1000
    rows.append((f"reap overshoot: exit − (start + {REAP_IDLE_TIMEOUT_S} s), "
                 f"idle timeout {REAP_IDLE_TIMEOUT_S} s, default cadence",
                 f"{ov:.3f} s (max {max(rp['overshoot_ms']) / 1000:.3f} s)",
                 f"{REAP_CADENCE_S} s (the cadence: a fixed-cadence reaper's overshoot)",
                 f"{ov / REAP_CADENCE_S:.3f}×", "< 0.1×",
                 verdict(ov / REAP_CADENCE_S < 0.1)))

    dry = med(fl["dry_run_ms"]) / 1000
    stop = fl["stop_ms"] / 1000
    rows.append((f"`cfdb-worker reap` over {fl['workers']} local workers: wall time "
                 "(dry run; the run that stops them all)",
                 f"{dry:.3f} s; {stop:.3f} s ({dry / fl['workers'] * 1000:.1f} ms; "
                 f"{stop / fl['workers'] * 1000:.1f} ms per worker)",
                 "—", "—", "< 2 s", verdict(max(dry, stop) < 2)))

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
        f"processes each, streaming {STREAM_REPS} runs, reaping {REAP_REPS} "
        f"workers, the fleet reap {FLEET_REPS} dry runs then one that stops; "
        "medians.",
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
        "thread or log. Streaming reads `cat` of a sparse file through "
        "`cfdb-worker dispatch` into a pipe the benchmark drains; the floor is "
        "`cat` of the same file into the same reader. Peak RSS is VmHWM after "
        "resetting it (`/proc/PID/clear_refs`) minus VmRSS before the run. "
        "Allocations are counted by a replaced `operator new` in the benchmark.",
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
