//! A limiter's configuration: its kind and numbers, as the module's commands take them after
//! the key, and as RL.ALL and RL.POLICY SET take them after the kind's keyword.

use crate::reply::LeaseId;

/// One limiter: a kind and its parameters. [`Limit::words`] gives what follows the key in the
/// kind's own command (without `COST`, which each call gives).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// `RL.SLIDE`: at most `limit` units in any `window_ms`, for every pair (up to 8).
    Slide {
        /// `(limit, window_ms)` pairs.
        windows: Vec<(u64, u64)>,
    },
    /// `RL.TOKEN`: `limit` tokens per `window_ms`, a bucket of `burst` (default `limit`).
    Token {
        /// Tokens per window.
        limit: u64,
        /// The window, in ms.
        window_ms: u64,
        /// `BURST`: the bucket's size.
        burst: Option<u64>,
    },
    /// `RL.LEAKY`: one booking every `window_ms / limit`, waiting at most `max_delay_ms`.
    Leaky {
        /// Bookings per window.
        limit: u64,
        /// The window, in ms.
        window_ms: u64,
        /// `MAXDELAY` (default `window_ms`).
        max_delay_ms: Option<u64>,
        /// `BURST` (default 1).
        burst: Option<u64>,
    },
    /// `RL.FIXED`: `limit` units per fixed window; `ALIGN` starts windows at multiples of
    /// `window_ms` since the epoch.
    Fixed {
        /// Units per window.
        limit: u64,
        /// The window, in ms.
        window_ms: u64,
        /// `ALIGN`.
        align: bool,
    },
    /// `RL.SUBWIN`: a rolling window from sub-interval counters.
    Subwin {
        /// Units per window.
        limit: u64,
        /// The window, in ms.
        window_ms: u64,
        /// One sub-interval, in ms (`window_ms` is a multiple of it).
        resolution_ms: u64,
    },
    /// `ACQUIRE` in RL.ALL or a policy: at most `limit` units held at once under leases of
    /// `lease_ms` (RL.ACQUIRE itself: [`RateLimit::acquire`](crate::RateLimit::acquire)).
    Acquire {
        /// Units held at once.
        limit: u64,
        /// How long a lease lasts unless released or extended.
        lease_ms: u64,
        /// `ID`: the caller's own lease id (not in a policy).
        id: Option<LeaseId>,
    },
    /// `THROTTLE` in RL.ALL or a policy: CL.THROTTLE's bucket (`count_per_period` per
    /// `period_s` seconds, holding `max_burst + 1`). CL.THROTTLE itself:
    /// [`RateLimit::throttle`](crate::RateLimit::throttle).
    Throttle {
        /// redis-cell's `max_burst`.
        max_burst: u64,
        /// Units per period.
        count_per_period: u64,
        /// The period, in seconds.
        period_s: u64,
    },
}

impl Limit {
    /// `RL.SLIDE limit window_ms`; add windows with [`and_window`](Self::and_window).
    pub fn slide(limit: u64, window_ms: u64) -> Limit {
        Limit::Slide {
            windows: vec![(limit, window_ms)],
        }
    }

    /// Another `(limit, window_ms)` pair of an `RL.SLIDE` limiter (ignored by the other kinds).
    pub fn and_window(mut self, limit: u64, window_ms: u64) -> Limit {
        if let Limit::Slide { windows } = &mut self {
            windows.push((limit, window_ms));
        }
        self
    }

    /// `RL.TOKEN limit window_ms`.
    pub fn token(limit: u64, window_ms: u64) -> Limit {
        Limit::Token {
            limit,
            window_ms,
            burst: None,
        }
    }

    /// `RL.LEAKY limit window_ms`.
    pub fn leaky(limit: u64, window_ms: u64) -> Limit {
        Limit::Leaky {
            limit,
            window_ms,
            max_delay_ms: None,
            burst: None,
        }
    }

    /// `RL.FIXED limit window_ms`.
    pub fn fixed(limit: u64, window_ms: u64) -> Limit {
        Limit::Fixed {
            limit,
            window_ms,
            align: false,
        }
    }

    /// `RL.SUBWIN limit window_ms resolution_ms`.
    pub fn subwin(limit: u64, window_ms: u64, resolution_ms: u64) -> Limit {
        Limit::Subwin {
            limit,
            window_ms,
            resolution_ms,
        }
    }

    /// `ACQUIRE limit lease_ms`, for RL.ALL and policies.
    pub fn acquire(limit: u64, lease_ms: u64) -> Limit {
        Limit::Acquire {
            limit,
            lease_ms,
            id: None,
        }
    }

    /// `THROTTLE max_burst count_per_period period_s`, for RL.ALL and policies.
    pub fn throttle(max_burst: u64, count_per_period: u64, period_s: u64) -> Limit {
        Limit::Throttle {
            max_burst,
            count_per_period,
            period_s,
        }
    }

    /// `BURST b` (RL.TOKEN, RL.LEAKY; ignored by the other kinds).
    pub fn burst(mut self, b: u64) -> Limit {
        match &mut self {
            Limit::Token { burst, .. } | Limit::Leaky { burst, .. } => *burst = Some(b),
            _ => {}
        }
        self
    }

    /// `MAXDELAY ms` (RL.LEAKY; ignored by the other kinds).
    pub fn max_delay(mut self, ms: u64) -> Limit {
        if let Limit::Leaky { max_delay_ms, .. } = &mut self {
            *max_delay_ms = Some(ms);
        }
        self
    }

    /// `ALIGN` (RL.FIXED; ignored by the other kinds).
    pub fn align(mut self) -> Limit {
        if let Limit::Fixed { align, .. } = &mut self {
            *align = true;
        }
        self
    }

    /// `ID lease-id` (`ACQUIRE` in RL.ALL; ignored by the other kinds).
    pub fn lease_id(mut self, lease: impl Into<LeaseId>) -> Limit {
        if let Limit::Acquire { id, .. } = &mut self {
            *id = Some(lease.into());
        }
        self
    }

    /// The kind's keyword in RL.ALL and RL.POLICY SET: `SLIDE`, `TOKEN`, ...
    pub fn keyword(&self) -> &'static str {
        match self {
            Limit::Slide { .. } => "SLIDE",
            Limit::Token { .. } => "TOKEN",
            Limit::Leaky { .. } => "LEAKY",
            Limit::Fixed { .. } => "FIXED",
            Limit::Subwin { .. } => "SUBWIN",
            Limit::Acquire { .. } => "ACQUIRE",
            Limit::Throttle { .. } => "THROTTLE",
        }
    }

    /// The kind's own command: `RL.SLIDE`, ..., `RL.ACQUIRE`, `CL.THROTTLE`.
    pub fn command(&self) -> &'static str {
        match self {
            Limit::Slide { .. } => "RL.SLIDE",
            Limit::Token { .. } => "RL.TOKEN",
            Limit::Leaky { .. } => "RL.LEAKY",
            Limit::Fixed { .. } => "RL.FIXED",
            Limit::Subwin { .. } => "RL.SUBWIN",
            Limit::Acquire { .. } => "RL.ACQUIRE",
            Limit::Throttle { .. } => "CL.THROTTLE",
        }
    }

    /// The parameters and options after the key (after the keyword in RL.ALL), `COST` left out.
    pub fn words(&self) -> Vec<Vec<u8>> {
        fn n(v: u64) -> Vec<u8> {
            v.to_string().into_bytes()
        }
        let mut w: Vec<Vec<u8>> = Vec::new();
        match self {
            Limit::Slide { windows } => {
                for &(l, ms) in windows {
                    w.push(n(l));
                    w.push(n(ms));
                }
            }
            Limit::Token {
                limit,
                window_ms,
                burst,
            } => {
                w.extend([n(*limit), n(*window_ms)]);
                if let Some(b) = burst {
                    w.extend([b"BURST".to_vec(), n(*b)]);
                }
            }
            Limit::Leaky {
                limit,
                window_ms,
                max_delay_ms,
                burst,
            } => {
                w.extend([n(*limit), n(*window_ms)]);
                if let Some(d) = max_delay_ms {
                    w.extend([b"MAXDELAY".to_vec(), n(*d)]);
                }
                if let Some(b) = burst {
                    w.extend([b"BURST".to_vec(), n(*b)]);
                }
            }
            Limit::Fixed {
                limit,
                window_ms,
                align,
            } => {
                w.extend([n(*limit), n(*window_ms)]);
                if *align {
                    w.push(b"ALIGN".to_vec());
                }
            }
            Limit::Subwin {
                limit,
                window_ms,
                resolution_ms,
            } => w.extend([n(*limit), n(*window_ms), n(*resolution_ms)]),
            Limit::Acquire {
                limit,
                lease_ms,
                id,
            } => {
                w.extend([n(*limit), n(*lease_ms)]);
                if let Some(id) = id {
                    w.extend([b"ID".to_vec(), id.0.clone()]);
                }
            }
            Limit::Throttle {
                max_burst,
                count_per_period,
                period_s,
            } => w.extend([n(*max_burst), n(*count_per_period), n(*period_s)]),
        }
        w
    }

    /// The `(quota, window_ms)` pairs this limiter enforces, for `RateLimit-Policy`: every
    /// window of RL.SLIDE, the rate of the others (RL.TOKEN advertises its rate, not its
    /// burst), none for `ACQUIRE` (a concurrency limit has no window).
    pub fn windows(&self) -> Vec<(u64, u64)> {
        match self {
            Limit::Slide { windows } => windows.clone(),
            Limit::Token {
                limit, window_ms, ..
            }
            | Limit::Leaky {
                limit, window_ms, ..
            }
            | Limit::Fixed {
                limit, window_ms, ..
            }
            | Limit::Subwin {
                limit, window_ms, ..
            } => vec![(*limit, *window_ms)],
            Limit::Acquire { .. } => vec![],
            Limit::Throttle {
                count_per_period,
                period_s,
                ..
            } => vec![(*count_per_period, period_s.saturating_mul(1000))],
        }
    }
}

/// One limiter of a policy (`RL.POLICY SET name <limiter name> <KIND> ... [COST n]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyLimiter {
    /// Its name in the policy: starts with a letter; letters, digits and `_ - . :`.
    pub name: String,
    /// Its kind and numbers.
    pub limit: Limit,
    /// A cost of its own, kept on every call (`COST n`; `THROTTLE`'s quantity); `None` takes
    /// each call's `COST`.
    pub cost: Option<u64>,
}

impl PolicyLimiter {
    /// A limiter named `name` that takes each call's cost.
    pub fn new(name: impl Into<String>, limit: Limit) -> PolicyLimiter {
        PolicyLimiter {
            name: name.into(),
            limit,
            cost: None,
        }
    }

    /// A cost of its own on every call (`rpm ... COST 1` beside a token budget).
    pub fn cost(mut self, cost: u64) -> PolicyLimiter {
        self.cost = Some(cost);
        self
    }

    /// Its words in `RL.POLICY SET`.
    pub fn words(&self) -> Vec<Vec<u8>> {
        let mut w = vec![
            self.name.clone().into_bytes(),
            self.limit.keyword().as_bytes().to_vec(),
        ];
        w.extend(self.limit.words());
        if let Some(c) = self.cost {
            if !matches!(self.limit, Limit::Throttle { .. }) {
                w.push(b"COST".to_vec());
            }
            w.push(c.to_string().into_bytes());
        }
        w
    }
}

const KINDS: [&str; 7] = [
    "SLIDE", "TOKEN", "LEAKY", "FIXED", "SUBWIN", "ACQUIRE", "THROTTLE",
];

/// Reads a policy's definition (the words of `RL.POLICY GET`, or of a LIST entry) back into
/// its limiters; `None` for words this version cannot read (a newer kind or option).
pub fn parse_policy(words: &[String]) -> Option<Vec<PolicyLimiter>> {
    let is_kind = |w: &str| KINDS.contains(&w.to_ascii_uppercase().as_str());
    let starts: Vec<usize> = (1..words.len()).filter(|&i| is_kind(&words[i])).collect();
    // Before the first limiter's name: the policy's clauses (`SHADOW`, `PENALTY ...`).
    let first = *starts.first()?;
    let clause = |w: &String| {
        let w = w.to_ascii_uppercase();
        ["SHADOW", "PENALTY", "MAX", "HORIZON"].contains(&w.as_str())
            || w.starts_with(|c: char| c.is_ascii_digit())
    };
    if !words[..first - 1].iter().all(clause) {
        return None;
    }
    let mut out = Vec::new();
    for (j, &k) in starts.iter().enumerate() {
        let end = starts.get(j + 1).map_or(words.len(), |&next| next - 1);
        out.push(parse_limiter(&words[k - 1], &words[k], &words[k + 1..end])?);
    }
    Some(out)
}

fn parse_limiter(name: &str, kind: &str, rest: &[String]) -> Option<PolicyLimiter> {
    let nums: Vec<u64> = rest.iter().map_while(|w| w.parse().ok()).collect();
    let mut opts = rest[nums.len()..].iter();
    let (mut cost, mut burst, mut max_delay, mut align) = (None, None, None, false);
    while let Some(o) = opts.next() {
        match o.to_ascii_uppercase().as_str() {
            "COST" => cost = Some(opts.next()?.parse().ok()?),
            "BURST" => burst = Some(opts.next()?.parse().ok()?),
            "MAXDELAY" => max_delay = Some(opts.next()?.parse().ok()?),
            "ALIGN" => align = true,
            // A shadow limiter's mark, after its words.
            "SHADOW" => {}
            _ => return None,
        }
    }
    let at = |i: usize| nums.get(i).copied();
    let limit = match kind.to_ascii_uppercase().as_str() {
        "SLIDE" if nums.len() >= 2 && nums.len().is_multiple_of(2) => Limit::Slide {
            windows: nums.chunks_exact(2).map(|p| (p[0], p[1])).collect(),
        },
        "TOKEN" if nums.len() == 2 => Limit::Token {
            limit: nums[0],
            window_ms: nums[1],
            burst,
        },
        "LEAKY" if nums.len() == 2 => Limit::Leaky {
            limit: nums[0],
            window_ms: nums[1],
            max_delay_ms: max_delay,
            burst,
        },
        "FIXED" if nums.len() == 2 => Limit::Fixed {
            limit: nums[0],
            window_ms: nums[1],
            align,
        },
        "SUBWIN" if nums.len() == 3 => Limit::subwin(nums[0], nums[1], nums[2]),
        "ACQUIRE" if nums.len() == 2 => Limit::acquire(nums[0], nums[1]),
        "THROTTLE" if nums.len() == 3 || nums.len() == 4 => {
            cost = at(3);
            Limit::throttle(nums[0], nums[1], nums[2])
        }
        _ => return None,
    };
    Some(PolicyLimiter {
        name: name.to_string(),
        limit,
        cost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(words: &str) -> Vec<String> {
        words.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn words_round_trip_through_the_policy_parser() {
        let limiters = vec![
            PolicyLimiter::new("minute", Limit::slide(100, 60_000).and_window(10, 1000)),
            PolicyLimiter::new("tpm", Limit::token(100_000, 60_000).burst(5)).cost(1),
            PolicyLimiter::new("pace", Limit::leaky(4, 1000).max_delay(500)),
            PolicyLimiter::new("day", Limit::fixed(10_000, 86_400_000).align()),
            PolicyLimiter::new("roll", Limit::subwin(4, 1000, 250)),
            PolicyLimiter::new("run", Limit::acquire(2, 30_000)),
            PolicyLimiter::new("cell", Limit::throttle(15, 30, 60)).cost(2),
        ];
        let words: Vec<String> = limiters
            .iter()
            .flat_map(|l| l.words())
            .map(|w| String::from_utf8(w).unwrap())
            .collect();
        assert_eq!(
            words.join(" "),
            "minute SLIDE 100 60000 10 1000 tpm TOKEN 100000 60000 BURST 5 COST 1 \
             pace LEAKY 4 1000 MAXDELAY 500 day FIXED 10000 86400000 ALIGN \
             roll SUBWIN 4 1000 250 run ACQUIRE 2 30000 cell THROTTLE 15 30 60 2"
        );
        assert_eq!(parse_policy(&words), Some(limiters));
        assert_eq!(parse_policy(&s("x NEWKIND 1 2")), None);
        assert_eq!(parse_policy(&s("x SLIDE 1 2 BOGUS")), None);
    }
}
