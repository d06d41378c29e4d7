'use strict';
// ioredis and node-redis in Redis Cluster: what each does with RL.* as it comes, and the recipe
// that routes every call to its key's primary (and RL.PEEK to a replica when asked).
const test = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createCluster } = require('redis');
const { Limit, Limiter, Decision, fromIoredis, fromNodeRedis, hit } = require('../ratelimit');
const { CLUSTER, fresh, calls, moved } = require('./helpers');

const skip = CLUSTER.length === 0 && 'RL_CLUSTER not set';
const CALLS = 300;

/** One plain ioredis client per node, to read its counters. */
const direct = () => CLUSTER.map(({ host, port }) => new Redis({ host, port }));

async function ioCluster(options = {}) {
  const c = new Redis.Cluster(CLUSTER, options);
  await new Promise((resolve, reject) => {
    c.once('ready', resolve);
    c.once('error', reject);
  });
  return c;
}

test('ioredis: call() lands on a random primary; the KeyedCommand sender routes', { skip }, async () => {
  const nodes = direct();
  const c = await ioCluster({ keyPrefix: 'tenant-b:' });
  try {
    const prefix = fresh('node:io');
    let before = await moved(nodes);
    for (let i = 0; i < CALLS; i++) await c.call('RL.SLIDE', `${prefix}:a:${i}`, 5, 60000);
    const naive = (await moved(nodes)) - before;

    const lim = new Limiter(fromIoredis(c), new Limit('RL.SLIDE', [5, 60000]));
    before = await moved(nodes);
    for (let i = 0; i < CALLS; i++) {
      const d = await lim.hit(`${prefix}:b:${i}`);
      assert.ok(d.allowed && d.remaining === 4);
    }
    const recipe = (await moved(nodes)) - before;
    console.error(`  ioredis, ${CALLS} calls: ${naive} MOVED with call(), ${recipe} with the KeyedCommand sender`);
    assert.ok(naive > CALLS / 3, `call() should mostly miss: ${naive} MOVED`);
    assert.equal(recipe, 0);

    // keyPrefix: call() sends the key as given; the sender adds the prefix.
    const count = async (key) =>
      (await Promise.all(nodes.map((n) => n.exists(key).catch(() => 0)))).reduce((a, b) => a + b, 0);
    assert.equal(await count(`${prefix}:a:0`), 1);
    assert.equal(await count(`tenant-b:${prefix}:b:0`), 1);
    assert.equal(await count(`${prefix}:b:0`), 0);
  } finally {
    c.disconnect();
    nodes.forEach((n) => n.disconnect());
  }
});

test('ioredis: pipelines return raw MOVED errors; per-slot pipelines of KeyedCommands work', { skip }, async () => {
  const c = await ioCluster();
  try {
    const prefix = fresh('node:pipe');
    const naive = c.pipeline();
    for (let i = 0; i < 30; i++) naive.call('RL.TOKEN', `${prefix}:a:${i}`, 10, 1000);
    const errors = (await naive.exec()).filter(([err]) => err && /^MOVED/.test(err.message));
    assert.ok(errors.length > 0, 'a pipeline across slots gets MOVED errors as replies');

    // The recipe: group the keys by slot (a hash tag puts one caller's keys together) and send
    // one pipeline per slot, the commands made by the sender.
    const send = fromIoredis(c);
    const tag = `{${prefix}}`;
    const p = c.pipeline();
    for (let i = 0; i < 30; i++) p.sendCommand(send.command(['RL.TOKEN', `${tag}:${i}`, '10', '1000']));
    const got = (await p.exec()).map(([err, reply]) => {
      assert.ifError(err);
      return Decision.fromReply(reply);
    });
    assert.deepEqual(got.map((d) => d.remaining), Array(30).fill(9));
  } finally {
    c.disconnect();
  }
});

test('ioredis: RL.PEEK goes to a replica with scaleReads and readOnly', { skip }, async () => {
  const nodes = direct();
  const c = await ioCluster({ scaleReads: 'slave' });
  try {
    const lim = new Limiter(fromIoredis(c), new Limit('RL.FIXED', [10, 60000]));
    const key = fresh('node:peek');
    await lim.hit(key, 3);
    await c.call('WAIT', 1, 5000).catch(() => {}); // WAIT has no key: best effort
    const before = await Promise.all(nodes.map((n) => calls(n, 'RL.PEEK')));
    let d = null;
    for (let i = 0; i < 50 && !d; i++) d = await lim.peek(key, { replica: true });
    assert.equal(d.remaining, 7);
    const after = await Promise.all(nodes.map((n) => calls(n, 'RL.PEEK')));
    const roles = await Promise.all(nodes.map((n) => n.role()));
    const servedBy = after.map((n, i) => n - before[i]).findIndex((n) => n > 0);
    assert.equal(roles[servedBy][0], 'slave');
  } finally {
    c.disconnect();
    nodes.forEach((n) => n.disconnect());
  }
});

test('node-redis: sendCommand without the key goes anywhere; with it, to the primary', { skip }, async () => {
  const nodes = direct();
  const rootNodes = CLUSTER.map(({ host, port }) => ({ url: `redis://${host}:${port}` }));
  const plain = await createCluster({ rootNodes }).connect();
  const c = await createCluster({ rootNodes, useReplicas: true }).connect();
  try {
    const prefix = fresh('node:nr');
    let before = await moved(nodes);
    // Without the key a call may also fail outright ("Too many Cluster redirections", seen
    // on Redis 7.4 and Valkey 7.2): that is the naive way's failure too, not the recipe's.
    for (let i = 0; i < CALLS; i++) {
      await plain
        .sendCommand(undefined, false, ['RL.SLIDE', `${prefix}:a:${i}`, '5', '60000'])
        .catch(() => {});
    }
    const naive = (await moved(nodes)) - before;
    // With useReplicas, a call without its key may land on a replica and fail outright.
    let failed = 0;
    for (let i = 0; i < 30; i++) {
      await c
        .sendCommand(undefined, false, ['RL.SLIDE', `${prefix}:c:${i}`, '5', '60000'])
        .catch(() => failed++);
    }

    const lim = new Limiter(fromNodeRedis(c), new Limit('RL.SLIDE', [5, 60000]));
    before = await moved(nodes);
    for (let i = 0; i < CALLS; i++) assert.equal((await lim.hit(`${prefix}:b:${i}`)).remaining, 4);
    const recipe = (await moved(nodes)) - before;
    console.error(
      `  node-redis, ${CALLS} calls: ${naive} MOVED without the key, ${recipe} with it; ` +
        `with useReplicas, ${failed} of 30 calls without the key failed`,
    );
    assert.ok(naive > CALLS / 3, `without the key calls should mostly miss: ${naive} MOVED`);
    assert.equal(recipe, 0);

    // RL.PEEK with isReadonly and useReplicas: node-redis picks among the slot's primary and
    // replicas at random, so some of the calls are served by the replica.
    const key = `${prefix}:b:0`;
    const beforePeek = await Promise.all(nodes.map((n) => calls(n, 'RL.PEEK')));
    for (let i = 0; i < 20; i++) {
      const d = await lim.peek(key, { replica: true });
      assert.ok(d === null || d.remaining === 4); // null: the replica has not received it yet
    }
    const afterPeek = await Promise.all(nodes.map((n) => calls(n, 'RL.PEEK')));
    const roles = await Promise.all(nodes.map((n) => n.role()));
    const onReplicas = afterPeek
      .map((n, i) => (roles[i][0] === 'slave' ? n - beforePeek[i] : 0))
      .reduce((a, b) => a + b, 0);
    assert.ok(onReplicas > 0, 'some RL.PEEK calls were served by a replica');
  } finally {
    await c.close();
    await plain.close();
    nodes.forEach((n) => n.disconnect());
  }
});

test('policies: RL.HIT routes by its subject with ioredis and node-redis', { skip }, async () => {
  const nodes = direct();
  const io = await ioCluster();
  const rootNodes = CLUSTER.map(({ host, port }) => ({ url: `redis://${host}:${port}` }));
  const nr = await createCluster({ rootNodes }).connect();
  const name = fresh('node-pol');
  try {
    // A policy is per primary: set it on each (redis-cli --cluster call does the same).
    await Promise.all(
      io.nodes('master').map((n) => n.call('RL.POLICY', 'SET', name, 'rpm', 'SLIDE', '5', '60000', 'COST', '1', 'tpm', 'TOKEN', '1000', '60000')),
    );
    for (const [label, send] of [['ioredis', fromIoredis(io)], ['node-redis', fromNodeRedis(nr)]]) {
      const before = await moved(nodes);
      for (let i = 0; i < 100; i++) {
        const d = await hit(send, name, `${label}:user:${i}`, 10);
        assert.ok(d.allowed && d.refusedBy === null, JSON.stringify(d));
        assert.deepEqual(d.parts.map((p) => p.remaining), [4, 990]);
      }
      assert.equal((await moved(nodes)) - before, 0, `${label}: no MOVED`);
    }
    const d = await hit(fromIoredis(io), name, 'ioredis:user:0', 2000);
    assert.equal(d.allowed, false);
    assert.equal(String(d.refusedBy), 'tpm');
  } finally {
    await Promise.all(io.nodes('master').map((n) => n.call('RL.POLICY', 'DEL', name)));
    io.disconnect();
    await nr.quit();
    nodes.forEach((n) => n.disconnect());
  }
});
