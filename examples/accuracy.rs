//! How close RL.SUBWIN comes to the exact RL.SLIDE: `make accuracy`.
//!
//! Starts its own redis-server with the module and plays the same simulated traffic, through
//! `NOW`, into an RL.SLIDE key and into RL.SUBWIN keys of several resolutions, with the same
//! limit and window. Traffic: steady (evenly spaced), bursty (bursts of a fifth of the limit
//! within 200 ms, at random times) and Poisson arrivals, each at 0.5x, 1x and 2x the limit.
//! For each case it prints:
//! - same history: RL.SUBWIN asked about each request while fed exactly what RL.SLIDE
//!   allowed, so every disagreement is the approximation's own error (wrongly allowed,
//!   wrongly refused): the measure behind the published 0.003% figure;
//! - own history: each command deciding on its own, the share of requests decided
//!   differently (once one admits a request the other refused, their histories part, so
//!   this counts the knock-on effects too) and the requests allowed, against RL.SLIDE's;
//! - the most requests RL.SUBWIN allowed in any true rolling window, against the limit.
//!
//! Environment: ACCURACY_LIMIT (default 100), ACCURACY_WINDOW_MS (60000), ACCURACY_WINDOWS
//! (windows simulated per case, 120), ACCURACY_RESOLUTIONS (comma-separated, by default
//! 60000,15000,6000,1000), ACCURACY_SEED (1).

#[path = "../tests/it/common/mod.rs"]
mod common;

use common::{unix_ms, Server};

/// A small deterministic generator (xorshift64*), so that every run plays the same traffic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with the given mean.
    fn exp(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
}

#[derive(Clone, Copy)]
enum Pattern {
    Steady,
    Bursty,
    Poisson,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Steady => "steady",
            Pattern::Bursty => "bursty",
            Pattern::Poisson => "Poisson",
        }
    }
}

struct Config {
    limit: u64,
    window: u64,
    windows: u64,
    resolutions: Vec<u64>,
    seed: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a positive integer, got {v:?}")),
        Err(_) => default,
    }
}

impl Config {
    fn from_env() -> Config {
        let resolutions = std::env::var("ACCURACY_RESOLUTIONS")
            .unwrap_or_else(|_| "60000,15000,6000,1000".into())
            .split(',')
            .map(|r| {
                r.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("bad resolution {r:?}"))
            })
            .collect();
        Config {
            limit: env_u64("ACCURACY_LIMIT", 100),
            window: env_u64("ACCURACY_WINDOW_MS", 60_000),
            windows: env_u64("ACCURACY_WINDOWS", 120),
            resolutions,
            seed: env_u64("ACCURACY_SEED", 1).max(1),
        }
    }
}

/// Arrival times, in ms from the start, of `rate` times the limit over `cfg.windows` windows.
fn traffic(cfg: &Config, pattern: Pattern, rate: f64, rng: &mut Rng) -> Vec<u64> {
    let span = (cfg.windows * cfg.window) as f64;
    let mean_gap = cfg.window as f64 / (rate * cfg.limit as f64);
    let mut times = Vec::new();
    let mut t = 0.0;
    match pattern {
        Pattern::Steady => {
            while t < span {
                times.push(t as u64);
                t += mean_gap;
            }
        }
        Pattern::Poisson => loop {
            t += rng.exp(mean_gap);
            if t >= span {
                break;
            }
            times.push(t as u64);
        },
        Pattern::Bursty => {
            let size = (cfg.limit / 5).max(1);
            loop {
                t += rng.exp(mean_gap * size as f64);
                if t >= span {
                    break;
                }
                times.extend((0..size).map(|k| t as u64 + k * 200 / size));
            }
            times.sort_unstable();
        }
    }
    times
}

/// Plays `times` (offsets from `t0`) into `key` with `command` (the words before the options)
/// and returns each decision.
fn play(c: &mut redis::Connection, command: &[String], t0: u64, times: &[u64]) -> Vec<bool> {
    let mut decisions = Vec::with_capacity(times.len());
    for chunk in times.chunks(2000) {
        let mut pipe = redis::pipe();
        for &t in chunk {
            pipe.cmd(&command[0])
                .arg(&command[1..])
                .arg("NOW")
                .arg(t0 + t);
        }
        let replies: Vec<[i64; 5]> = pipe.query(c).expect("pipeline");
        decisions.extend(replies.iter().map(|r| r[0] == 1));
    }
    decisions
}

/// RL.SUBWIN's answer to each request given RL.SLIDE's history: a `COST 0` call tells the
/// units in use; then the request is recorded (under a limit it cannot reach) only if
/// RL.SLIDE allowed it.
fn shadow(
    c: &mut redis::Connection,
    cmd: &[String],
    t0: u64,
    times: &[u64],
    exact: &[bool],
) -> Vec<bool> {
    let limit: i64 = cmd[2].parse().expect("limit");
    let mut decisions = Vec::with_capacity(times.len());
    for (chunk, allowed) in times.chunks(1000).zip(exact.chunks(1000)) {
        let mut pipe = redis::pipe();
        for (&t, &a) in chunk.iter().zip(allowed) {
            pipe.cmd(&cmd[0])
                .arg(&cmd[1..])
                .arg("COST")
                .arg(0)
                .arg("NOW")
                .arg(t0 + t);
            if a {
                pipe.cmd(&cmd[0])
                    .arg(&cmd[1])
                    .arg(subwin_max_limit())
                    .arg(&cmd[3..])
                    .arg("NOW")
                    .arg(t0 + t)
                    .ignore();
            }
        }
        let replies: Vec<[i64; 5]> = pipe.query(c).expect("pipeline");
        decisions.extend(replies.iter().map(|r| r[2] >= 1 && r[1] == limit));
    }
    decisions
}

fn subwin_max_limit() -> u64 {
    (1 << 31) - 1
}

/// The most allowed requests in any `window` ms (a rolling window ending at each of them).
fn worst_window(times: &[u64], allowed: &[bool], window: u64) -> usize {
    let kept: Vec<u64> = times
        .iter()
        .zip(allowed)
        .filter(|(_, &a)| a)
        .map(|(&t, _)| t)
        .collect();
    let mut start = 0;
    let mut worst = 0;
    for (end, &t) in kept.iter().enumerate() {
        while kept[start] + window <= t {
            start += 1;
        }
        worst = worst.max(end + 1 - start);
    }
    worst
}

fn pct(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn main() {
    let cfg = Config::from_env();
    let server = Server::start(&[]);
    let mut c = server.conn();
    // A day ahead of the real clock, on a window boundary, so keys outlive the run.
    let t0 = (unix_ms() / cfg.window + 24 * 3_600_000 / cfg.window + 1) * cfg.window;
    let mut rng = Rng(cfg.seed);
    let (limit, window) = (cfg.limit, cfg.window);
    println!(
        "RL.SUBWIN against RL.SLIDE: limit {limit} per {window} ms, {} windows per case, seed {}",
        cfg.windows, cfg.seed
    );
    println!();
    println!(
        "| traffic | rate | requests | resolution (sub-intervals) | same history: wrongly allowed | wrongly refused | own history: decisions differ | allowed vs RL.SLIDE | most allowed in a rolling window |"
    );
    println!("|---|---|---:|---|---:|---:|---:|---:|---:|");
    let (mut all, mut all_differ, mut all_wrong) = (0usize, 0usize, 0usize);
    let mut worst_overall = 0usize;
    for pattern in [Pattern::Steady, Pattern::Bursty, Pattern::Poisson] {
        for rate in [0.5, 1.0, 2.0] {
            let times = traffic(&cfg, pattern, rate, &mut rng);
            let case = format!("{}-{rate}", pattern.name());
            let slide_cmd: Vec<String> = vec![
                "RL.SLIDE".into(),
                format!("slide:{case}"),
                limit.to_string(),
                window.to_string(),
            ];
            let exact = play(&mut c, &slide_cmd, t0, &times);
            let exact_worst = worst_window(&times, &exact, window);
            assert!(
                exact_worst as u64 <= limit,
                "RL.SLIDE allowed {exact_worst} in one window"
            );
            for &res in &cfg.resolutions {
                let cmd: Vec<String> = vec![
                    "RL.SUBWIN".into(),
                    format!("sub:{case}:{res}"),
                    limit.to_string(),
                    window.to_string(),
                    res.to_string(),
                ];
                let approx = play(&mut c, &cmd, t0, &times);
                let differ = exact.iter().zip(&approx).filter(|(e, a)| e != a).count();
                let worst = worst_window(&times, &approx, window);
                let mut shadow_cmd = cmd.clone();
                shadow_cmd[1] = format!("shadow:{case}:{res}");
                let guess = shadow(&mut c, &shadow_cmd, t0, &times, &exact);
                let over = exact
                    .iter()
                    .zip(&guess)
                    .filter(|(e, g)| !**e && **g)
                    .count();
                let under = exact
                    .iter()
                    .zip(&guess)
                    .filter(|(e, g)| **e && !**g)
                    .count();
                let n = times.len();
                let count = |d: &[bool]| d.iter().filter(|&&a| a).count() as f64;
                all += n;
                all_differ += differ;
                all_wrong += over + under;
                worst_overall = worst_overall.max(worst);
                println!(
                    "| {} | {rate}x | {n} | {res} ms ({}) | {:.3}% | {:.3}% | {:.2}% | {:+.1}% | {worst} ({:+.0}%) |",
                    pattern.name(),
                    window / res,
                    pct(over, n),
                    pct(under, n),
                    pct(differ, n),
                    100.0 * (count(&approx) - count(&exact)) / count(&exact).max(1.0),
                    100.0 * (worst as f64 - limit as f64) / limit as f64,
                );
            }
        }
    }
    println!();
    println!(
        "all cases: {all} requests; same history: {:.3}% wrong; own history: {:.2}% differ; the most RL.SUBWIN allowed in one rolling window: {worst_overall} (limit {limit})",
        pct(all_wrong, all),
        pct(all_differ, all)
    );
    println!("produced by: make accuracy   (cargo run --release --example accuracy)");
}
