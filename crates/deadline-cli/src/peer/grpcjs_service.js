// One hop of the demo's chain written with @grpc/grpc-js alone, for `deadline demo --peer grpc-js`.
//
// It takes the flags `deadline service` takes in the demo (--name, --log, --downstream,
// --timeout, --attempts, --work, --exit-on-stdin-close; others are ignored), prints the same
// ready line, drains and exits when its standard input closes, and writes one JSON line per
// request to --log in the schema of `deadline service --log`, so the demo computes the same
// figures from both chains.
//
// --way says how much of gRPC's own deadline machinery the hop uses:
//   timeouts   each downstream attempt gets its own timeout; nothing is propagated and the
//              handler runs to its end whatever happens to its caller;
//   propagate  downstream attempts are made with the incoming call as `parent` and the
//              deadline and cancellation propagation flags (grpc-js's documented way), each
//              attempt also bounded by the hop's own timeout; handlers still run to their end;
//   cancel     as propagate, and every handler also stops when its call is cancelled: the
//              work stops at once and no further attempt is made.
// The retry loop is the hand-written one gRPC users write: retry on DEADLINE_EXCEEDED and
// UNAVAILABLE, stop on anything else.
'use strict';

const fs = require('fs');

function flags(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) continue;
    const next = argv[i + 1];
    if (next === undefined || next.startsWith('--')) {
      out[arg.slice(2)] = true;
    } else {
      out[arg.slice(2)] = next;
      i++;
    }
  }
  return out;
}

const opts = flags(process.argv.slice(2));
// --modules DIR: the node_modules directory that holds @grpc/grpc-js.
const grpc = require(opts.modules ? require('path').join(String(opts.modules), '@grpc', 'grpc-js') : '@grpc/grpc-js');
const name = opts.name || 'service';
const way = opts.way || 'timeouts';
if (!['timeouts', 'propagate', 'cancel'].includes(way)) {
  console.error(`${name}: --way must be timeouts, propagate or cancel, not ${way}`);
  process.exit(2);
}
const work = Number(opts.work || 0);
const timeout = Number(opts.timeout || 1000);
const attempts = Number(opts.attempts || 1);
const logPath = opts.log;
const downstream = opts.downstream ? String(opts.downstream).replace(/^https?:\/\//, '') : null;
const method = opts.path || '/order/42';

const identity = (b) => b;
const client = downstream ? new grpc.Client(downstream, grpc.credentials.createInsecure()) : null;

// Wall-clock epoch milliseconds with a fractional part, as the Rust services log.
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let inflight = 0;
let draining = false;

function log(line) {
  if (logPath) fs.appendFileSync(logPath, JSON.stringify(line) + '\n');
}

function cancelled(call) {
  return new Promise((resolve) => {
    if (call.cancelled) resolve();
    else call.on('cancelled', () => resolve());
  });
}

function attempt(call, id) {
  const metadata = new grpc.Metadata();
  if (id) metadata.set('x-request-id', id);
  const options = { deadline: Date.now() + timeout };
  if (way !== 'timeouts') {
    options.parent = call;
    options.propagate_flags = grpc.propagate.DEADLINE | grpc.propagate.CANCELLATION;
  }
  return new Promise((resolve) => {
    client.makeUnaryRequest(method, identity, identity, Buffer.alloc(0), metadata, options,
      (err, reply) => resolve(err ? { code: err.code, details: err.details } : { code: 0, reply }));
  });
}

async function handle(call, callback) {
  const arrival = now();
  inflight++;
  const id = call.metadata.get('x-request-id')[0];
  const deadline = call.getDeadline();
  const deadlineMs = deadline instanceof Date ? deadline.getTime() : Number(deadline);
  const budget = Number.isFinite(deadlineMs) ? Math.max(0, Math.floor(deadlineMs - Date.now())) : null;
  const stop = way === 'cancel' ? cancelled(call) : new Promise(() => {});
  let result = { code: 0, text: `${name}: done\n` };
  if (work > 0) {
    await Promise.race([sleep(work), stop]);
  }
  if (client && !(way === 'cancel' && call.cancelled)) {
    result = { code: grpc.status.UNAVAILABLE, text: `${name}: no attempt made` };
    for (let i = 0; i < attempts; i++) {
      if (way === 'cancel' && call.cancelled) break;
      const answer = await Promise.race([attempt(call, id), stop.then(() => null)]);
      if (answer === null) break;
      if (answer.code === 0) {
        result = { code: 0, text: `${name}: done\n` };
        break;
      }
      result = { code: answer.code, text: `${name}: downstream answered ${answer.code}: ${answer.details}` };
      if (answer.code !== grpc.status.DEADLINE_EXCEEDED && answer.code !== grpc.status.UNAVAILABLE) break;
    }
  }
  const end = now();
  const late = Number.isFinite(deadlineMs) && Date.now() >= deadlineMs;
  let outcome = result.code === 0 ? 'ok' : 'error';
  if (call.cancelled) outcome = late ? 'deadline' : 'hung-up';
  const status = outcome === 'ok' ? 200 : (outcome === 'deadline' || result.code === grpc.status.DEADLINE_EXCEEDED ? 504 : 502);
  log({
    service: name,
    request_id: id || null,
    outcome,
    status,
    budget_ms: budget,
    arrival_ms: arrival,
    start_ms: arrival,
    end_ms: end,
    queued_ms: 0,
    worked_ms: end - arrival,
    reply_written: !call.cancelled,
  });
  if (result.code === 0) callback(null, Buffer.from(result.text));
  else callback({ code: result.code, details: result.text });
  inflight--;
  if (draining && inflight === 0) exit();
}

const server = new grpc.Server();
server.register(method, handle, identity, identity, 'unary');

function exit() {
  server.forceShutdown();
  process.exit(0);
}

server.bindAsync('127.0.0.1:0',
  grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) {
      console.error(`${name}: cannot listen: ${err.message}`);
      process.exit(1);
    }
    process.stdout.write(`listening on http://127.0.0.1:${port}\n`);
  });

if (opts['exit-on-stdin-close']) {
  process.stdin.on('end', () => {
    draining = true;
    if (inflight === 0) exit();
  });
  process.stdin.resume();
}
