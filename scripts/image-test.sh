#!/usr/bin/env bash
# Tests the image scripts/image.sh built ($IMAGE) by running it with podman as
# ECS would: libraries, user, health, a job, idle retirement, SIGTERM, zombie
# reaping with and without an init, the template's own container definition
# over mutual TLS, and the Kubernetes pod manifest under `podman kube play`.
# Each check prints "ok" or "FAILED", and the
# script exits 1 if any failed; what cannot run here fails too, saying why,
# and is never skipped (docs/DEPLOY.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# The storage flags, pod() and die() of the build.
source scripts/image.sh

TEMPLATE=${TEMPLATE:-cloudformation/workers.yml}
RUN_ID="cfdb-image-test-$$"
WORK=$(realpath -m "$IMAGE_BUILD/test")
FAILURES=0
CONTAINERS=()

# ok/FAILED lines: what held, or what was seen instead.
ok() { echo "ok      $1"; }
failed() {
  echo "FAILED  $1"
  shift
  local detail
  # shellcheck disable=SC2001  # indents every line of a multi-line detail
  for detail in "$@"; do sed 's/^/        /' <<<"$detail"; done
  FAILURES=$((FAILURES + 1))
}

now() { date +%s.%N; }
elapsed() { awk -v s="$1" -v e="${2:-$(now)}" 'BEGIN { printf "%.2f", e - s }'; }

# A port nobody listens on now; every container shares the host's network.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Every container shares the host's network (no CNI setup here) and gets
# these limits: runc would otherwise set the image's defaults, above the
# host's, which the sandbox forbids.
ULIMITS=(nofile=20000:20000 nproc=32768:32768)
RUN_FLAGS=(--network host "${ULIMITS[@]/#/--ulimit=}")

# run_container NAME RUN-FLAGS... -- SERVE-ARGS...: a detached container
# named $STARTED, removed at exit (not in a subshell, so cleanup knows it).
run_container() {
  STARTED="$RUN_ID-$1"
  shift
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  CONTAINERS+=("$STARTED")
  pod run -d --name "$STARTED" "${RUN_FLAGS[@]}" "${flags[@]}" "$IMAGE" "$@" >/dev/null
}

# exited CONTAINER SECONDS: waits for it to exit, prints its exit code.
exited() {
  local deadline=$((SECONDS + $2))
  while running "$1"; do
    [ $SECONDS -lt $deadline ] || { echo "none within $2 s"; return; }
    sleep 0.1
  done
  pod inspect --format '{{.State.ExitCode}}' "$1"
}

KUBE_PLAYED=""
cleanup() {
  local c
  for c in "${CONTAINERS[@]}"; do pod rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  [ -z "$KUBE_PLAYED" ] || kube_down "${KUBE_PLAYED%%:*}" "${KUBE_PLAYED#*:}"
}
trap cleanup EXIT

running() { [ "$(pod inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }

# wait_serving CONTAINER PORT [EXEC-FLAGS...]: polls the health check until
# SERVING, for up to 30 s (a slow, shared machine), or until the container
# exits.
wait_serving() {
  local c=$1 port=$2 deadline=$((SECONDS + 30))
  shift 2
  while [ $SECONDS -lt $deadline ] && running "$c"; do
    pod exec "$@" "$c" cfdb-worker health --address "127.0.0.1:$port" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

# The log of a container, for failure details.
log_tail() { pod logs "$1" 2>&1 | tail -n "${2:-5}"; }

# In-container shell snippets (expanded there, hence single quotes): the
# image has no ps, so they read /proc.
# "PID UID-real UID-effective UID-saved UID-fs COMM" per cfdb-worker serve
# process (the serving process and its job guard, a fork of it).
# shellcheck disable=SC2016
SERVE_PROCS='for d in /proc/[0-9]*; do
  c=$(tr "\0" " " < $d/cmdline 2>/dev/null) || continue
  case "$c" in "cfdb-worker serve"*)
    echo "${d#/proc/} $(awk "/^Uid:/ { print \$2, \$3, \$4, \$5 }" $d/status) $(cat $d/comm)";;
  esac
done'
# "PID PPID COMM" of every zombie.
# shellcheck disable=SC2016
ZOMBIES='for d in /proc/[0-9]*; do
  s=$(cat $d/stat 2>/dev/null) || continue
  set -- ${s##*) }
  [ "$1" = Z ] && echo "${d#/proc/} ppid=$2 $(cat $d/comm)"
done; true'

# 1. Every shared library the binary links is in the image.
check_ldd() {
  local out
  if out=$(pod run --rm "${RUN_FLAGS[@]}" --entrypoint ldd "$IMAGE" /usr/local/bin/cfdb-worker 2>&1) &&
    ! grep -q 'not found' <<<"$out"; then
    ok "ldd: all $(grep -c '=>' <<<"$out") libraries of /usr/local/bin/cfdb-worker resolve"
  else
    failed "ldd: unresolved libraries" "$(grep 'not found' <<<"$out" || echo "$out")"
  fi
}

# 1b. No setuid or setgid file: nothing a job runs can gain a uid by exec.
check_setuid() {
  local out
  if out=$(pod run --rm "${RUN_FLAGS[@]}" --entrypoint find "$IMAGE" / -xdev \
    -type f -perm /6000 2>&1) && [ -z "$out" ]; then
    ok "setuid: no setuid or setgid file in the image"
  else
    failed "setuid: setuid or setgid files in the image" "$out"
  fi
}

# 2. The serving process is cfdb-worker (10001) in every uid, though the
# container starts as root.
check_user() {
  local c=$1 what=$2 procs serving
  procs=$(pod exec "$c" sh -c "$SERVE_PROCS" 2>&1) || true
  serving=$(awk '$6 == "cfdb-worker"' <<<"$procs")
  local user
  user=$(pod exec "$c" sh -c "getent passwd 10001 | cut -d: -f1" 2>&1) || true
  if [ -n "$serving" ] && [ "$user" = cfdb-worker ] &&
    awk '$2 != 10001 || $3 != 10001 || $4 != 10001 || $5 != 10001 { bad = 1 } END { exit bad }' <<<"$serving"; then
    ok "user ($what): serve runs as uid 10001 ($user): $(tr '\n' ';' <<<"$procs" | sed 's/;$//')"
  else
    failed "user ($what): serve is not uid 10001 cfdb-worker" "processes (pid uids comm): $procs" "uid 10001: $user"
  fi
}

# 3. The health check answers SERVING from inside the container.
check_health() {
  local c=$1 port=$2 out rc=0
  out=$(pod exec "$c" cfdb-worker health --address "127.0.0.1:$port" 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    ok "health: SERVING on 127.0.0.1:$port (exit 0)"
  else
    failed "health: exit $rc" "$out" "$(log_tail "$c")"
  fi
}

# 4. A job runs and its output comes back.
check_dispatch() {
  local c=$1 port=$2 out rc=0
  out=$(pod exec "$c" cfdb-worker dispatch --address "127.0.0.1:$port" --no-stdin -- echo hi 2>&1) || rc=$?
  if [ $rc -eq 0 ] && [ "$out" = hi ]; then
    ok "dispatch: 'echo hi' printed hi (exit 0)"
  else
    failed "dispatch: exit $rc, output '$out'" "$(log_tail "$c")"
  fi
}

# 5. An idle worker retires itself and exits 0.
check_idle_exit() {
  local port c start rc
  port=$(free_port)
  start=$(now)
  run_container idle -- --host 127.0.0.1 --port "$port" \
    --idle-timeout-seconds 2 --idle-poll-interval-seconds 0.5
  c=$STARTED
  rc=$(exited "$c" 60)
  # Read whole, then searched: under pipefail, `pod logs | grep -q` fails
  # when grep ends first and pod logs writes on (SIGPIPE), as it did in CI.
  local logs
  logs=$(pod logs "$c" 2>&1) || true
  if [ "$rc" = 0 ] && grep -q 'exiting: idle' <<<"$logs"; then
    ok "idle: exited 0 by itself $(elapsed "$start") s after start (timeout 2 s)"
  else
    failed "idle: exit code $rc" "$(log_tail "$c")"
  fi
}

# 6. SIGTERM (podman stop, the image's STOPSIGNAL) with a job in flight:
# the worker exits 0 within 1 s, the client hears that its job was
# cancelled (exit 125) and the worker's drain line counts it. The client runs
# in a second container of the image on the same loopback: one exec'd into
# the worker's container is killed with its PID namespace (exit 137) before
# it can report.
check_sigterm() {
  local c=$1 port=$2 job_rc="$WORK/sigterm-job.rc" client="$RUN_ID-sigterm-client"
  local start finished stop_out rc=0
  rm -f "$job_rc"
  CONTAINERS+=("$client")
  (
    r=0
    pod run --rm --name "$client" "${RUN_FLAGS[@]}" --entrypoint cfdb-worker "$IMAGE" \
      dispatch --address "127.0.0.1:$port" --no-stdin -- sleep 60 >/dev/null 2>&1 || r=$?
    echo "$r" >"$job_rc"
  ) &
  local job=$!
  # Busy means the job is in the docket: idle reads 0 only then.
  local deadline=$((SECONDS + 20)) busy=""
  while [ $SECONDS -lt $deadline ]; do
    busy=$(pod exec "$c" cfdb-worker idle --address "127.0.0.1:$port" 2>/dev/null) || true
    awk -v x="$busy" 'BEGIN { exit !(x + 0 == 0 && x != "") }' && break
    sleep 0.2
  done
  start=$(now)
  stop_out=$(pod stop -t 10 "$c" 2>&1) || rc=$?
  local stop_seconds
  stop_seconds=$(elapsed "$start")
  # When the container's process ended, as conmon saw it, not when podman
  # finished its own cleanup.
  finished=$(pod inspect --format '{{.State.FinishedAt.UnixNano}}' "$c")
  local took exit_code
  took=$(awk -v s="$start" -v f="$finished" 'BEGIN { printf "%.2f", f / 1e9 - s }')
  exit_code=$(pod inspect --format '{{.State.ExitCode}}' "$c")
  wait "$job" || true
  local jrc log
  jrc=$(cat "$job_rc" 2>/dev/null || echo none)
  log=$(pod logs "$c" 2>&1)
  local cancelled=no
  [ "$jrc" = 125 ] && grep -Eq ' 1 cancelled' <<<"$log" && cancelled=yes
  if [ $rc -eq 0 ] && [ "$exit_code" = 0 ] && [ "$cancelled" = yes ] &&
    awk -v t="$took" 'BEGIN { exit !(t <= 1.0) }'; then
    ok "sigterm: exit 0 $took s after podman stop (stop returned in $stop_seconds s), job cancelled (dispatch exit $jrc; $(grep -Eo 'drained in [^(]*cancelled' <<<"$log" | tail -n1))"
  else
    failed "sigterm: exit code $exit_code after $took s (podman stop: rc $rc, $stop_seconds s), busy before stop: '$busy', dispatch exit $jrc, cancelled: $cancelled" \
      "$stop_out" "$(tail -n 5 <<<"$log")"
  fi
}

# 7. Jobs whose grandchildren are orphaned (double fork) leave no zombie:
# one grandchild exits by itself, one outlives the job and is killed as a
# leftover; the worker (a child subreaper) or the init reaps both.
check_zombies() {
  local c=$1 port=$2 what=$3 rc=0 out zombies leftovers
  for _ in 1 2 3; do
    out=$(pod exec "$c" cfdb-worker dispatch --address "127.0.0.1:$port" --no-stdin -- \
      sh -c '(sh -c "exit 0" &) ; (sleep 30 &) ; exit 0' 2>&1) || rc=$?
  done
  sleep 1  # the worker reaps every 500 ms
  zombies=$(pod exec "$c" sh -c "$ZOMBIES" 2>&1) || true
  leftovers=$(pod exec "$c" sh -c 'grep -lx sleep /proc/[0-9]*/comm; true' 2>&1) || true
  if [ $rc -eq 0 ] && [ -z "$zombies" ] && [ -z "$leftovers" ]; then
    ok "zombies ($what): none, nor a leftover sleep, 1 s after 3 double-forking jobs"
  else
    failed "zombies ($what): job exit $rc, zombies: ${zombies:-none}, leftovers: ${leftovers:-none}" "$out"
  fi
}

# The template's container definition, as shell-readable files under DIR:
# env (NAME=VALUE lines, parameters at their defaults, ContainerPort = PORT),
# secrets, health (the health check's argv, one per line), user, init,
# caps-drop, entrypoint and command (one argv element per line, empty when
# the image's are used).
read_template() {
  local dir=$1 port=$2
  python3 - "$TEMPLATE" "$dir" "$port" <<'EOF'
import os, re, sys, yaml

template, out, port = sys.argv[1:]

class Loader(yaml.SafeLoader):
    pass

# CloudFormation's short forms (!Ref, !Sub, ...) as {"Ref": x} etc.
def tagged(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {suffix if suffix == "Ref" else "Fn::" + suffix: value}

Loader.add_multi_constructor("!", tagged)
doc = yaml.load(open(template), Loader=Loader)
params = {k: v.get("Default") for k, v in doc["Parameters"].items()}
params.update({"ContainerPort": port, "AWS::Region": "us-east-1",
               "AWS::StackName": "image-test", "AWS::AccountId": "123456789012"})

# Values as a stack with the defaults would resolve them; None for
# AWS::NoValue (the entry is left out).
def value(v):
    if isinstance(v, dict) and v.get("Ref") == "AWS::NoValue":
        return None
    if isinstance(v, dict) and "Ref" in v:
        if params.get(v["Ref"]) is None:
            sys.exit(f"parameter {v['Ref']} has no default")
        return str(params[v["Ref"]])
    if isinstance(v, dict) and "Fn::Sub" in v:
        return re.sub(r"\$\{([^}]+)\}", lambda m: value({"Ref": m.group(1)}), v["Fn::Sub"])
    if isinstance(v, dict) and "Fn::If" in v:
        name, then, otherwise = v["Fn::If"]
        return value(then if truth(doc["Conditions"][name]) else otherwise)
    if isinstance(v, (dict, list)):
        sys.exit(f"cannot resolve {v!r}")
    return str(v).lower() if isinstance(v, bool) else str(v)

def truth(c):
    if "Fn::Equals" in c:
        a, b = c["Fn::Equals"]
        return value(a) == value(b)
    if "Fn::Not" in c:
        return not truth(c["Fn::Not"][0])
    if "Fn::And" in c:
        return all(truth(x) for x in c["Fn::And"])
    if "Fn::Or" in c:
        return any(truth(x) for x in c["Fn::Or"])
    if "Condition" in c or "Fn::Condition" in c:
        return truth(doc["Conditions"][c.get("Condition", c.get("Fn::Condition"))])
    sys.exit(f"cannot evaluate condition {c!r}")

def present(items):
    return [x for x in items if value(x["Value"]) is not None]

task = next(r for r in doc["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition")
(container,) = task["Properties"]["ContainerDefinitions"]

def write(name, lines):
    with open(os.path.join(out, name), "w") as f:
        f.writelines(f"{line}\n" for line in lines)

env = present(container.get("Environment", []))
for e in env:
    if "\n" in value(e["Value"]):
        sys.exit(f"{e['Name']}: multi-line value")
write("env", [f"{e['Name']}={value(e['Value'])}" for e in env])
write("secrets", [s["Name"] for s in container.get("Secrets", [])])
write("health", [value(a) for a in container["HealthCheck"]["Command"]])
write("user", [value(container.get("User", "")) or ""])
linux = container.get("LinuxParameters", {})
write("init", ["true" if linux.get("InitProcessEnabled") else "false"])
write("caps-drop", linux.get("Capabilities", {}).get("Drop", []))
write("entrypoint", [value(a) for a in container.get("EntryPoint", [])])
write("command", [value(a) for a in container.get("Command", [])])
EOF
}

# A test PKI as docs/TLS.md issues it: a CA, the worker (serverAuth and
# clientAuth: it also calls itself) and the API (clientAuth), all P-256.
make_pki() {
  local dir=$1 pki=scripts/test-pki.sh
  rm -rf "$dir"
  mkdir -p "$dir" &&
    $pki "$dir" ca "cfdb image-test CA" &&
    $pki "$dir" leaf worker "DNS:worker.cfdb.internal,IP:127.0.0.1" \
      "serverAuth,clientAuth" &&
    $pki "$dir" leaf api "DNS:api.cfdb.internal" "clientAuth"
}

# The capabilities Docker (and so ECS) grants by default; the template
# drops from these. podman's defaults differ, so start from none.
DOCKER_DEFAULT_CAPS="AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE
  NET_RAW SETFCAP SETGID SETPCAP SETUID SYS_CHROOT"

# 8. The template's container definition (user, environment, secrets as
# variables, init, capabilities, entry point) serves mutual TLS, and its
# health check command exits 0 inside the container.
check_ecs() {
  local dir="$WORK/ecs" port
  port=$(free_port)
  rm -rf "$dir"
  mkdir -p "$dir"
  if ! read_template "$dir" "$port" 2>"$dir/template.err"; then
    failed "ecs: cannot read $TEMPLATE" "$(cat "$dir/template.err")"
    return
  fi
  if ! make_pki "$dir/pki"; then
    failed "ecs: openssl could not make the test PKI" "$(tail -n 5 "$dir/pki/openssl.log")"
    return
  fi
  local flags=() line name cap keep=()
  while IFS= read -r line; do flags+=(--env "$line"); done <"$dir/env"
  # Secrets reach the container as variables holding the PEMs, as ECS
  # resolves them; passed by name so no key is on a command line.
  while IFS= read -r name; do
    case "$name" in
      *_CA_*) export "$name=$(cat "$dir/pki/ca.pem")" ;;
      *_CERT_*) export "$name=$(cat "$dir/pki/worker.pem")" ;;
      *_KEY_*) export "$name=$(cat "$dir/pki/worker.key")" ;;
      *) failed "ecs: secret $name is neither CA, certificate nor key"; return ;;
    esac
    flags+=(--env "$name")
  done <"$dir/secrets"
  local user init
  user=$(cat "$dir/user") init=$(cat "$dir/init")
  [ -z "$user" ] || flags+=(--user "$user")
  [ "$init" != true ] || flags+=(--init)
  for cap in $DOCKER_DEFAULT_CAPS; do
    grep -qx "$cap" "$dir/caps-drop" || keep+=("$cap")
  done
  flags+=(--cap-drop ALL)
  for cap in "${keep[@]}"; do flags+=(--cap-add "$cap"); done
  # Not in the template: the client certificates as files, read-only, for
  # the API's dispatch below and the file-based health check of a failure.
  mkdir -p "$dir/client"
  cp "$dir"/pki/{ca.pem,worker.pem,worker.key,api.pem,api.key} "$dir/client/"
  flags+=(-v "$dir/client:/run/cfdb-test-client:ro")
  local entry=() cmd=()
  mapfile -t entry <"$dir/entrypoint"
  mapfile -t cmd <"$dir/command"
  if [ ${#entry[@]} -gt 0 ]; then
    flags+=(--entrypoint "$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${entry[@]}")")
  fi
  run_container ecs "${flags[@]}" -- "${cmd[@]}"
  local c=$STARTED
  local what="user '$user', caps ${keep[*]}, init $init"

  local health=()
  mapfile -t health <"$dir/health"
  case "${health[0]}" in
    CMD) health=("${health[@]:1}") ;;
    CMD-SHELL) health=(sh -c "${health[1]}") ;;
    *) failed "ecs: health check command '${health[*]}' is neither CMD nor CMD-SHELL"; return ;;
  esac
  # The same client, its PEMs from files instead of the template's variables.
  local files=(env -u CFDB_WORKER_TLS_CA_ENV -u CFDB_WORKER_TLS_CERT_ENV -u CFDB_WORKER_TLS_KEY_ENV
    cfdb-worker)
  local tls=(--tls-ca /run/cfdb-test-client/ca.pem --tls-identity worker.cfdb.internal)

  # ECS's StartPeriod: the worker is up once it answers over TLS at all.
  local deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ] && running "$c"; do
    pod exec "$c" "${files[@]}" health --address "127.0.0.1:$port" "${tls[@]}" \
      --tls-cert /run/cfdb-test-client/worker.pem --tls-key /run/cfdb-test-client/worker.key \
      >/dev/null 2>&1 && break
    sleep 0.2
  done
  local rc=0 out file_rc=0
  out=$(pod exec "$c" "${health[@]}" 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    ok "ecs: the template's '${health[*]}' exit 0 over mutual TLS on 0.0.0.0:$port ($what)"
  else
    pod exec "$c" "${files[@]}" health --address "127.0.0.1:$port" "${tls[@]}" \
      --tls-cert /run/cfdb-test-client/worker.pem --tls-key /run/cfdb-test-client/worker.key \
      >/dev/null 2>&1 || file_rc=$?
    failed "ecs: the template's '${health[*]}' exit $rc ($what); the same health check with the PEMs as files (--tls-ca/--tls-cert/--tls-key): exit $file_rc" \
      "$(tail -n 3 <<<"$out")" "$(log_tail "$c" 3)"
  fi

  # Without the TLS variables the client speaks plaintext: refused, so the
  # 0 above was mutual TLS.
  local plain_rc=0
  pod exec "$c" env -u CFDB_WORKER_TLS_CA_ENV -u CFDB_WORKER_TLS_CERT_ENV \
    -u CFDB_WORKER_TLS_KEY_ENV cfdb-worker health --address "127.0.0.1:$port" \
    >/dev/null 2>&1 || plain_rc=$?
  if [ $plain_rc -ne 0 ]; then
    ok "ecs: plaintext health check refused (exit $plain_rc)"
  else
    failed "ecs: a plaintext health check passed: the worker is not serving TLS"
  fi

  check_user "$c" "ecs"
  # The API's certificate may dispatch; the job runs as the job user under
  # the template's capabilities.
  local uid jrc=0
  uid=$(pod exec "$c" "${files[@]}" dispatch --address "127.0.0.1:$port" "${tls[@]}" \
    --tls-cert /run/cfdb-test-client/api.pem --tls-key /run/cfdb-test-client/api.key \
    --no-stdin -- /usr/bin/id -u 2>&1) || jrc=$?
  if [ $jrc -eq 0 ] && [ "$uid" -ge 20000 ] 2>/dev/null; then
    ok "ecs: a job dispatched with the API's certificate ran as uid $uid (cfdb-job)"
  else
    failed "ecs: dispatch with the API's certificate: exit $jrc, 'id -u' printed '$uid'" "$(log_tail "$c")"
  fi

  # What a job can reach under the template's setup: not the environment of
  # PID 1 (the init, which got the PEMs in variables) or of any process not
  # its own, no capability, no_new_privs, only fds 0-2 (and the shell's).
  local reach rrc=0
  reach=$(pod exec "$c" "${files[@]}" dispatch --address "127.0.0.1:$port" "${tls[@]}" \
    --tls-cert /run/cfdb-test-client/api.pem --tls-key /run/cfdb-test-client/api.key \
    --no-stdin -- /bin/sh -c '
      leaks=""
      for d in /proc/[0-9]*; do
        [ "${d#/proc/}" = "$$" ] && continue
        cat "$d/environ" >/dev/null 2>&1 && leaks="$leaks ${d}/environ"
      done
      grep -q "^CapEff:[[:space:]]*0*$" /proc/self/status || leaks="$leaks CapEff"
      grep -q "^NoNewPrivs:[[:space:]]*1$" /proc/self/status || leaks="$leaks NoNewPrivs"
      fds=$(ls /proc/self/fd | tr "\n" " ")   # ls: 0-2 and its own 3
      [ "$fds" = "0 1 2 3 " ] || leaks="$leaks fds:$fds"
      echo "reach:${leaks:- none}"' 2>&1) || rrc=$?
  if [ $rrc -eq 0 ] && [ "$reach" = "reach: none" ]; then
    ok "ecs: a job reads no other process's environment (PID 1's PEMs included), has no capability, no_new_privs, fds 0-2 only"
  else
    failed "ecs: a job reaches what it must not: exit $rrc, '$reach'" "$(log_tail "$c")"
  fi
}

# 9. The Kubernetes pod-per-worker manifest (deploy/kubernetes/job, through
# tests/deploy/kube-play: a 4 s idle timeout, the host's network) on this
# image run by `podman kube play`: its security context holds, it is
# ready on the HTTP port, it runs a job over mutual TLS with the Secret's
# PEMs, and it exits 0 on idle, which completes a Job. tests/deploy/
# kube_play.py says what podman 4.3 cannot take and how it is adapted.
check_kube_play() {
  local dir="$WORK/kube" grpc http facts name c user volumes rc
  rm -rf "$dir"
  mkdir -p "$dir"
  command -v kubectl >/dev/null || { failed "kube: no kubectl (1.27 or later) to render deploy/kubernetes"; return; }
  if ! kubectl kustomize tests/deploy/kube-play >"$dir/rendered.yaml" 2>"$dir/render.err"; then
    failed "kube: kubectl kustomize tests/deploy/kube-play failed" "$(cat "$dir/render.err")"
    return
  fi
  if ! make_pki "$dir/pki"; then
    failed "kube: openssl could not make the test PKI" "$(tail -n 5 "$dir/pki/openssl.log")"
    return
  fi
  grpc=$(free_port) http=$(free_port)
  if ! facts=$(python3 tests/deploy/kube_play.py "$dir/rendered.yaml" "$dir" \
    --image "$IMAGE" --grpc-port "$grpc" --http-port "$http" --pki "$dir/pki" \
    2>"$dir/convert.err"); then
    failed "kube: tests/deploy/kube_play.py" "$(cat "$dir/convert.err")"
    return
  fi
  # The limits of RUN_FLAGS, as kube play takes no --ulimit.
  printf '[containers]\ndefault_ulimits = [%s]\n' "$(printf '"%s", ' "${ULIMITS[@]}" | sed 's/, $//')" \
    >"$dir/containers.conf"
  read -r name c user volumes <<<"$facts"
  echo "$volumes" >"$dir/volumes"
  # A volume or secret of an earlier run would be used as it is.
  kube_down "$dir" "$name"
  KUBE_PLAYED="$dir:$name"
  pod secret create "$name" "$dir/secret.yaml" >/dev/null
  if ! CONTAINERS_CONF="$dir/containers.conf" pod kube play "$dir/play.yaml" >"$dir/play.out" 2>&1; then
    failed "kube: podman kube play" "$(grep -v systemd "$dir/play.out")"
    return
  fi
  local deadline=$((SECONDS + 30)) ready=""
  while [ $SECONDS -lt $deadline ] && running "$c"; do
    ready=$(http_status "$http" /readyz)
    [ "$ready" != 200 ] || break
    sleep 0.2
  done
  if [ "$ready" != 200 ]; then
    failed "kube: /readyz not 200 within 30 s (got '$ready')" "$(log_tail "$c" 10)"
    return
  fi
  local seen
  seen=$(pod inspect "$c" --format '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}} {{.HostConfig.SecurityOpt}}')
  if [ "$seen" = "$user true [] [no-new-privileges]" ]; then
    ok "kube: runs as $user, read-only root, no capability, no new privileges; /readyz and /healthz $(http_status "$http" /healthz)"
  else
    failed "kube: security context not as the manifest says: '$seen'"
  fi
  local pem=/etc/cfdb-worker/tls out
  out=$(pod exec "$c" cfdb-worker dispatch --address "127.0.0.1:$grpc" --tls-ca $pem/ca.crt \
    --tls-cert $pem/tls.crt --tls-key $pem/tls.key -- echo from-a-pod 2>&1) && rc=0 || rc=$?
  if [ $rc -eq 0 ] && [ "$out" = from-a-pod ]; then
    ok "kube: a job dispatched over mutual TLS with the Secret's PEMs ran"
  else
    failed "kube: dispatch exit $rc, output '$out'" "$(log_tail "$c")"
  fi
  rc=$(exited "$c" 60)
  local logs
  logs=$(pod logs "$c" 2>&1) || true
  if [ "$rc" = 0 ] && grep -q '"message":"exiting: idle' <<<"$logs"; then
    ok "kube: the pod's container exited 0 on idle retirement (a Job would complete)"
  else
    failed "kube: exit code $rc" "$(log_tail "$c")"
  fi
  kube_down "$dir" "$name"
  KUBE_PLAYED=""
}

# http_status PORT PATH: the HTTP status of GET PATH on 127.0.0.1:PORT.
http_status() {
  python3 -c 'import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://127.0.0.1:%s%s" % tuple(sys.argv[1:]), timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError:
    print("none")' "$1" "$2"
}

# kube_down DIR SECRET: removes what kube play made (pod, volumes, secret).
kube_down() {
  pod kube play --down "$1/play.yaml" >/dev/null 2>&1 || true
  local volume
  # shellcheck disable=SC2013  # names without spaces, one line
  for volume in $(cat "$1/volumes" 2>/dev/null); do
    pod volume rm -f "$volume" >/dev/null 2>&1 || true
  done
  pod secret rm "$2" >/dev/null 2>&1 || true
}

# A container ($STARTED) to test as PID 1 (no init) or under --init.
serving_container() {
  local name=$1 port=$2
  shift 2
  run_container "$name" "$@" -- --host 127.0.0.1 --port "$port"
  if ! wait_serving "$STARTED" "$port"; then
    failed "start ($name): not SERVING within 30 s on 127.0.0.1:$port" "$(log_tail "$STARTED" 10)"
    return 1
  fi
}

preflight() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (podman with vfs storage under $IMAGE_BUILD)"
  command -v podman >/dev/null || die "podman is missing: run make image first"
  python3 -c 'import yaml' 2>/dev/null || die "python3-yaml is missing: run make image first"
  pod image exists "$IMAGE" || die "no image $IMAGE in $IMAGE_BUILD/storage: run make image first"
  unshare --mount --pid --fork true 2>/dev/null ||
    die "cannot create mount/PID namespaces here: containers cannot run on this machine"
  mkdir -p "$WORK"
}

main() {
  preflight
  local start port c
  start=$(now)
  check_ldd
  check_setuid

  # As PID 1 (no init), the way `docker run` without --init starts it.
  port=$(free_port)
  if serving_container pid1 "$port"; then
    c=$STARTED
    check_user "$c" "PID 1"
    check_health "$c" "$port"
    check_dispatch "$c" "$port"
    check_zombies "$c" "$port" "worker as PID 1"
    check_sigterm "$c" "$port"
  fi

  check_idle_exit

  # Under an init, as ECS runs it (InitProcessEnabled).
  port=$(free_port)
  if serving_container init "$port" --init; then
    c=$STARTED
    check_user "$c" "--init"
    check_zombies "$c" "$port" "--init"
  fi

  check_ecs
  check_kube_play

  echo "image-test: $FAILURES failed, in $(elapsed "$start") s"
  [ $FAILURES -eq 0 ]
}

main "$@"
