//! `RL.PENALTY key refusals window_ms ban_ms [MAX ms] [HORIZON ms] [COST n] [NOW ms]`: a
//! penalty box. Each call counts `COST` (default 1) refusals against the key; `refusals` of
//! them within `window_ms` (a window opened by the first) ban the key for `ban_ms`. A ban
//! that starts less than `HORIZON` after the one before ended lasts twice as long as that one
//! (from `ban_ms`, at most `MAX`); after a quiet `HORIZON`, the next is `ban_ms` again. While
//! banned, a call counts nothing and is refused, `retry_after` the rest of the ban.
//!
//! It is what a policy's `PENALTY` clause keeps for each subject (`RL.HIT` counts each hit
//! the enforced limiters refuse), on the key `policy||penalty|{subject}`; as a command of
//! its own, it serves a client that decides refusals itself (a failed login, say).
//!
//! The decision is a rate limiter's, on refusals: allowed while not banned (the call
//! counted), `limit` the refusals a ban takes, `remaining` those left before the next ban,
//! `reset_after` until the key holds nothing (no refusal in its window, the horizon after
//! the last ban over).
//!
//! Encoding (kind 8): version 1, `latest count opened level until refusals window_ms ban_ms
//! max_ms horizon_ms`: `opened` when the window of the `count` refusals opened (0 with none),
//! `until` when the last ban ends or ended (0: none yet), `level` the doublings of the last.
//! A key holds it in a box.

use crate::core::args::{self, positional_duration, COST};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Encoding, Form, Rate, RateCall};
use crate::core::limit::Limit;
use crate::core::meta::{self, arg, ArgKind, Info, Keys, Stats};
#[cfg(test)]
use crate::core::sample::{self, Sample};
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

/// 31 days, in milliseconds.
const DAY31: u64 = 31 * 24 * 3600 * 1000;

/// The most refusals a ban may take.
pub const MAX_REFUSALS: u64 = u32::MAX as u64;
/// The longest window, ban and horizon: 31 days.
pub const MAX_MS: u64 = DAY31;
/// The most doublings a ban is counted in (past them, every ban is `MAX`).
const MAX_LEVEL: u64 = 40;

/// A penalty's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub refusals: u64,
    pub window_ms: u64,
    pub ban_ms: u64,
    pub max_ms: u64,
    pub horizon_ms: u64,
}

impl Params {
    fn valid(&self) -> bool {
        (1..=MAX_REFUSALS).contains(&self.refusals)
            && (1..=MAX_MS).contains(&self.window_ms)
            && (1..=MAX_MS).contains(&self.ban_ms)
            && (self.ban_ms..=MAX_MS).contains(&self.max_ms)
            && self.horizon_ms <= MAX_MS
    }

    /// How long a ban of `level` doublings lasts.
    fn ban(&self, level: u64) -> Duration {
        let doubled = self.ban_ms.checked_shl(level as u32).unwrap_or(u64::MAX);
        let ms = match doubled >> level == self.ban_ms {
            true => doubled.min(self.max_ms),
            false => self.max_ms,
        };
        Duration::from_ms(ms)
    }
}

/// A key's refusals and bans: 56 bytes, so that a box of it behind the storage's header
/// stays in its size class (see `rm::storage::places`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Penalty {
    latest: Instant,
    /// When the window of the refusals counted opened (none counted: the epoch).
    opened: Instant,
    /// When the last ban ends or ended (the epoch: none yet).
    until: Instant,
    count: u32,
    /// The doublings of the last ban.
    level: u8,
    // The parameters last recorded under (each fits 32 bits: see `Params::valid`).
    refusals: u32,
    window_ms: u32,
    ban_ms: u32,
    max_ms: u32,
    horizon_ms: u32,
}

const _: () = assert!(std::mem::size_of::<Penalty>() == 56);

impl Penalty {
    /// The one validating constructor.
    fn from_parts(
        p: Params,
        latest: Instant,
        count: u64,
        opened: Instant,
        level: u64,
        until: Instant,
    ) -> Option<Penalty> {
        let valid = p.valid()
            && latest <= MAX_TIMESTAMP
            && (count == 0) == (opened == Instant::EPOCH)
            && opened <= latest
            && level <= MAX_LEVEL
            && (until != Instant::EPOCH || level == 0)
            && until <= latest + Duration::from_ms(MAX_MS);
        let narrow = |v: u64| u32::try_from(v).ok();
        valid.then_some(())?;
        Some(Penalty {
            latest,
            opened,
            until,
            count: narrow(count)?,
            level: u8::try_from(level).ok()?,
            refusals: narrow(p.refusals)?,
            window_ms: narrow(p.window_ms)?,
            ban_ms: narrow(p.ban_ms)?,
            max_ms: narrow(p.max_ms)?,
            horizon_ms: narrow(p.horizon_ms)?,
        })
    }

    fn count(&self) -> u64 {
        u64::from(self.count)
    }

    fn level(&self) -> u64 {
        u64::from(self.level)
    }

    /// Whether the key is banned at `now`.
    pub fn banned(&self, now: Instant) -> bool {
        now < self.until
    }

    /// The refusals that still count at `now` under `p`.
    fn count_at(&self, now: Instant, p: &Params) -> u64 {
        match self.count > 0 && now < self.opened + Duration::from_ms(p.window_ms) {
            true => self.count(),
            false => 0,
        }
    }

    /// When the key holds nothing any more under `p`: its window over, and the horizon
    /// after its last ban.
    fn empty_under(&self, now: Instant, p: &Params) -> Option<Instant> {
        let window = (self.count_at(now, p) > 0).then(|| self.opened + Duration::from_ms(p.window_ms));
        let bans = (self.until != Instant::EPOCH)
            .then(|| self.until + Duration::from_ms(p.horizon_ms))
            .filter(|&end| now < end);
        window.max(bans)
    }

    /// The state once `cost` refusals are counted at `now` under `p` (a banned key counts
    /// none); `None` past the state's bounds.
    fn counted(&self, now: Instant, p: &Params, cost: u64) -> Option<Penalty> {
        let now = now.max(self.latest);
        if !p.valid() || now > MAX_TIMESTAMP {
            return None;
        }
        if self.banned(now) || cost == 0 {
            let (count, level) = (self.count(), self.level());
            return Penalty::from_parts(*p, now, count, self.opened, level, self.until);
        }
        let before = self.count_at(now, p);
        let opened = if before == 0 { now } else { self.opened };
        let count = before.saturating_add(cost);
        if count < p.refusals {
            return Penalty::from_parts(*p, now, count, opened, self.level(), self.until);
        }
        // A ban: twice the last when it starts within the horizon after it.
        let after_last = self.until != Instant::EPOCH
            && now < self.until + Duration::from_ms(p.horizon_ms);
        let level = match after_last {
            true => (self.level() + 1).min(MAX_LEVEL),
            false => 0,
        };
        let until = now + p.ban(level);
        Penalty::from_parts(*p, now, 0, Instant::EPOCH, level, until)
    }
}

impl Limit for Penalty {
    type Params = Params;
    type Stored = Params;

    fn stored(&self) -> Params {
        Params {
            refusals: u64::from(self.refusals),
            window_ms: u64::from(self.window_ms),
            ban_ms: u64::from(self.ban_ms),
            max_ms: u64::from(self.max_ms),
            horizon_ms: u64::from(self.horizon_ms),
        }
    }

    /// Takes back up to `units` of the refusals counted (a ban stays).
    fn give_back(&mut self, now: Instant, units: u64) -> Decision {
        let now = now.max(self.latest);
        let p = self.stored();
        let count = self.count_at(now, &p).saturating_sub(units);
        let opened = if count == 0 { Instant::EPOCH } else { self.opened };
        if let Some(next) = Penalty::from_parts(p, now, count, opened, self.level(), self.until) {
            *self = next;
        }
        self.evaluate(now, &self.stored(), 0)
    }

    fn evaluate(&self, now: Instant, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest);
        if self.banned(now) {
            let rest = self.until - now;
            return Decision {
                allowed: false,
                limit: p.refusals,
                remaining: 0,
                retry_after: Wait::For(rest),
                reset_after: self.empty_under(now, p).map_or(rest, |end| end - now),
            };
        }
        let after = self.counted(now, p, cost);
        let left = after.as_ref().map_or(0, |a| a.count_at(now, p));
        let banned = after.as_ref().is_some_and(|a| a.banned(now));
        Decision {
            allowed: true,
            limit: p.refusals,
            remaining: if banned { 0 } else { p.refusals.saturating_sub(left) },
            retry_after: Wait::None,
            reset_after: after
                .as_ref()
                .and_then(|a| a.empty_under(now, p))
                .map_or(Duration::ZERO, |end| end - now),
        }
    }

    fn record(&mut self, now: Instant, p: &Params, cost: u64) -> bool {
        self.counted(now, p, cost).map(|next| *self = next).is_some()
    }

    fn can_record(&self, now: Instant, p: &Params, cost: u64) -> bool {
        self.counted(now, p, cost).is_some()
    }

    fn empty_at(&self) -> Option<Instant> {
        self.empty_under(self.latest, &self.stored())
    }

    fn latest(&self) -> Instant {
        self.latest
    }
}

args::option_set! {
    /// `RL.PENALTY`'s options after its numbers.
    pub struct Options {
        max: args::Opt::duration("MAX", 1, MAX_MS),
        horizon: args::Opt::duration("HORIZON", 0, MAX_MS),
        cost: COST,
    }
}

static PENALTY_INFO: Info = Info {
    name: "RL.PENALTY",
    event: c"rl.penalty",
    summary: "A penalty box: counts COST (default 1) refusals; refusals of them within window_ms (opened by the first) ban the key for ban_ms, twice the last ban (at most MAX) when it starts within HORIZON after it. While banned, counts nothing and is refused, retry_after the rest of the ban",
    complexity: "O(1)",
    arity: -5,
    keys: Keys::First,
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Rate for Penalty {
    const COMMAND: &'static str = "RL.PENALTY";
    const CODE: u8 = 8;
    const FORM: Form = Form::Boxed;
    const INFO: &'static Info = &PENALTY_INFO;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(3),
        params: &[
            arg("refusals", ArgKind::Integer),
            meta::WINDOW_MS,
            arg("ban-ms", ArgKind::Integer),
        ],
        options: Options::TABLE,
    };
    /// Not one of `RL.ALL`'s limiters: a policy takes it as its `PENALTY` clause.
    const KEYWORD: Option<&'static str> = None;
    const EFFECT_CODE: u8 = 9;
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let refusals = args::positional(words, 0, "refusals", 1, MAX_REFUSALS)?;
        let window_ms = positional_duration(words, 1, "window_ms", 1, MAX_MS)?;
        let ban_ms = positional_duration(words, 2, "ban_ms", 1, MAX_MS)?;
        let o = Options::parse(words.get(3..).unwrap_or_default())?;
        let max_ms = o.max.map_or(ban_ms, args::Value::int);
        if max_ms < ban_ms {
            return Err(Error::Invalid("MAX must be at least ban_ms"));
        }
        Ok(RateCall {
            params: Params {
                refusals,
                window_ms,
                ban_ms,
                max_ms,
                horizon_ms: o.horizon.map_or(max_ms, args::Value::int),
            },
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    /// `p` is valid (parsed).
    fn fresh(p: &Params) -> Penalty {
        let e = Instant::EPOCH;
        Penalty::from_parts(*p, e, 0, e, 0, e).unwrap_or(Penalty {
            latest: e,
            opened: e,
            until: e,
            count: 0,
            level: 0,
            refusals: 1,
            window_ms: 1,
            ban_ms: 1,
            max_ms: 1,
            horizon_ms: 0,
        })
    }

    /// The numbers, then `MAX` and `HORIZON` when they are not their defaults.
    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.refusals).number(p.window_ms).number(p.ban_ms);
        if p.max_ms != p.ban_ms {
            out.option("MAX", p.max_ms);
        }
        if p.horizon_ms != p.max_ms {
            out.option("HORIZON", p.horizon_ms);
        }
    }
}

impl Encoding for Penalty {
    const VERSION: u8 = 1;

    fn encode<S: Sink>(&self, out: &mut S) {
        let p = self.stored();
        for v in [
            self.latest.ms(),
            self.count(),
            self.opened.ms(),
            self.level(),
            self.until.ms(),
            p.refusals,
            p.window_ms,
            p.ban_ms,
            p.max_ms,
            p.horizon_ms,
        ] {
            out.varint(v);
        }
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if version != Self::VERSION {
            return Err(Malformed("no such version for this kind"));
        }
        let (latest, count, opened) = (r.varint()?, r.varint()?, r.varint()?);
        let (level, until) = (r.varint()?, r.varint()?);
        let p = Params {
            refusals: r.varint()?,
            window_ms: r.varint()?,
            ban_ms: r.varint()?,
            max_ms: r.varint()?,
            horizon_ms: r.varint()?,
        };
        let at = Instant::from_ms;
        Penalty::from_parts(p, at(latest), count, at(opened), level, at(until))
            .ok_or(Malformed("not a penalty's state"))
    }
}

#[cfg(test)]
impl Sample for Penalty {
    fn sample_words(p: [u8; 4], _now: Instant) -> String {
        let refusals = sample::pick(p[0], &[1, 2, 3, 10, MAX_REFUSALS]);
        let window = sample::pick(p[1], &[1, 1000, 60_000, MAX_MS]);
        let ban = sample::pick(p[2], &[1, 500, 60_000, MAX_MS]);
        let max = match p[3] % 3 {
            0 => String::new(),
            1 => format!(" MAX {}", (ban * 8).min(MAX_MS)),
            _ => format!(" MAX {MAX_MS} HORIZON {}", sample::pick(p[3], &[0, 1000, MAX_MS])),
        };
        format!("PENALTY {refusals} {window} {ban}{max}") + &sample::cost_word(p[2], refusals)
    }
}

#[cfg(test)]
mod tests;
