'use strict';
// Redis Cluster (3 primaries, 3 replicas, started here with cluster/cluster.sh): every call
// routed to its key's node by ioredis and node-redis (no MOVED), RL.PEEK on a replica,
// policies on every primary, RL.TOP added up, and the adapters and scripts routed too.
const test = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createCluster } = require('redis');
const { RateLimitClient, RateLimitStore } = require('..');
const { RateLimiterModule } = require('../rate-limiter-flexible');
const { startCluster, fresh, calls, moved } = require('./helpers');

const CALLS = 300;
let cluster;
let direct; // one plain ioredis client per node, to read its counters
test.before(async () => {
  cluster = await startCluster();
  direct = cluster.nodes.map(({ host, port }) => new Redis({ host, port }));
});
test.after(async () => {
  direct.forEach((n) => n.disconnect());
  await cluster.stop();
});

async function ioCluster(options = {}) {
  const c = new Redis.Cluster(cluster.nodes, options);
  await new Promise((resolve, reject) => {
    c.once('ready', resolve);
    c.once('error', reject);
  });
  return c;
}

const nrCluster = (options = {}) =>
  createCluster({ rootNodes: cluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })), ...options }).connect();

/** Runs `body(rl, label)` on an ioredis Cluster and on a node-redis cluster. */
async function both(body, { io = {}, nr = {} } = {}) {
  const a = await ioCluster(io);
  const b = await nrCluster(nr);
  try {
    await body(new RateLimitClient(a), 'ioredis', a);
    await body(new RateLimitClient(b), 'node-redis', b);
  } finally {
    a.disconnect();
    await b.close();
  }
}

/** Primaries (role master) among the direct clients. */
async function primaries() {
  const roles = await Promise.all(direct.map((n) => n.role()));
  return direct.filter((_, i) => roles[i][0] === 'master');
}

test('every command routed by its key: no MOVED in 300 calls, nor for RL.ALL and RL.HIT', async () => {
  await both(async (rl, label) => {
    const prefix = fresh(label);
    const before = await moved(direct);
    for (let i = 0; i < CALLS; i++) {
      const d = await rl.slide(`${prefix}:${i}`, 5, 60000);
      assert.equal(d.remaining, 4);
    }
    for (let i = 0; i < 30; i++) {
      const tag = `{${prefix}:u${i}}`;
      const d = await rl.all([
        { key: `${tag}:rpm`, kind: 'SLIDE', params: [5, 60000] },
        { key: `${tag}:tpm`, kind: 'TOKEN', params: [100, 60000], cost: 10 },
      ]);
      assert.deepEqual(d.parts.map((p) => p.remaining), [4, 90]);
      assert.equal((await rl.peek(`${tag}:tpm`)).remaining, 90);
      assert.equal((await rl.refund(`${tag}:tpm`, { cost: 5 })).remaining, 95);
      assert.equal((await rl.throttle(`${prefix}:t${i}`, 1, 2, 60)).remaining, 1);
    }
    const pol = fresh(`cl-${label}`).replace(':', '-');
    await rl.policySet(pol, [{ name: 'm', kind: 'SLIDE', params: [2, 60000] }]);
    for (let i = 0; i < 50; i++) assert.equal((await rl.hit(pol, `${prefix}:s${i}`)).allowed, true);
    assert.equal((await moved(direct)) - before, 0, `${label}: no MOVED`);
    await rl.policyDel(pol);
  }, { io: { keyPrefix: 'tenant:' } });
});

test('ioredis keyPrefix is added to the key the call is routed by', async () => {
  const c = await ioCluster({ keyPrefix: 'tenant-x:' });
  try {
    const key = fresh('pfx');
    await new RateLimitClient(c).token(key, 5, 1000);
    const found = await Promise.all(direct.map((n) => n.exists(`tenant-x:${key}`).catch(() => 0)));
    assert.equal(found.reduce((a, b) => a + b, 0), 1);
  } finally {
    c.disconnect();
  }
});

test('policies: SET and DEL on every primary, LIST from one node, RL.TOP added up', async () => {
  await both(async (rl, label) => {
    const name = fresh(`pol-${label}`).replace(':', '-');
    await rl.policySet(name, [{ name: 'm', kind: 'SLIDE', params: [1, 60000] }]);
    const masters = await primaries();
    assert.equal(masters.length, 3);
    for (const m of masters) assert.deepEqual(await m.call('RL.POLICY', 'GET', name), ['m', 'SLIDE', '1', '60000']);
    const digests = new Set();
    for (const m of masters) {
      const [, page] = await m.call('RL.POLICY', 'LIST', '0', 'COUNT', '100');
      for (const [n, digest] of page) if (n === name) digests.add(digest);
    }
    assert.equal(digests.size, 1, 'the same digest on every primary');
    const listed = [];
    for await (const p of rl.policies({ count: 1 })) listed.push(p.name);
    assert.ok(listed.includes(name));
    // Subjects on every node refused: RL.TOP adds the nodes' entries up.
    const subjects = [];
    for (let i = 0; i < 12; i++) subjects.push(fresh(`s${i}`));
    for (const s of subjects) {
      await rl.hit(name, s);
      assert.equal((await rl.hit(name, s)).allowed, false);
    }
    const top = await rl.top({ policy: name, count: 20 });
    assert.deepEqual(top.map((e) => e.name).sort(), [...subjects].sort());
    assert.ok(top.every((e) => e.count === 1));
    assert.equal(await rl.policyDel(name), true);
    for (const m of masters) assert.equal(await m.call('RL.POLICY', 'GET', name), null);
  });
});

test('RL.PEEK on a replica: ioredis with scaleReads, node-redis with useReplicas', async () => {
  await both(async (rl, label) => {
    const key = fresh(`peek:${label}`);
    await rl.fixed(key, 10, 60000, { cost: 3 });
    const roles = await Promise.all(direct.map((n) => n.role()));
    const before = await Promise.all(direct.map((n) => calls(n, 'rl.peek')));
    for (let i = 0; i < 30; i++) {
      const d = await rl.peek(key, { replica: true });
      assert.ok(d === null || d.remaining === 7); // null: not replicated yet
    }
    const after = await Promise.all(direct.map((n) => calls(n, 'rl.peek')));
    const onReplicas = after.reduce((sum, n, i) => sum + (roles[i][0] === 'slave' ? n - before[i] : 0), 0);
    assert.ok(onReplicas > 0, `${label}: some RL.PEEK calls answered by a replica`);
  }, { io: { scaleReads: 'slave' }, nr: { useReplicas: true } });
});

test('the adapters in a cluster: RateLimitStore and RateLimiterModule (its script too) routed', async () => {
  await both(async (rl, label, client) => {
    const before = await moved(direct);
    const store = new RateLimitStore({ client, prefix: `erl-${label}:` });
    store.init({ windowMs: 60000 });
    for (let i = 0; i < 50; i++) {
      const k = fresh('ip');
      assert.equal((await store.increment(k)).totalHits, 1);
      assert.equal((await store.increment(k)).totalHits, 2);
      await store.decrement(k);
      assert.equal((await store.get(k)).totalHits, 1);
      await store.resetKey(k);
      assert.equal(await store.get(k), undefined);
    }
    const rlf = new RateLimiterModule({ storeClient: client, points: 2, duration: 60, keyPrefix: `rlf-${label}` });
    for (let i = 0; i < 30; i++) {
      const k = fresh('u');
      assert.equal((await rlf.consume(k)).consumedPoints, 1);
      const b = await rlf.block(k, 30); // EVALSHA (EVAL once per node), routed by its key
      assert.equal(b.consumedPoints, 3);
      assert.equal((await rlf.get(k)).consumedPoints, 3);
      assert.equal((await rlf.reward(k, 1)).consumedPoints, 2);
      assert.equal(await rlf.delete(k), true);
    }
    assert.equal((await moved(direct)) - before, 0, `${label}: no MOVED`);
  });
});

test('the Lua twins are routed by their key too (EVALSHA names it)', async () => {
  await both(async (rl, label) => {
    // The cluster has the module: stand the twins in for it, as a server without it would.
    const lua = new RateLimitClient(rl.send, { fallback: 'lua' });
    lua.known = 'lua';
    const before = await moved(direct);
    for (let i = 0; i < 60; i++) {
      const k = fresh(`lua:${label}`);
      assert.equal((await lua.fixed(k, 3, 60000)).remaining, 2);
      assert.equal((await lua.slide(k + 's', 3, 60000)).remaining, 2);
      assert.equal((await lua.token(k + 't', 3, 60000)).remaining, 2);
    }
    assert.equal((await moved(direct)) - before, 0, `${label}: no MOVED`);
  });
});
