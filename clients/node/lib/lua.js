'use strict';
// Scripts run with EVALSHA, reloaded with EVAL when the server answers NOSCRIPT (after a
// restart, a failover or SCRIPT FLUSH): the Lua twins of RL.FIXED, RL.SLIDE and RL.TOKEN
// (lua/*.lua, copies of clients/lua/*.lua), for `fallback: 'lua'`, and the scripts of the
// adapters.

const { createHash } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

class Script {
  /** @param {string} source the script's text */
  constructor(source) {
    this.source = source;
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  /**
   * Runs the script on `keys[0]`'s node: one EVALSHA, and one EVAL more when the server does
   * not hold the script yet.
   */
  async run(send, keys, args) {
    const tail = [String(keys.length), ...keys, ...args];
    try {
      return await send(['EVALSHA', this.sha, ...tail], { keyIndex: keys.length ? 3 : null });
    } catch (err) {
      if (!/^NOSCRIPT/.test(String(err && err.message))) throw err;
      return send(['EVAL', this.source, ...tail], { keyIndex: keys.length ? 3 : null });
    }
  }
}

const LUA_DIR = path.join(__dirname, '..', 'lua');

/** The Lua twins, by the command they stand for. */
const TWINS = Object.freeze({
  'RL.FIXED': new Script(fs.readFileSync(path.join(LUA_DIR, 'fixed.lua'), 'utf8')),
  'RL.SLIDE': new Script(fs.readFileSync(path.join(LUA_DIR, 'slide.lua'), 'utf8')),
  'RL.TOKEN': new Script(fs.readFileSync(path.join(LUA_DIR, 'token.lua'), 'utf8')),
});

module.exports = { Script, TWINS, LUA_DIR };
