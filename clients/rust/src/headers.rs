//! HTTP response headers from one reply, without a second call (docs/clients.md, "Headers"):
//! the IETF draft's `RateLimit-Policy` and `RateLimit`, `Retry-After` on a refusal, and the
//! legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset`. Seconds are always rounded up.

use crate::limit::{Limit, PolicyLimiter};
use crate::reply::{ceil_s, Decision, Part};

/// The policy name when none is given.
pub const DEFAULT_NAME: &str = "default";

/// A header's name and value.
pub type Header = (&'static str, String);

/// The headers for one limiter's decision: `limit` is its configuration (for
/// `RateLimit-Policy`), `name` the policy's name in the headers.
///
/// RL.SLIDE with several windows lists each as `"<name>-<window_ms>ms"`, and `RateLimit`
/// names the deciding one: the window whose limit equals the reply's, the longest of them on
/// a tie.
pub fn headers(d: &Decision, limit: &Limit, name: &str) -> Vec<Header> {
    let mut out = legacy(d);
    out.push(("RateLimit-Policy", policy_items(limit, name).join(", ")));
    out.push(("RateLimit", current_item(d, limit, name)));
    retry_after(d, &mut out);
    out
}

/// The headers for an RL.HIT or RL.ALL decision: the `X-` trio and `Retry-After` from the
/// whole call, `RateLimit-Policy` listing every limiter, and `RateLimit` with one item per
/// limiter (its own `r` and `t`), so that a client sees which one refused. `limiters` are the
/// policy's (in its order; [`parse_policy`](crate::parse_policy) reads them from
/// `RL.POLICY GET`); when they do not match the parts, the policy items are left out and the
/// `RateLimit` items are named `<i>`.
pub fn multi_headers(
    overall: &Decision,
    parts: &[Part],
    limiters: &[PolicyLimiter],
) -> Vec<Header> {
    let mut out = legacy(overall);
    let known = limiters.len() == parts.len();
    if known {
        let items: Vec<String> = limiters
            .iter()
            .flat_map(|l| policy_items(&l.limit, &l.name))
            .collect();
        if !items.is_empty() {
            out.push(("RateLimit-Policy", items.join(", ")));
        }
    }
    let current: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| match limiters.get(i).filter(|_| known) {
            Some(l) => current_item(&p.decision, &l.limit, &l.name),
            None => item(&p.decision, &i.to_string()),
        })
        .collect();
    out.push(("RateLimit", current.join(", ")));
    retry_after(overall, &mut out);
    out
}

fn legacy(d: &Decision) -> Vec<Header> {
    vec![
        ("X-RateLimit-Limit", d.limit.to_string()),
        ("X-RateLimit-Remaining", d.remaining.to_string()),
        (
            "X-RateLimit-Reset",
            ceil_s(d.reset_after_ms as i64).to_string(),
        ),
    ]
}

fn retry_after(d: &Decision, out: &mut Vec<Header>) {
    if let Some(s) = d.retry_after_s() {
        out.push(("Retry-After", s.to_string()));
    }
}

fn window_name(limit: &Limit, name: &str, window_ms: u64) -> String {
    if limit.windows().len() > 1 {
        format!("{name}-{window_ms}ms")
    } else {
        name.to_string()
    }
}

fn policy_items(limit: &Limit, name: &str) -> Vec<String> {
    let windows = limit.windows();
    if windows.is_empty() {
        // A concurrency limit: a quota without a window.
        if let Limit::Acquire { limit: q, .. } = limit {
            return vec![format!("\"{name}\";q={q}")];
        }
    }
    windows
        .iter()
        .map(|&(q, ms)| {
            format!(
                "\"{}\";q={q};w={}",
                window_name(limit, name, ms),
                ceil_s(ms as i64)
            )
        })
        .collect()
}

fn current_item(d: &Decision, limit: &Limit, name: &str) -> String {
    let windows = limit.windows();
    // The reply's limit is the deciding window's; ties go to the longer window.
    let deciding = windows
        .iter()
        .filter(|w| w.0 == d.limit)
        .max_by_key(|w| w.1)
        .or(windows.first())
        .map_or(0, |w| w.1);
    item(d, &window_name(limit, name, deciding))
}

fn item(d: &Decision, name: &str) -> String {
    let mut item = format!("\"{name}\";r={}", d.remaining);
    if !d.never() {
        item += &format!(";t={}", ceil_s(d.reset_after_ms as i64));
    }
    item
}

/// Puts `headers` into an `http::HeaderMap`, replacing what it held under those names.
#[cfg(feature = "http")]
pub fn insert_headers(map: &mut http::HeaderMap, headers: &[Header]) {
    for (name, value) in headers {
        if let Ok(v) = http::HeaderValue::from_str(value) {
            map.insert(http::HeaderName::from_static(lower(name)), v);
        }
    }
}

#[cfg(feature = "http")]
fn lower(name: &'static str) -> &'static str {
    match name {
        "X-RateLimit-Limit" => "x-ratelimit-limit",
        "X-RateLimit-Remaining" => "x-ratelimit-remaining",
        "X-RateLimit-Reset" => "x-ratelimit-reset",
        "RateLimit-Policy" => "ratelimit-policy",
        "RateLimit" => "ratelimit",
        "Retry-After" => "retry-after",
        _ => "x-ratelimit-unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn map(h: Vec<Header>) -> HashMap<&'static str, String> {
        h.into_iter().collect()
    }

    #[test]
    fn as_docs_clients_md_says() {
        let refused = Decision {
            allowed: false,
            limit: 3,
            remaining: 0,
            retry_after_ms: 700,
            reset_after_ms: 900,
        };
        let h = map(headers(&refused, &Limit::slide(3, 1000), DEFAULT_NAME));
        assert_eq!(h["X-RateLimit-Limit"], "3");
        assert_eq!(h["X-RateLimit-Remaining"], "0");
        assert_eq!(h["X-RateLimit-Reset"], "1");
        assert_eq!(h["Retry-After"], "1");
        assert_eq!(h["RateLimit-Policy"], "\"default\";q=3;w=1");
        assert_eq!(h["RateLimit"], "\"default\";r=0;t=1");

        let never = Decision {
            allowed: false,
            limit: 10,
            remaining: 10,
            retry_after_ms: -1,
            reset_after_ms: 0,
        };
        let h = map(headers(&never, &Limit::slide(10, 1000), DEFAULT_NAME));
        assert!(!h.contains_key("Retry-After"));
        assert_eq!(h["RateLimit"], "\"default\";r=10");

        let two = Limit::slide(2, 1000).and_window(5, 60_000);
        let first = Decision {
            allowed: true,
            limit: 2,
            remaining: 1,
            retry_after_ms: 0,
            reset_after_ms: 60_000,
        };
        let h = map(headers(&first, &two, "api"));
        assert_eq!(
            h["RateLimit-Policy"],
            "\"api-1000ms\";q=2;w=1, \"api-60000ms\";q=5;w=60"
        );
        assert_eq!(h["RateLimit"], "\"api-1000ms\";r=1;t=60");
        assert!(!h.contains_key("Retry-After"));
    }

    #[test]
    fn one_item_per_limiter_of_a_policy() {
        let limiters = vec![
            PolicyLimiter::new("rpm", Limit::slide(2, 60_000)).cost(1),
            PolicyLimiter::new("tpm", Limit::token(100, 60_000)),
        ];
        let d = |allowed, limit, remaining, retry, reset| Decision {
            allowed,
            limit,
            remaining,
            retry_after_ms: retry,
            reset_after_ms: reset,
        };
        let parts = vec![
            Part {
                decision: d(true, 2, 1, 0, 60_000),
                lease_id: None,
            },
            Part {
                decision: d(false, 100, 20, 48_000, 48_000),
                lease_id: None,
            },
        ];
        let h = map(multi_headers(
            &d(false, 100, 20, 48_000, 48_000),
            &parts,
            &limiters,
        ));
        assert_eq!(
            h["RateLimit-Policy"],
            "\"rpm\";q=2;w=60, \"tpm\";q=100;w=60"
        );
        assert_eq!(h["RateLimit"], "\"rpm\";r=1;t=60, \"tpm\";r=20;t=48");
        assert_eq!(h["Retry-After"], "48");
    }
}
