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

/// `ratelimit.top-window-ms`: the window `RL.TOP` counts refusals over (it answers for the
/// current one and the one before).
pub static TOP_WINDOW_MS: AtomicI64 = AtomicI64::new(TOP_WINDOW_DEFAULT);

pub const TOP_WINDOW_NAME: &str = "top-window-ms";
pub const TOP_WINDOW_DEFAULT: i64 = 60_000;
pub const TOP_WINDOW_MIN: i64 = 1000;
pub const TOP_WINDOW_MAX: i64 = 24 * 3600 * 1000;

/// `RL.TOP`'s window.
pub fn top_window_ms() -> u64 {
    u64::try_from(TOP_WINDOW_MS.load(Relaxed)).unwrap_or(TOP_WINDOW_DEFAULT as u64)
}

/// A setting: its name (after `ratelimit.`), default and bounds.
struct Setting {
    name: &'static str,
    value: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
}

const SETTINGS: [Setting; 2] = [
    Setting {
        name: NOW_MAX_AHEAD_NAME,
        value: &NOW_MAX_AHEAD_MS,
        default: NOW_MAX_AHEAD_DEFAULT,
        min: -1,
        max: NOW_MAX_AHEAD_MAX,
    },
    Setting {
        name: TOP_WINDOW_NAME,
        value: &TOP_WINDOW_MS,
        default: TOP_WINDOW_DEFAULT,
        min: TOP_WINDOW_MIN,
        max: TOP_WINDOW_MAX,
    },
];

/// The settings' values given on the `loadmodule` line (`name value` pairs), checked, in
/// [`SETTINGS`]' order: an error names what is wrong, for the log, and the module does not
/// load.
fn from_args(args: &[RedisString]) -> Result<[i64; 2], String> {
    let mut given: [Option<i64>; 2] = [None; 2];
    let mut words = args
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_slice()).into_owned());
    let names = || {
        SETTINGS
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    while let Some(name) = words.next() {
        let short = name.strip_prefix("ratelimit.").unwrap_or(&name);
        let Some(i) = SETTINGS
            .iter()
            .position(|s| short.eq_ignore_ascii_case(s.name))
        else {
            return Err(format!(
                "'{name}' on the loadmodule line is no setting of the module (its settings: {})",
                names()
            ));
        };
        let s = &SETTINGS[i];
        let Some(value) = words.next() else {
            return Err(format!("{} on the loadmodule line needs a value", s.name));
        };
        let v = value
            .parse::<i64>()
            .ok()
            .filter(|v| (s.min..=s.max).contains(v))
            .ok_or_else(|| {
                format!(
                    "{} must be an integer from {} to {}, not '{value}'",
                    s.name, s.min, s.max
                )
            })?;
        if given[i].replace(v).is_some() {
            return Err(format!("{} is given twice on the loadmodule line", s.name));
        }
    }
    Ok([
        given[0].unwrap_or(SETTINGS[0].default),
        given[1].unwrap_or(SETTINGS[1].default),
    ])
}

/// Registers the settings, with the values the `loadmodule` line gives; an error (for the
/// log) for arguments that are not the module's settings.
pub fn register(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
    let values = from_args(args)?;
    for (s, value) in SETTINGS.iter().zip(values) {
        register_i64_configuration(
            ctx,
            s.name,
            s.value,
            value,
            s.min,
            s.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    Ok(())
}
