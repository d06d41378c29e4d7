'use strict';
// The hand-written declarations compile for CommonJS and ES module TypeScript users, against
// the typings of ioredis, node-redis, express-rate-limit and rate-limiter-flexible.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

test('tsc --noEmit on test/types (strict, library checks on)', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types', 'tsconfig.json')], { encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout}${err.stderr}`);
  }
});
