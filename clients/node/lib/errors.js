'use strict';
// The errors a client raises itself (a server's own errors reach the caller as its client
// library raises them: ioredis's ReplyError, node-redis's ErrorReply).

/** The text every client package of redis-ratelimit raises when the module is missing. */
const MODULE_NOT_LOADED =
  'the ratelimit module is not loaded on this server (RL.SLIDE is unknown): load it with ' +
  'MODULE LOAD /path/to/libredis_ratelimit.so or a loadmodule line in redis.conf (pip install ' +
  'redis-ratelimit-module, then redis-ratelimit-module path, prints it); where MODULE LOAD is ' +
  "not allowed, pass fallback: 'lua' (fixed window, sliding log and token bucket only). See " +
  'docs/clients.md of redis-ratelimit.';

/**
 * The module is not loaded on the server: raised at the first command when no fallback was
 * asked for, and, with `fallback: 'lua'`, for a command that has no Lua twin.
 */
class ModuleNotLoadedError extends Error {
  constructor(message = MODULE_NOT_LOADED) {
    super(message);
    this.name = 'ModuleNotLoadedError';
  }
}

/** The error for `command` when the server runs the Lua twins instead of the module. */
function noLuaTwin(command) {
  return new ModuleNotLoadedError(
    `${command} needs the ratelimit module, which is not loaded on this server: with ` +
      "fallback: 'lua' only RL.FIXED, RL.SLIDE and RL.TOKEN are available (their Lua twins)",
  );
}

module.exports = { MODULE_NOT_LOADED, ModuleNotLoadedError, noLuaTwin };
