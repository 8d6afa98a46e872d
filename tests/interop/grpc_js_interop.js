// Interop with Node's @grpc/grpc-js: another gRPC stack, loading proto/ at
// run time with @grpc/proto-loader, against real workers, once in
// plaintext on loopback and once over mutual TLS. Idle, Dispatch of 3 MiB
// of random bytes through `cat` (byte for byte), health Check, jobs as
// handles (a detached job read again with Attach, ListJobs, Cancel, a
// conditional Stop refused while busy), then Stop with a grace that drains
// a job in flight.
//
//   NODE_PATH=build/node/node_modules node tests/interop/grpc_js_interop.js \
//     BINARY PROTO_DIR
//
// Exits 0 when every check held, 1 (saying which) otherwise.
'use strict';
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [binary, protoDir] = process.argv.slice(2);
if (!binary || !protoDir) {
  console.error('usage: grpc_js_interop.js BINARY PROTO_DIR');
  process.exit(2);
}

const loaded = protoLoader.loadSync(
  ['cfdb/worker/v1/worker.proto', 'grpc/health/v1/health.proto'],
  { includeDirs: [protoDir], keepCase: true, longs: Number, enums: String,
    defaults: true, oneofs: true });
const pkg = grpc.loadPackageDefinition(loaded);
const Worker = pkg.cfdb.worker.v1.Worker;
const Health = pkg.grpc.health.v1.Health;

// A CA and two leaves (P-256), made by the repository's one test PKI script
// (which also logs each key for tests/support/tmp_audit.sh).
function makePki() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cfdb-node-pki-'));
  const script = path.join(__dirname, '..', '..', 'scripts', 'test-pki.sh');
  const pki = (...args) => execFileSync(script, [dir, ...args], { stdio: 'pipe' });
  const file = (name) => path.join(dir, name);
  pki('ca', 'cfdb node test CA');
  const leaf = (name, sans) => {
    pki('leaf', name, sans);
    return { cert: file(`${name}.pem`), key: file(`${name}.key`) };
  };
  return {
    dir, ca: file('ca.pem'),
    worker: leaf('worker', 'DNS:worker.cfdb.internal,IP:127.0.0.1'),
    api: leaf('api', 'DNS:api.cfdb.internal'),
  };
}

// Starts `cfdb-worker serve --port 0 ARGS` and resolves with the process and
// its port once it logs "listening on".
function startWorker(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, ['serve', '--port', '0',
      '--idle-timeout-seconds', '0', '--max-lifetime-jitter-seconds', '0',
      ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(log);
      if (m) resolve({ child, port: Number(m[1]), log: () => log });
    });
    child.on('exit', (code) => reject(new Error(`worker exited ${code}:\n${log}`)));
  });
}

const unary = (client, method, request) => new Promise((resolve, reject) => {
  client[method](request, { deadline: Date.now() + 60000 },
    (err, reply) => (err ? reject(err) : resolve(reply)));
});

// Dispatch: resolves with the events' summary.
function dispatch(client, argv, stdin = Buffer.alloc(0)) {
  return new Promise((resolve, reject) => {
    const call = client.Dispatch({
      job_id: `node-${crypto.randomUUID()}`, kind: 'exec',
      exec: { argv, stdin, env: {} },
    }, { deadline: Date.now() + 120000 });
    const out = [];
    let accepted = false;
    let end = null;
    call.on('data', (event) => {
      if (event.event === 'accepted') accepted = true;
      if (event.event === 'output' && event.output.stream === 'STDOUT') {
        out.push(event.output.data);
      }
      if (event.event === 'exit' || event.event === 'failure') end = event;
    });
    call.on('error', reject);
    call.on('end', () => resolve({ accepted, stdout: Buffer.concat(out), end }));
  });
}

// Detached: dispatches `argv` as job `jobId`, running on without limit once
// its call is gone, and cancels the call once the job is accepted.
function detached(client, jobId, argv) {
  return new Promise((resolve, reject) => {
    const call = client.Dispatch({
      job_id: jobId, kind: 'exec', exec: { argv, env: {} },
      detach_grace_seconds: -1,
    }, { deadline: Date.now() + 60000 });
    call.on('data', (event) => {
      if (event.event === 'accepted') {
        call.cancel();
        resolve();
      }
    });
    call.on('error', (err) => {
      if (err.code !== grpc.status.CANCELLED) reject(err);
    });
  });
}

// Attach: resolves with the events of a job read again from offset 0.
function attach(client, jobId) {
  return new Promise((resolve, reject) => {
    const call = client.Attach({ job_id: jobId },
      { deadline: Date.now() + 60000 });
    const events = [];
    call.on('data', (event) => events.push(event));
    call.on('error', reject);
    call.on('end', () => resolve(events));
  });
}

async function checkHandles(mode, client) {
  await detached(client, 'node-handle',
    ['sh', '-c', 'echo one; sleep 0.3; echo two; exit 4']);
  const events = await attach(client, 'node-handle');
  assert.equal(events[0].event, 'attached', `${mode}: attached first`);
  const outputs = events.filter((e) => e.event === 'output');
  assert.equal(Buffer.concat(outputs.map((e) => e.output.data)).toString(),
    'one\ntwo\n', `${mode}: the detached job's output, read again`);
  assert.deepEqual(outputs.map((e) => e.output.offset), [0, 4],
    `${mode}: output carries its offsets`);
  assert.equal(events[events.length - 1].exit.code, 4, `${mode}: its code`);

  const jobs = await unary(client, 'ListJobs', {});
  const listed = jobs.jobs.find((j) => j.job_id === 'node-handle');
  assert.equal(listed.state, 'ENDED', `${mode}: listed as ended`);
  assert.equal(listed.program, 'sh', `${mode}: listed with its program`);

  await detached(client, 'node-sleeper', ['sleep', '30']);
  const cancelled = await unary(client, 'Cancel',
    { job_id: 'node-sleeper', grace_seconds: 0 });
  assert.equal(cancelled.failure.reason, 'CANCELLED', `${mode}: Cancel`);

  const busy = dispatch(client, ['sleep', '1']);
  await new Promise((r) => setTimeout(r, 200));
  await assert.rejects(
    unary(client, 'Stop', { grace_seconds: 0, if_idle_for_seconds: 0 }),
    (err) => err.code === grpc.status.FAILED_PRECONDITION,
    `${mode}: a conditional stop is refused while busy`);
  assert.equal((await busy).end.exit.code, 0, `${mode}: the job ran on`);
}

const waitExit = (child) => new Promise((resolve) => {
  if (child.exitCode !== null) resolve(child.exitCode);
  else child.on('exit', (code) => resolve(code));
});

async function check(mode, serveArgs, credentials, options) {
  const worker = await startWorker(serveArgs);
  try {
    const address = `127.0.0.1:${worker.port}`;
    const client = new Worker(address, credentials, options);
    const health = new Health(address, credentials, options);

    const idle = await unary(client, 'Idle', {});
    assert.ok(idle.seconds > 0, `${mode}: idle accrues from startup`);

    const data = crypto.randomBytes(3 << 20);
    const cat = await dispatch(client, ['cat'], data);
    assert.ok(cat.accepted, `${mode}: accepted`);
    assert.equal(cat.end.event, 'exit', `${mode}: the job exited`);
    assert.equal(cat.end.exit.code, 0, `${mode}: exit code 0`);
    assert.equal(cat.stdout.length, data.length, `${mode}: 3 MiB back`);
    assert.ok(cat.stdout.equals(data), `${mode}: byte for byte`);

    const serving = await unary(health, 'Check', { service: '' });
    assert.equal(serving.status, 'SERVING', `${mode}: health SERVING`);

    await checkHandles(mode, client);

    // The cat job's end reaches us a moment before it leaves the docket.
    const idleIs = async (busy) =>
      ((await unary(client, 'Idle', {})).seconds === 0) === busy;
    const waitIdle = async (busy) => {
      for (let i = 0; i < 500 && !(await idleIs(busy)); ++i) {
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    await waitIdle(false);
    const inFlight = dispatch(client, ['sleep', '1']);
    await waitIdle(true);
    const stopped = await unary(client, 'Stop', { grace_seconds: 30 });
    assert.deepEqual([stopped.drained, stopped.cancelled], [1, 0],
      `${mode}: Stop drained the job in flight`);
    const drained = await inFlight;
    assert.equal(drained.end.exit.code, 0, `${mode}: the drained job finished`);
    assert.equal(await waitExit(worker.child), 0, `${mode}: the worker exited 0`);
    client.close();
    health.close();
    console.log(`${mode}: Idle, Dispatch (3 MiB byte-exact), health, ` +
      'Attach, ListJobs, Cancel, a conditional Stop, Stop: ok');
  } finally {
    worker.child.kill('SIGKILL');
  }
}

async function main() {
  await check('plaintext', [], grpc.credentials.createInsecure(), {});
  const pki = makePki();
  try {
    const read = (f) => fs.readFileSync(f);
    await check('mutual TLS',
      ['--tls-ca', pki.ca, '--tls-cert', pki.worker.cert, '--tls-key',
        pki.worker.key, '--tls-admit-control', 'api.cfdb.internal',
        '--tls-admit-observe', 'worker.cfdb.internal'],
      grpc.credentials.createSsl(read(pki.ca), read(pki.api.key),
        read(pki.api.cert)),
      { 'grpc.ssl_target_name_override': 'worker.cfdb.internal' });
  } finally {
    fs.rmSync(pki.dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(`interop failed: ${err.stack || err}`);
  process.exit(1);
});
