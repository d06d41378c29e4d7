//! The module's settings: Redis module configs (`CONFIG SET/GET ratelimit.*`, a line in
//! redis.conf, or a `name value` pair on the `loadmodule` line).

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
use redis_module::{Context, RedisString};

/// `ratelimit.now-max-ahead-ms`: how far ahead of the server clock a client's `NOW` may be,
/// in milliseconds; `-1` for no bound. Commands replicated from a primary or loaded from the
/// AOF are never refused for it.
pub static NOW_MAX_AHEAD_MS: AtomicI64 = AtomicI64::new(NOW_MAX_AHEAD_DEFAULT);

pub const NOW_MAX_AHEAD_NAME: &str = "now-max-ahead-ms";
pub const NOW_MAX_AHEAD_DEFAULT: i64 = 1000;
/// The largest bound that can be set: a year.
pub const NOW_MAX_AHEAD_MAX: i64 = 365 * 24 * 3600 * 1000;

/// The bound on a client's `NOW`, `None` when there is none.
pub fn now_max_ahead_ms() -> Option<u64> {
    u64::try_from(NOW_MAX_AHEAD_MS.load(Relaxed)).ok()
}

/// The settings' values given on the `loadmodule` line (`name value` pairs), checked: an
/// error names what is wrong, for the log, and the module does not load.
fn from_args(args: &[RedisString]) -> Result<i64, String> {
    let mut now_max_ahead = None;
    let mut words = args
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_slice()).into_owned());
    while let Some(name) = words.next() {
        let short = name.strip_prefix("ratelimit.").unwrap_or(&name);
        if !short.eq_ignore_ascii_case(NOW_MAX_AHEAD_NAME) {
            return Err(format!(
                "'{name}' on the loadmodule line is no setting of the module (its settings: \
                 {NOW_MAX_AHEAD_NAME})"
            ));
        }
        let Some(value) = words.next() else {
            return Err(format!(
                "{NOW_MAX_AHEAD_NAME} on the loadmodule line needs a value"
            ));
        };
        let v = value
            .parse::<i64>()
            .ok()
            .filter(|v| (-1..=NOW_MAX_AHEAD_MAX).contains(v))
            .ok_or_else(|| {
                format!(
                    "{NOW_MAX_AHEAD_NAME} must be an integer from -1 to {NOW_MAX_AHEAD_MAX}, \
                     not '{value}'"
                )
            })?;
        if now_max_ahead.replace(v).is_some() {
            return Err(format!(
                "{NOW_MAX_AHEAD_NAME} is given twice on the loadmodule line"
            ));
        }
    }
    Ok(now_max_ahead.unwrap_or(NOW_MAX_AHEAD_DEFAULT))
}

/// Registers the settings, with the values the `loadmodule` line gives; an error (for the
/// log) for arguments that are not the module's settings.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    let now_max_ahead = from_args(args)?;
    register_i64_configuration(
        ctx,
        NOW_MAX_AHEAD_NAME,
        &NOW_MAX_AHEAD_MS,
        now_max_ahead,
        -1,
        NOW_MAX_AHEAD_MAX,
        ConfigurationFlags::DEFAULT,
        None,
    );
    Ok(())
}
