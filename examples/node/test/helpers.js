'use strict';
// Shared by the tests: the servers examples/test.sh started, and INFO counters.
const { randomBytes } = require('node:crypto');

const URL = process.env.RL_URL || 'redis://127.0.0.1:6379';
const CLUSTER = (process.env.RL_CLUSTER || '')
  .split(',')
  .filter(Boolean)
  .map((hp) => {
    const [host, port] = hp.split(':');
    return { host, port: Number(port) };
  });

const fresh = (prefix) => `${prefix}:${randomBytes(6).toString('hex')}`;

/** A field of an INFO section, summed over its lines matching `line` (a RegExp with one group). */
function infoNumber(text, line) {
  let total = 0;
  for (const m of text.matchAll(new RegExp(line, 'gm'))) total += Number(m[1]);
  return total;
}

/** How many times `command` reached the server behind an ioredis client (INFO commandstats). */
async function calls(ioredis, command) {
  const text = await ioredis.info('commandstats');
  return infoNumber(text, `^cmdstat_${command.replace('.', '\\.')}:calls=(\\d+)`);
}

/** MOVED replies sent by these ioredis clients' servers (INFO errorstats). */
async function moved(clients) {
  let total = 0;
  for (const c of clients) total += infoNumber(await c.info('errorstats'), '^errorstat_MOVED:count=(\\d+)');
  return total;
}

module.exports = { URL, CLUSTER, fresh, calls, moved };
