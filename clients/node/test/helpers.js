'use strict';
// Servers for the tests, started by the tests themselves: a redis-server on a free port, with
// the module (MODULE, default <repo>/target/release/libredis_ratelimit.so) or without it, and
// a 6-node cluster (cluster/cluster.sh with CLUSTER_PORTS and CLUSTER_DIR). Each is stopped
// and its directory removed when the test file ends; every wait has a deadline.

const { spawn, execFile } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { randomBytes } = require('node:crypto');

// Whatever is still running when the process exits is stopped then (a test file that fails
// early, an interrupted run): servers by their pid, clusters by cluster.sh.
const children = new Set();
const clusters = new Set();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
  for (const { script, env, dir } of clusters) {
    require('node:child_process').spawnSync(script, ['stop'], { env: { ...process.env, ...env }, stdio: 'ignore' });
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

const ROOT = path.resolve(__dirname, '..', '..', '..');
const MODULE = process.env.MODULE || path.join(ROOT, 'target', 'release', 'libredis_ratelimit.so');
const DEADLINE_MS = 30000;

const fresh = (prefix) => `${prefix}:${randomBytes(6).toString('hex')}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` (async, truthy when done) until it is done or `ms` have passed. */
async function waitFor(what, check, ms = DEADLINE_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const got = await check().catch(() => false);
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

/** Whether something accepts connections on 127.0.0.1:port. */
function taken(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** A free port below 32768 (Linux picks outgoing connections' ports above), + 10000 free too. */
async function freePort(avoid = []) {
  for (;;) {
    const p = 10000 + Math.floor(Math.random() * 12000);
    if (avoid.includes(p)) continue;
    if (!(await taken(p)) && !(await taken(p + 10000))) return p;
  }
}

/** PING over a raw socket: true when the server answers +PONG. */
function ping(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const done = (ok) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1000, () => done(false));
    s.once('error', () => done(false));
    s.once('connect', () => s.write('PING\r\n'));
    s.once('data', (b) => done(b.toString().startsWith('+PONG')));
  });
}

/**
 * Starts a redis-server on a free port, with the module unless `module: false`. Resolves to
 * { port, url, stop }: call stop() in an `after` hook (the process stops it on exit anyway).
 */
async function startServer({ module = true, args = [] } = {}) {
  if (module && !fs.existsSync(MODULE)) throw new Error(`module not found: ${MODULE} (cargo build --release)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-node-'));
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const argv = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--logfile', 'redis.log', ...args];
    if (module) argv.push('--loadmodule', MODULE);
    const child = spawn('redis-server', argv, { stdio: 'ignore' });
    children.add(child);
    let exited = false;
    child.once('exit', () => {
      exited = true;
      children.delete(child);
    });
    const up = await waitFor(`redis-server on port ${port}`, async () => exited || (await ping(port)), 10000);
    if (up === true && !exited) {
      const stop = async () => {
        if (!exited) {
          child.kill('SIGTERM');
          await waitFor(`redis-server on port ${port} to exit`, async () => exited, 10000).catch(() => child.kill('SIGKILL'));
        }
        fs.rmSync(dir, { recursive: true, force: true });
      };
      return { port, url: `redis://127.0.0.1:${port}`, stop, dir };
    }
    if (attempt >= 3) {
      const log = fs.existsSync(path.join(dir, 'redis.log')) ? fs.readFileSync(path.join(dir, 'redis.log'), 'utf8') : '';
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`redis-server did not start; its log:\n${log.slice(-2000)}`);
    }
  }
}

function run(file, args, env) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { env: { ...process.env, ...env }, timeout: 120000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${file} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** Sends one command over a raw socket (RESP), resolving to the raw reply text. */
function raw(port, words) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let out = '';
    s.setTimeout(5000, () => {
      s.destroy();
      reject(new Error('raw command timed out'));
    });
    s.once('error', reject);
    s.once('connect', () => {
      s.write(`*${words.length}\r\n${words.map((w) => `$${Buffer.byteLength(String(w))}\r\n${w}\r\n`).join('')}`);
    });
    s.on('data', (b) => {
      out += b.toString();
      if (out.endsWith('\r\n')) {
        s.destroy();
        resolve(out);
      }
    });
  });
}

/**
 * Starts a 6-node cluster (3 primaries, 3 replicas) with cluster/cluster.sh on free ports in a
 * temporary directory, and waits until every replica is listed in CLUSTER SLOTS (after a
 * write in each primary's slots). Resolves to { nodes: [{ host, port }], stop }: call stop()
 * in an `after` hook (the process stops it on exit anyway).
 */
async function startCluster() {
  if (!fs.existsSync(MODULE)) throw new Error(`module not found: ${MODULE} (cargo build --release)`);
  const ports = [];
  while (ports.length < 6) ports.push(await freePort(ports));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-node-cluster-'));
  const env = { CLUSTER_PORTS: ports.join(' '), CLUSTER_DIR: path.join(dir, 'cluster'), MODULE, CLUSTER_TIMEOUT: '60' };
  const script = path.join(ROOT, 'cluster', 'cluster.sh');
  const entry = { script, env, dir };
  clusters.add(entry);
  const stop = async () => {
    clusters.delete(entry);
    await run(script, ['stop'], env).catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
  };
  await run(script, ['start'], env);
  // A fresh cluster lists a replica in CLUSTER SLOTS only once it has replicated a write:
  // write in each primary's slots ("a", "b" and "c" hash to the three ranges).
  const nodes = ports.map((port) => ({ host: '127.0.0.1', port }));
  const cli = (...words) => run('redis-cli', ['-c', '-p', String(ports[0]), ...words], {});
  for (const k of ['a', 'b', 'c']) await cli('SET', k, 'warm');
  for (const k of ['a', 'b', 'c']) await cli('DEL', k);
  await waitFor('the replicas in CLUSTER SHARDS', async () => {
    for (const p of ports) {
      const shards = await run('redis-cli', ['-p', String(p), 'CLUSTER', 'SHARDS'], {});
      if (shards.split('\n').some((line) => line.trim() === 'loading')) return false;
    }
    return true;
  }, 60000);
  return { nodes, stop };
}

/** A field of an INFO section, summed over its lines matching `line` (a RegExp with one group). */
function infoNumber(text, line) {
  let total = 0;
  for (const m of text.matchAll(new RegExp(line, 'gim'))) total += Number(m[1]);
  return total;
}

/** How many times `command` reached the server behind an ioredis client (INFO commandstats). */
async function calls(ioredis, command) {
  const text = await ioredis.info('commandstats');
  return infoNumber(text, `^cmdstat_${command.replace(/[.|]/g, (c) => `\\${c}`)}:calls=(\\d+)`);
}

/** MOVED replies sent by these ioredis clients' servers (INFO errorstats). */
async function moved(clients) {
  let total = 0;
  for (const c of clients) total += infoNumber(await c.info('errorstats'), '^errorstat_MOVED:count=(\\d+)');
  return total;
}

module.exports = { ROOT, MODULE, fresh, sleep, waitFor, startServer, startCluster, calls, moved, infoNumber, raw };
