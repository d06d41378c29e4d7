'use strict';
// Drivers: one way to send a command over ioredis or node-redis, standalone or cluster, that
// routes every RL.* call by its key (docs/clients.md, "Redis Cluster").
//
// A driver is a function `send(words, { keyIndex, keyCount, readOnly })` returning the raw
// reply, with `words[keyIndex]` the key the call is routed by (default 1; null for a command
// without a key), `keyCount` keys from there (RL.ALL's; default 1) and `readOnly` letting a
// cluster client send the call to a replica. It also carries:
//   send.kind       'ioredis', 'node-redis' or 'custom'
//   send.client     the client it wraps
//   send.isCluster  whether that client is a cluster client
//   send.primaries  async () => one driver per primary (the driver itself on a single server)
//   send.command    (ioredis only) the Command object for `words`, for a pipeline or MULTI
// The client library's own key prefix (ioredis `keyPrefix`, node-redis `keyPrefix`) is added
// to the key here: neither applies it to a command it does not know.

const { createRequire } = require('node:module');
const path = require('node:path');

/**
 * A module this package does not depend on (a peer: ioredis, rate-limiter-flexible), the
 * application's own copy first: the main module's, the working directory's, then one beside
 * this package. So a package installed as a link to a clone (`npm install ./clients/node`)
 * uses the application's copy, as an installed one does.
 */
function peer(name) {
  const bases = [require.main && require.main.filename, path.join(process.cwd(), 'index.js'), __filename];
  let first;
  for (const base of bases) {
    if (!base) continue;
    try {
      return createRequire(base)(name);
    } catch (err) {
      first = first || err;
    }
  }
  throw first;
}

/** ioredis's Command class, from the ioredis that made `client` where it can be found. */
function ioredisCommand(client) {
  const ctor = client && client.constructor;
  if (ctor && typeof ctor.Command === 'function') return ctor.Command; // a Redis instance
  for (const m of Object.values(require.cache)) {
    // A Cluster: the ioredis module that exports it also exports Command.
    const e = m && m.exports;
    if (e && e.Cluster === ctor && typeof e.Command === 'function') return e.Command;
  }
  return peer('ioredis').Command;
}

const keyedCommands = new WeakMap();

/**
 * A subclass of ioredis's Command that names its key, so that a Cluster computes the slot
 * from it: ioredis finds keys from its own command table, which has no module command.
 */
function keyedCommandClass(Command) {
  let Keyed = keyedCommands.get(Command);
  if (!Keyed) {
    Keyed = class KeyedCommand extends Command {
      getKeys() {
        return this.keyAt === null ? [] : [this.args[this.keyAt]];
      }
    };
    keyedCommands.set(Command, Keyed);
  }
  return Keyed;
}

function withPrefix(words, keyIndex, keyCount, prefix) {
  if (!prefix || keyIndex === null || keyIndex === undefined) return words;
  const out = words.slice();
  for (let i = keyIndex; i < keyIndex + keyCount; i++) {
    const key = out[i];
    out[i] = Buffer.isBuffer(key) || Buffer.isBuffer(prefix)
      ? Buffer.concat([Buffer.from(prefix), Buffer.from(key)])
      : prefix + key;
  }
  return out;
}

const asArg = (w) => (Buffer.isBuffer(w) ? w : String(w));

/**
 * A driver for an ioredis client (Redis or Cluster).
 *
 * ioredis finds no key in a module command: a Cluster sends it to a random primary (a MOVED,
 * followed, for two calls in three on three primaries), a cluster pipeline returns the MOVED
 * errors as replies, and `keyPrefix` is not applied. Each command is sent here as a Command
 * that names its key: its slot routes it, `readOnly` lets `scaleReads: 'slave'` send RL.PEEK
 * to a replica, and the prefix is added.
 */
function fromIoredis(client) {
  const Keyed = keyedCommandClass(ioredisCommand(client));
  const options = client.options || {};
  const prefix = options.keyPrefix || (options.redisOptions && options.redisOptions.keyPrefix) || '';
  const command = (words, { readOnly = false, keyIndex = 1, keyCount = 1 } = {}) => {
    const [name, ...args] = withPrefix(words.map(asArg), keyIndex, keyCount, prefix);
    // Bulk replies as strings, as ioredis's call() gives them.
    const cmd = new Keyed(String(name), args, { readOnly, replyEncoding: 'utf8' });
    cmd.keyAt = keyIndex === null || keyIndex === undefined ? null : keyIndex - 1;
    return cmd;
  };
  const send = (words, opts = {}) => client.sendCommand(command(words, opts));
  send.command = command;
  send.kind = 'ioredis';
  send.client = client;
  send.isCluster = client.isCluster === true;
  send.primaries = async () => (send.isCluster ? client.nodes('master').map(fromIoredis) : [send]);
  return send;
}

/** Whether `client` is a node-redis cluster client (createCluster). */
const isNodeRedisCluster = (client) => typeof client.getSlotRandomNode === 'function' || 'masters' in client;

/**
 * A driver for a node-redis client (createClient or createCluster). A cluster routes a raw
 * command only when given its key, `sendCommand(key, isReadonly, words)`: given here always.
 * `readOnly` sends RL.PEEK to a replica of a cluster made with `useReplicas: true`.
 */
function fromNodeRedis(client) {
  const cluster = isNodeRedisCluster(client);
  const send = (words, { readOnly = false, keyIndex = 1, keyCount = 1 } = {}) => {
    const args = withPrefix(words.map(asArg), keyIndex, keyCount, client._keyPrefix);
    if (!cluster) return client.sendCommand(args);
    const key = keyIndex === null || keyIndex === undefined ? undefined : args[keyIndex];
    return client.sendCommand(key, readOnly, args);
  };
  send.kind = 'node-redis';
  send.client = client;
  send.isCluster = cluster;
  send.primaries = async () => {
    if (!cluster) return [send];
    return Promise.all(client.masters.map(async (m) => fromNodeRedis(await client.nodeClient(m))));
  };
  return send;
}

/**
 * The driver for `x`: an ioredis or node-redis client, a driver already, or a function
 * `(words, opts) => Promise<reply>` of the caller's (then on a single server only).
 */
function driverFor(x) {
  if (typeof x === 'function') {
    if (x.kind) return x;
    const send = (words, opts) => x(words, opts);
    send.kind = 'custom';
    send.client = x;
    send.isCluster = false;
    send.primaries = async () => [send];
    return send;
  }
  if (x && typeof x.call === 'function' && typeof x.defineCommand === 'function') return fromIoredis(x);
  if (x && typeof x.sendCommand === 'function' && 'isOpen' in x) return fromNodeRedis(x);
  throw new TypeError('not an ioredis or node-redis client, nor a function (words, opts) => reply');
}

module.exports = { fromIoredis, fromNodeRedis, driverFor, peer };
