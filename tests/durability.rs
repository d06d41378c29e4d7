//! Under load, across crashes and at the memory limit.
//!
//! - Fifty clients at once on one key of every limiter: the allowed calls, read back from the
//!   AOF with their decision times, never exceed a limit, replay as allowed on a fresh
//!   server, and add up to exactly the limit where demand exceeds it; the replica ends equal.
//! - kill -9 in the middle of a load: with `appendfsync always` every acknowledged unit is
//!   still counted after the restart; `everysec` is measured; without an AOF a restart goes
//!   back to the last save.
//! - `maxmemory`: with `noeviction` the limiter commands are refused with OOM and leave the
//!   keys as they were, `RL.PEEK` and `RL.REFUND` still work; with `allkeys-lru` an evicted
//!   limiter starts empty.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{aof_commands, digest, int, rl, run, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// One day in ms: a multiple of every window and resolution used here, so moving a whole
/// history by it moves no window boundary (`ALIGN`, `RL.SUBWIN` sub-intervals).
const DAY_MS: u64 = 86_400_000;

/// A small xorshift generator: each client its own sequence, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A limiter call as words, with `COST cost` appended.
fn call_words(line: &str, cost: u64) -> Vec<String> {
    let mut words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    words.extend(["COST".to_owned(), cost.to_string()]);
    words
}

fn query(c: &mut Connection, words: &[String]) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd(&words[0]);
    for w in &words[1..] {
        cmd.arg(w);
    }
    cmd.query(c)
}

fn info_field(c: &mut Connection, section: &str, field: &str) -> String {
    let info = text(c, &["INFO", section]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .trim()
        .to_owned()
}

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
// 1. Concurrency

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

fn key_of(line: &str) -> &str {
    line.split_whitespace().nth(1).expect("a key")
}

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

// ---------------------------------------------------------------------------------------
// 2. Restarts

/// Limiters that hold everything the load records: `used = limit - remaining`.
const DURABLE: [&str; 5] = [
    "RL.SLIDE d:slide 1000000 600000",
    "RL.SUBWIN d:subwin 1000000 600000 10000",
    "RL.TOKEN d:token 1 86400000 BURST 1000000",
    "RL.LEAKY d:leaky 1 86400000 MAXDELAY 0 BURST 1000000",
    "RL.FIXED d:fixed 1000000 600000",
];

/// Units used on each limiter of `DURABLE`, from `RL.PEEK` (0 for a missing key).
fn used_units(c: &mut Connection) -> Vec<u64> {
    DURABLE
        .iter()
        .map(|line| match run(c, &["RL.PEEK", key_of(line)]).unwrap() {
            Value::Nil => 0,
            v => {
                let r: Vec<u64> = redis::from_redis_value(&v).unwrap();
                r[1] - r[2]
            }
        })
        .collect()
}

/// What one client saw before the server died.
struct Witness {
    units: Vec<u64>,
    /// The call whose reply never came: (limiter, cost).
    in_flight: Option<(usize, u64)>,
    /// When each allowed reply arrived: (when, limiter, cost).
    acks: Vec<(Instant, usize, u64)>,
}

/// Clients call the limiters of `DURABLE` (server clock, cost 1 to 3) until their server
/// dies; `kill` kills it after `after`. Returns what the clients saw and when the kill was.
fn load_until_killed(
    conns: Vec<Connection>,
    after: Duration,
    kill: impl FnOnce(),
) -> (Vec<Witness>, Instant) {
    let start = Arc::new(Barrier::new(conns.len() + 1));
    let clients: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 100);
                let mut w = Witness {
                    units: vec![0; DURABLE.len()],
                    in_flight: None,
                    acks: Vec::new(),
                };
                start.wait();
                // The kill comes long before this; it is only a deadline.
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    let k = rng.below(DURABLE.len() as u64) as usize;
                    let cost = 1 + rng.below(3);
                    w.in_flight = Some((k, cost));
                    let Ok(reply) = query(&mut c, &call_words(DURABLE[k], cost)) else {
                        return w; // the server is gone; this call may or may not count
                    };
                    w.in_flight = None;
                    assert_eq!(reply[0], 1, "{}: refused {reply:?}", DURABLE[k]);
                    w.units[k] += cost;
                    w.acks.push((Instant::now(), k, cost));
                }
                panic!("the server was never killed");
            })
        })
        .collect();
    start.wait();
    thread::sleep(after);
    let killed_at = Instant::now();
    kill();
    let witnesses = clients
        .into_iter()
        .map(|c| c.join().expect("a client thread"))
        .collect();
    (witnesses, killed_at)
}

#[rstest]
#[case::always("always")]
#[case::everysec("everysec")]
fn kill_minus_9_mid_load(#[case] fsync: &str) {
    const CLIENTS: usize = 8;
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", fsync]);
    let conns: Vec<Connection> = (0..CLIENTS).map(|_| server.conn()).collect();
    let (witnesses, killed_at) =
        load_until_killed(conns, Duration::from_secs(5), || server.crash_and_restart());
    let restarted_in = killed_at.elapsed();
    let mut c = server.conn();
    let used = used_units(&mut c);

    // everysec: Redis may hold the AOF buffer, already acknowledged, while a background
    // fsync runs, for up to 2 s on its cached clock; half a second more for that clock.
    const EVERYSEC_WINDOW: Duration = Duration::from_millis(2500);
    let n = DURABLE.len();
    let (mut seen, mut in_flight, mut recent) = (vec![0; n], vec![0; n], vec![0; n]);
    let mut acks: Vec<(Instant, u64)> = Vec::new();
    for w in &witnesses {
        w.units.iter().enumerate().for_each(|(k, u)| seen[k] += u);
        if let Some((k, cost)) = w.in_flight {
            in_flight[k] += cost;
        }
        for &(at, k, cost) in &w.acks {
            if killed_at.saturating_duration_since(at) <= EVERYSEC_WINDOW {
                recent[k] += cost;
            }
            acks.push((at, cost));
        }
    }
    let total = |v: &[u64]| v.iter().sum::<u64>();
    let lost: Vec<u64> = (0..n).map(|k| seen[k].saturating_sub(used[k])).collect();
    // The loss in time: the last how many ms of acknowledged units it amounts to.
    acks.sort_by_key(|&(at, _)| std::cmp::Reverse(at));
    let mut lost_ms = 0;
    let mut counted = 0;
    for (at, cost) in acks {
        if counted >= total(&lost) {
            break;
        }
        counted += cost;
        lost_ms = killed_at.saturating_duration_since(at).as_millis();
    }
    println!(
        "appendfsync {fsync}: {CLIENTS} clients saw {} units allowed ({} in the last {:.1} s), \
         killed with {} units in flight; after the restart {} units counted, {} acknowledged \
         units lost (the last {lost_ms} ms of acknowledgements); kill, restart and AOF load \
         took {:.1} s",
        total(&seen),
        total(&recent),
        EVERYSEC_WINDOW.as_secs_f64(),
        total(&in_flight),
        total(&used),
        total(&lost),
        restarted_in.as_secs_f64()
    );
    if server.log().contains("short read") {
        println!("  the AOF ended in a partial command, which Redis dropped at load");
    }
    for (k, line) in DURABLE.iter().enumerate() {
        let key = key_of(line);
        println!(
            "  {key:<9} seen {:>6} in flight {:>2} counted {:>6} lost {}",
            seen[k], in_flight[k], used[k], lost[k]
        );
        // Calls whose replies were lost may or may not count; nothing else may.
        assert!(
            used[k] <= seen[k] + in_flight[k],
            "{key}: {} units counted, clients saw {} allowed and had {} in flight",
            used[k],
            seen[k],
            in_flight[k]
        );
        if fsync == "always" {
            // The reply goes out after the write and fsync: nothing acknowledged is lost.
            assert!(
                used[k] >= seen[k],
                "{key}: {} units counted, clients saw {} allowed",
                used[k],
                seen[k]
            );
        } else {
            // everysec may lose what was acknowledged in the last second or two.
            assert!(
                lost[k] <= recent[k],
                "{key}: lost {} units, more than the {} acknowledged in the last {:?}",
                lost[k],
                recent[k],
                EVERYSEC_WINDOW
            );
        }
    }
    assert!(
        total(&seen) > 1000,
        "the load was too light to show anything"
    );
}

/// Without an AOF, a restart after kill -9 goes back to the last save: nothing when there
/// was none, exactly the saved state otherwise.
#[rstest]
fn without_aof_a_restart_returns_to_the_last_save() {
    let mut server = Server::start(&[]);
    let mut c = server.conn();
    let calls = |c: &mut Connection, n: u64| {
        for line in DURABLE {
            for _ in 0..n {
                assert_eq!(rl(c, &format!("{line} COST 2"))[0], 1);
            }
        }
    };
    calls(&mut c, 10);
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(
        int(&mut c, &["DBSIZE"]),
        0,
        "no save, no AOF: nothing is kept"
    );

    calls(&mut c, 10);
    run(&mut c, &["SAVE"]).unwrap();
    let saved: Vec<(String, i64)> = DURABLE
        .iter()
        .map(|l| {
            (
                digest(&mut c, key_of(l)),
                int(&mut c, &["PEXPIRETIME", key_of(l)]),
            )
        })
        .collect();
    calls(&mut c, 5);
    assert_eq!(used_units(&mut c), vec![30; DURABLE.len()]);
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(
        used_units(&mut c),
        vec![20; DURABLE.len()],
        "the units recorded after the save are lost"
    );
    for (line, before) in DURABLE.iter().zip(saved) {
        let key = key_of(line);
        let after = (digest(&mut c, key), int(&mut c, &["PEXPIRETIME", key]));
        assert_eq!(after, before, "{key}: not the saved state");
    }
}

// ---------------------------------------------------------------------------------------
// 3. maxmemory

/// One limiter of each kind, with history, at `t`; all stay well clear of their limits.
fn limiters_at(t: u64) -> Vec<String> {
    [
        "RL.SLIDE m:slide 10 600000",
        "RL.SUBWIN m:subwin 10 600000 1000",
        "RL.TOKEN m:token 10 600000",
        "RL.LEAKY m:leaky 10 600000 MAXDELAY 600000",
        "RL.FIXED m:fixed 10 600000",
    ]
    .iter()
    .map(|l| format!("{l} COST 3 NOW {t}"))
    .collect()
}

/// Writes values of `size` bytes under new keys until a write is refused or `stop` says so;
/// returns the refusal, if any, and the keys written.
fn fill(
    c: &mut Connection,
    size: usize,
    max_keys: usize,
    mut stop: impl FnMut(&mut Connection, usize) -> bool,
) -> (Option<redis::RedisError>, usize) {
    let junk = vec![b'x'; size];
    for i in 0..max_keys {
        if stop(c, i) {
            return (None, i);
        }
        let res: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("junk:{i}"))
            .arg(&junk)
            .query(c);
        if let Err(e) = res {
            return (Some(e), i);
        }
    }
    panic!("{max_keys} keys written and still no end");
}

#[rstest]
fn noeviction_refuses_limiter_writes_and_keeps_the_keys() {
    let server = Server::start(&["--maxmemory", "8mb", "--maxmemory-policy", "noeviction"]);
    let mut c = server.conn();
    let t = unix_ms();
    let lines = limiters_at(t);
    for line in &lines {
        assert_eq!(rl(&mut c, line)[0], 1, "{line}");
    }
    let keys: Vec<String> = lines.iter().map(|l| key_of(l).to_owned()).collect();
    let snapshot = |c: &mut Connection| -> Vec<(String, [i64; 5])> {
        keys.iter()
            .map(|k| (digest(c, k), rl(c, &format!("RL.PEEK {k} NOW {}", t + 1))))
            .collect()
    };
    let before = snapshot(&mut c);

    let (refused, written) = fill(&mut c, 10_000, 10_000, |_, _| false);
    let refused = refused.expect("a refused write");
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
    // A margin beyond the limit (DEBUG is not refused on OOM), so that buffers shrinking a
    // little do not bring the server back under it during the checks.
    run(&mut c, &["DEBUG", "POPULATE", "100", "ballast", "10000"]).unwrap();
    let used: u64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
    println!("noeviction: {written} junk keys of 10 kB, then OOM; used_memory {used}");
    assert!(used > 8 << 20);

    // Every call that could add data is refused before the module sees it: on existing
    // keys, on new keys, even with COST 0 (the whole command is deny-oom; RL.PEEK reads).
    let mut attempts: Vec<String> = lines.iter().map(|l| l.replace(" COST 3", "")).collect();
    attempts.extend(lines.iter().map(|l| l.replace("m:", "new:")));
    attempts.extend(lines.iter().map(|l| l.replace(" COST 3", " COST 0")));
    for line in &attempts {
        let words: Vec<&str> = line.split_whitespace().collect();
        let e = run(&mut c, &words).expect_err(line);
        assert_eq!(e.code(), Some("OOM"), "{line}: {e}");
    }
    let e = run(&mut c, &["RL.RESTORE", "m:slide", "\x01"]).expect_err("RL.RESTORE");
    assert_eq!(e.code(), Some("OOM"), "RL.RESTORE: {e}");
    for line in &attempts {
        assert_eq!(
            int(&mut c, &["EXISTS", key_of(line)]),
            line.contains("m:") as i64
        );
    }
    assert_eq!(snapshot(&mut c), before, "a refused call changed a limiter");

    // RL.REFUND frees memory, so it is not refused: it gives back, and can delete a key.
    for (k, (digest_before, _)) in keys.iter().zip(&before) {
        let reply = rl(&mut c, &format!("RL.REFUND {k} NOW {}", t + 1));
        assert_eq!(reply[0], 1, "{k}: {reply:?}");
        assert_ne!(
            &digest(&mut c, k),
            digest_before,
            "{k}: the refund changed nothing"
        );
    }
    rl(&mut c, &format!("RL.REFUND m:slide COST 5 NOW {}", t + 1));
    assert_eq!(
        int(&mut c, &["EXISTS", "m:slide"]),
        0,
        "refunded to empty: deleted"
    );
    for k in &keys[1..] {
        // 3 units recorded, 1 refunded.
        let peek = rl(&mut c, &format!("RL.PEEK {k} NOW {}", t + 1));
        assert_eq!(peek[1] - peek[2], 2, "{k}: {peek:?}");
    }
    assert_eq!(text(&mut c, &["PING"]), "PONG");
}

#[rstest]
fn allkeys_lru_evicts_limiters_to_empty() {
    let server = Server::start(&["--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut c = server.conn();
    let t = unix_ms();
    let lines = limiters_at(t);
    for line in &lines {
        assert_eq!(rl(&mut c, line)[0], 1, "{line}");
    }
    // Fill until every one of them is evicted, with limiter calls on other keys in between
    // (created, then evicted while in use).
    let (refused, written) = fill(&mut c, 10_000, 20_000, |c, i| {
        if i % 10 == 0 {
            let line = match i / 10 % 4 {
                0 => format!("RL.SLIDE churn:{i} 5 600000 COST 2"),
                1 => format!("RL.TOKEN churn:{i} 5 600000"),
                2 => format!("RL.SUBWIN churn:{i} 5 600000 1000"),
                _ => format!("RL.FIXED churn:{i} 5 600000"),
            };
            assert_eq!(rl(c, &line)[0], 1, "{line}");
        }
        i % 50 == 0 && lines.iter().all(|l| int(c, &["EXISTS", key_of(l)]) == 0)
    });
    assert!(
        refused.is_none(),
        "allkeys-lru refused a write: {refused:?}"
    );
    let evicted = info_field(&mut c, "stats", "evicted_keys");
    println!("allkeys-lru: {written} junk keys of 10 kB written, {evicted} keys evicted");

    // An evicted limiter answers like one that never existed.
    for line in &lines {
        let again = line
            .replace(" COST 3", "")
            .replace(&t.to_string(), &(t + 1).to_string());
        let fresh = again.replace("m:", "never:");
        assert_eq!(rl(&mut c, &again), rl(&mut c, &fresh), "{again}");
    }
    assert_eq!(text(&mut c, &["PING"]), "PONG");
    assert!(
        !server.log().contains("crashed"),
        "the server log reports a crash"
    );
}
