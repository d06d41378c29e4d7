//! Under load: fifty clients at once on one key of every limiter. The allowed calls, read
//! back from the AOF with their decision times, never exceed a limit, replay as allowed on a
//! fresh server, and add up to exactly the limit where demand exceeds it; the replica ends
//! equal. Across crashes: tests/it/durability_restarts.rs; at the memory limit:
//! tests/it/durability_maxmemory.rs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::durability::{call_words, info_field, key_of, query, Rng};
use crate::common::{aof_commands, int, rl, run, text, unix_ms, wait_until, Server};
use redis::Connection;
use rstest::rstest;

/// One day in ms: a multiple of every window and resolution used here, so moving a whole
/// history by it moves no window boundary (`ALIGN`, `RL.SUBWIN` sub-intervals).
const DAY_MS: u64 = 86_400_000;

// ---------------------------------------------------------------------------------------
// Reading the AOF

/// An allowed limiter call as the AOF holds it: `<command> key <params> [options] NOW t`,
/// with COST and the options that the primary propagated because they were not the
/// defaults.
struct Recorded {
    words: Vec<String>,
    cost: u64,
    now: u64,
}

impl Recorded {
    fn parse(words: Vec<String>) -> Recorded {
        let n = words.len();
        assert!(
            n >= 4 && words[n - 2] == "NOW",
            "not a propagated limiter call: {words:?}"
        );
        let mut r = Recorded {
            cost: 1,
            now: words[n - 1].parse().expect("NOW"),
            words,
        };
        if r.words.iter().any(|w| w == "COST") {
            r.cost = r.option("COST");
        }
        r
    }

    /// The numeric parameter at `i` (0 = the first word after the key).
    fn param(&self, i: usize) -> u64 {
        self.words[2 + i].parse().expect("a numeric parameter")
    }

    /// The words from the first parameter up to the options (the windows of RL.SLIDE).
    fn params(&self) -> &[String] {
        let end = self
            .words
            .iter()
            .skip(2)
            .position(|w| w.starts_with(|c: char| c.is_ascii_alphabetic()))
            .map_or(self.words.len(), |p| p + 2);
        &self.words[2..end]
    }

    /// The value of option `name` (`BURST`, `MAXDELAY`, `COST`), or the default the command
    /// applies when the primary left it out.
    fn option(&self, name: &str) -> u64 {
        match self.words.iter().position(|w| w == name) {
            Some(at) => self.words[at + 1].parse().expect("option value"),
            None => match (self.words[0].as_str(), name) {
                ("RL.TOKEN", "BURST") => self.param(0),
                ("RL.LEAKY", "BURST") => 1,
                ("RL.LEAKY", "MAXDELAY") => self.param(1),
                (_, "COST") => 1,
                _ => panic!("no {name} in {:?}", self.words),
            },
        }
    }

    /// The same call `shift` ms later.
    fn shifted(&self, shift: u64) -> Vec<String> {
        let mut words = self.words.clone();
        *words.last_mut().expect("NOW value") = (self.now + shift).to_string();
        words
    }
}

// ---------------------------------------------------------------------------------------
// What every algorithm must have respected, checked from the recorded calls alone.
// Each returns the tightest point it saw, for the report.

/// RL.SLIDE: in no rolling window `(t - window, t]` do the allowed units exceed its limit.
fn check_slide(calls: &[Recorded]) -> String {
    let pairs = calls[0].params();
    let mut peaks = Vec::new();
    for pair in pairs.chunks(2) {
        let (limit, window): (u64, u64) = (pair[0].parse().unwrap(), pair[1].parse().unwrap());
        let mut peak = 0;
        for end in calls {
            let t = end.now;
            let used: u64 = calls
                .iter()
                .filter(|c| c.now + window > t && c.now <= t)
                .map(|c| c.cost)
                .sum();
            assert!(
                used <= limit,
                "{}: {used} units in ({}, {t}], limit {limit}",
                end.words[1],
                t - window
            );
            peak = peak.max(used);
        }
        peaks.push(format!("{peak}/{limit} per {window} ms"));
    }
    format!("busiest rolling window {}", peaks.join(", "))
}

/// RL.TOKEN (`max_delay` 0) and RL.LEAKY: between any two decision times `a <= e`, the
/// allowed units are at most `burst + limit x (max_delay + e - a) / window` (the bucket, plus
/// what may be booked ahead, plus what flowed in).
fn check_bucket(calls: &[Recorded], max_delay: u64) -> String {
    let (limit, window) = (calls[0].param(0), calls[0].param(1));
    let burst = calls[0].option("BURST");
    let mut prefix = vec![0u64];
    for c in calls {
        prefix.push(prefix.last().unwrap() + c.cost);
    }
    let (mut tightest, mut at) = (0.0, (0, 0, 0.0));
    for i in 0..calls.len() {
        if i > 0 && calls[i - 1].now == calls[i].now {
            continue; // an interval starts with the first call of its millisecond
        }
        for j in i..calls.len() {
            if j + 1 < calls.len() && calls[j + 1].now == calls[j].now {
                continue; // and ends with the last call of its millisecond
            }
            let units = prefix[j + 1] - prefix[i];
            let elapsed = calls[j].now - calls[i].now;
            let bound = burst * window + limit * (max_delay + elapsed);
            assert!(
                units * window <= bound,
                "{}: {units} units in [{}, {}], at most {} allowed",
                calls[0].words[1],
                calls[i].now,
                calls[j].now,
                bound as f64 / window as f64
            );
            let ratio = (units * window) as f64 / bound as f64;
            if ratio > tightest {
                tightest = ratio;
                at = (units, elapsed, bound as f64 / window as f64);
            }
        }
    }
    format!(
        "tightest interval: {} units in {} ms, bound {:.1}",
        at.0, at.1, at.2
    )
}

/// RL.FIXED: the units of each window (opened by its first allowed call, or aligned to the
/// epoch) are at most the limit.
fn check_fixed(calls: &[Recorded]) -> String {
    let (limit, window) = (calls[0].param(0), calls[0].param(1));
    let align = calls[0].words.iter().any(|w| w == "ALIGN");
    let (mut end, mut count, mut windows, mut peak) = (0, 0, 0, 0);
    for c in calls {
        if c.now >= end {
            end = if align {
                c.now - c.now % window + window
            } else {
                c.now + window
            };
            count = 0;
            windows += 1;
        }
        count += c.cost;
        assert!(
            count <= limit,
            "{}: {count} units in the window ending at {end}, limit {limit}",
            c.words[1]
        );
        peak = peak.max(count);
    }
    format!("{windows} windows, fullest {peak}/{limit}")
}

// ---------------------------------------------------------------------------------------
// The load

/// The limiters under load: a command line and whether calls vary their cost (1 to 3).
const LOAD: [(&str, bool); 11] = [
    ("RL.SLIDE slide 100 1000 20 100", true),
    ("RL.SUBWIN subwin 100 1000 100", true),
    ("RL.TOKEN token 200 1000 BURST 50", true),
    ("RL.LEAKY leaky 200 1000 MAXDELAY 200 BURST 5", true),
    ("RL.FIXED fixed 100 500", true),
    ("RL.FIXED fixed:align 100 500 ALIGN", true),
    // Windows far longer than the load, and far more demand than the limit: each must
    // allow exactly its limit, 1,000 units.
    ("RL.SLIDE long:slide 1000 60000", false),
    ("RL.SUBWIN long:subwin 1000 60000 1000", false),
    ("RL.TOKEN long:token 1 86400000 BURST 1000", false),
    (
        "RL.LEAKY long:leaky 1 86400000 MAXDELAY 0 BURST 1000",
        false,
    ),
    ("RL.FIXED long:fixed 1000 60000", false),
];
const LONG_LIMIT: u64 = 1000;

/// What one client saw: per limiter, calls made, calls allowed and units allowed.
#[derive(Default, Clone)]
struct Tally {
    calls: Vec<u64>,
    allowed: Vec<u64>,
    units: Vec<u64>,
}

impl Tally {
    fn new(n: usize) -> Tally {
        Tally {
            calls: vec![0; n],
            allowed: vec![0; n],
            units: vec![0; n],
        }
    }

    fn add(&mut self, other: &Tally) {
        for (mine, theirs) in [
            (&mut self.calls, &other.calls),
            (&mut self.allowed, &other.allowed),
            (&mut self.units, &other.units),
        ] {
            mine.iter_mut().zip(theirs).for_each(|(m, t)| *m += t);
        }
    }
}

#[rstest]
fn fifty_clients_never_over_or_under_admit() {
    const CLIENTS: usize = 50;
    /// The load lasts this long, and longer on a slow machine, until every limiter has had
    /// `DEMAND` calls (three times the long limiters' limit).
    const LOAD_FOR: Duration = Duration::from_secs(3);
    const DEMAND: u64 = 3 * LONG_LIMIT;
    let primary = Server::start(&["--appendonly", "yes"]);
    let replica = primary.replica();
    let conns: Vec<Connection> = (0..CLIENTS).map(|_| primary.conn()).collect();
    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let demand: Arc<Vec<AtomicU64>> = Arc::new(LOAD.iter().map(|_| AtomicU64::new(0)).collect());
    let clients: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let (start, stop, demand) =
                (Arc::clone(&start), Arc::clone(&stop), Arc::clone(&demand));
            thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 1);
                let mut tally = Tally::new(LOAD.len());
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.below(LOAD.len() as u64) as usize;
                    let (line, weighted) = LOAD[k];
                    let cost = if weighted { 1 + rng.below(3) } else { 1 };
                    let reply = query(&mut c, &call_words(line, cost)).expect("a limiter reply");
                    tally.calls[k] += 1;
                    demand[k].fetch_add(1, Ordering::Relaxed);
                    if reply[0] == 1 {
                        tally.allowed[k] += 1;
                        tally.units[k] += cost;
                    }
                }
                tally
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    thread::sleep(LOAD_FOR);
    wait_until("enough calls on every limiter", 20, || {
        demand.iter().all(|d| d.load(Ordering::Relaxed) >= DEMAND)
    });
    stop.store(true, Ordering::Relaxed);
    let mut seen = Tally::new(LOAD.len());
    for client in clients {
        seen.add(&client.join().expect("a client thread"));
    }
    let load_for = began.elapsed();
    let mut p = primary.conn();

    // The replica holds exactly the primary's dataset. Expiry is paused first, so that no
    // key expires between the two digests.
    run(&mut p, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
    let mut r = replica.conn();
    assert!(int(&mut p, &["DBSIZE"]) >= 5, "the long limiters are there");
    assert_eq!(
        text(&mut r, &["DEBUG", "DIGEST"]),
        text(&mut p, &["DEBUG", "DIGEST"])
    );

    // Every allowed call is in the AOF with its decision time, in the order decided. (With
    // everysec, a write can be postponed while an fsync runs: wait for the buffer to drain.)
    wait_until("the AOF buffer to be written", 10, || {
        info_field(&mut p, "persistence", "aof_buffer_length") == "0"
    });
    let commands = aof_commands(&primary);
    let mut recorded: Vec<Vec<Recorded>> = (0..LOAD.len()).map(|_| Vec::new()).collect();
    let mut other = 0;
    for words in commands {
        if !words[0].starts_with("RL.") {
            other += 1; // SELECT, and DEL of keys that expired
            continue;
        }
        let k = LOAD
            .iter()
            .position(|(line, _)| key_of(line) == words[1])
            .unwrap_or_else(|| panic!("unexpected key in the AOF: {words:?}"));
        recorded[k].push(Recorded::parse(words));
    }
    let total_calls: u64 = seen.calls.iter().sum();
    println!(
        "{CLIENTS} clients, {:.1} s: {total_calls} calls ({:.0}/s), {} allowed; AOF: {} limiter \
         calls and {other} other commands",
        load_for.as_secs_f64(),
        total_calls as f64 / load_for.as_secs_f64(),
        seen.allowed.iter().sum::<u64>(),
        recorded.iter().map(Vec::len).sum::<usize>()
    );
    for (k, (line, weighted)) in LOAD.iter().enumerate() {
        let calls = &recorded[k];
        let key = key_of(line);
        assert_eq!(
            calls.len() as u64,
            seen.allowed[k],
            "{key}: allowed calls in the AOF against allowed replies"
        );
        let units: u64 = calls.iter().map(|c| c.cost).sum();
        assert_eq!(
            units, seen.units[k],
            "{key}: allowed units, AOF against replies"
        );
        assert!(
            calls.windows(2).all(|w| w[0].now <= w[1].now),
            "{key}: decision times go backwards in the AOF"
        );
        assert!(
            seen.calls[k] > seen.allowed[k],
            "{key}: the load must ask for more than is allowed"
        );
        let check = match line.split_whitespace().next() {
            Some("RL.SLIDE") => check_slide(calls),
            Some("RL.TOKEN") => check_bucket(calls, 0),
            Some("RL.LEAKY") => check_bucket(calls, calls[0].option("MAXDELAY")),
            Some("RL.FIXED") => check_fixed(calls),
            _ => "replay only".to_owned(),
        };
        if !weighted {
            assert_eq!(units, LONG_LIMIT, "{key}: demand exceeded the limit");
        }
        println!(
            "  {key:<12} {:>6} calls {:>5} allowed {:>5} units over {:>4} ms; {check}",
            seen.calls[k],
            seen.allowed[k],
            units,
            calls.last().map_or(0, |l| l.now) - calls.first().map_or(0, |f| f.now),
        );
    }

    // Deciding again, in the same order and at the same times (moved by a day: keys written
    // at times already past would read as expired), allows every one of them: the rule
    // each algorithm applies held under concurrency, and decisions are deterministic.
    let fresh = Server::start(&[]);
    let mut f = fresh.conn();
    let mut in_order: Vec<&Recorded> = recorded.iter().flatten().collect();
    in_order.sort_by_key(|c| c.now); // stable: keeps the AOF order within a millisecond
    for chunk in in_order.chunks(1000) {
        let mut pipe = redis::pipe();
        for c in chunk {
            let words = c.shifted(DAY_MS);
            let cmd = pipe.cmd(&words[0]);
            for w in &words[1..] {
                cmd.arg(w);
            }
        }
        let replies: Vec<Vec<i64>> = pipe.query(&mut f).expect("replayed calls");
        for (c, reply) in chunk.iter().zip(replies) {
            assert_eq!(reply[0], 1, "replayed {:?} was refused: {reply:?}", c.words);
        }
    }
    // And it ends in the same state as the primary (compared where keys outlive the test).
    let t = unix_ms();
    for (line, weighted) in LOAD {
        if !weighted {
            let key = key_of(line);
            assert_eq!(
                rl(&mut f, &format!("RL.PEEK {key} NOW {}", t + DAY_MS)),
                rl(&mut p, &format!("RL.PEEK {key} NOW {t}")),
                "{key}: the replay ends elsewhere"
            );
        }
    }
}
