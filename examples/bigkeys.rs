//! Server time of every kind of `RL.*` call on `RL.SLIDE` keys of millions of records, and
//! memory per record from a thousand to ten million records: `make bigkeys`.
//!
//! Starts its own redis-server with the module and `slowlog-log-slower-than 0`, builds each
//! key with one `RL.RESTORE` (a record per millisecond, one unit each, under one window that
//! holds them all), and reads each call's duration from `SLOWLOG` (the time Redis spends
//! executing the command, in microseconds). A destructive call (a trim, a refund, a
//! deletion) gets a fresh copy of the key each time. Cells are `median (slowest)` over the
//! repeats.
//!
//! Memory: `used_memory` after the key was built, minus `used_memory` before, per record: the
//! key, its value and every allocation rounding included. Then records are added one call at
//! a time until the value's memory grows, and the same figure is taken right after that
//! growth step.
//!
//! Environment: BIGKEYS_SIZES (records, comma-separated; default 1000000,4000000,10000000),
//! BIGKEYS_MEMORY_SIZES (default 1000,10000,100000,1000000,10000000), BIGKEYS_REPEAT (5),
//! BIGKEYS_PUSHES (calls in the growth run, 20000), RATELIMIT_MODULE (the module to load).

#[path = "../tests/it/common/mod.rs"]
mod common;

use common::{info_field, int, run, slide_payload, unix_ms, wait_until, Server};
use redis::{Connection, Value};

const LIMIT: u64 = u32::MAX as u64;

fn env_list(name: &str, default: &str) -> Vec<u64> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: bad number {v:?}"))
        })
        .collect()
}

fn env_u64(name: &str, default: u64) -> u64 {
    env_list(name, &default.to_string())[0]
}

/// A key of `n` records, one unit per millisecond, the newest at `t_end`, under one window
/// that holds them all and the records added later.
struct BigLog {
    t_end: u64,
    window: u64,
    payload: Vec<u8>,
}

impl BigLog {
    fn new(n: u64) -> BigLog {
        let t_end = unix_ms();
        let window = 2 * n + 3_600_000;
        let first = t_end + 1 - n;
        let payload = slide_payload(
            t_end,
            &[(LIMIT, window)],
            (0..n as usize).map(|i| (first + i as u64, 1)),
        );
        BigLog {
            t_end,
            window,
            payload,
        }
    }

    /// Stores the log in `key` from a connection of its own, and waits until the server has
    /// closed it: freeing its query buffer (the payload, megabytes) takes the main thread a
    /// millisecond, which must not land in the next call's figures, nor stay in `used_memory`.
    fn restore(&self, server: &Server, key: &str) {
        let mut watch = server.conn();
        let clients = info_field(&mut watch, "connected_clients");
        let mut c = server.conn();
        let _: () = redis::cmd("RL.RESTORE")
            .arg(key)
            .arg(&self.payload[..])
            .query(&mut c)
            .expect("RL.RESTORE");
        drop(c);
        wait_until("the restoring connection to close", 10, || {
            info_field(&mut watch, "connected_clients") == clients
        });
    }

    /// [`BigLog::restore`], returning the call's server time.
    fn restore_timed(&self, server: &Server, key: &str) -> u64 {
        self.restore(server, key);
        last_duration(&mut server.conn(), "rl.restore")
    }

    /// The time at which records at or before `edge` have left the window.
    fn when_edge_is(&self, edge: u64) -> u64 {
        edge + self.window
    }
}

/// Every SLOWLOG entry, newest first: (command name in lower case, microseconds).
fn slowlog(c: &mut Connection) -> Vec<(String, u64)> {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(c)
        .expect("SLOWLOG GET");
    entries
        .into_iter()
        .filter_map(|e| {
            let Value::Array(fields) = e else { return None };
            let micros: u64 = redis::from_redis_value(fields.get(2)?).ok()?;
            let Value::Array(args) = fields.get(3)? else {
                return None;
            };
            let name: String = redis::from_redis_value(args.first()?).ok()?;
            Some((name.to_lowercase(), micros))
        })
        .collect()
}

fn reset_slowlog(c: &mut Connection) {
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(c)
        .expect("SLOWLOG RESET");
}

/// The durations of the SLOWLOG entries of `command`, newest first.
fn durations_of(c: &mut Connection, command: &str) -> Vec<u64> {
    slowlog(c)
        .into_iter()
        .filter(|(name, _)| name == command)
        .map(|(_, us)| us)
        .collect()
}

/// The duration of the newest SLOWLOG entry of `command`.
fn last_duration(c: &mut Connection, command: &str) -> u64 {
    durations_of(c, command)
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no {command} in SLOWLOG"))
}

/// CPU time the server's main thread has used, in microseconds (Linux: the first field of
/// /proc/<pid>/task/<pid>/schedstat, in nanoseconds). Unlike SLOWLOG's wall time, it does not
/// count the time the thread waited for a CPU on a busy machine.
struct MainThread(Option<String>);

impl MainThread {
    fn of(server: &Server) -> MainThread {
        MainThread(
            server
                .pid()
                .map(|pid| format!("/proc/{pid}/task/{pid}/schedstat"))
                .filter(|path| std::fs::metadata(path).is_ok()),
        )
    }

    fn cpu_us(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.0.as_ref()?).ok()?;
        Some(text.split_whitespace().next()?.parse::<u64>().ok()? / 1000)
    }
}

/// What one kind of call cost: SLOWLOG microseconds and main-thread CPU microseconds.
#[derive(Default, Clone)]
struct Cost {
    slowlog: Vec<u64>,
    cpu: Vec<u64>,
}

/// Runs `words` and returns its SLOWLOG time and the main thread's CPU time meanwhile (the
/// command's execution, plus reading it and writing its reply: a few microseconds).
fn timed(c: &mut Connection, main: &MainThread, words: &[String]) -> (u64, Option<u64>) {
    reset_slowlog(c);
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let before = main.cpu_us();
    run(c, &w).unwrap_or_else(|e| panic!("{words:?}: {e}"));
    let cpu = main.cpu_us().zip(before).map(|(b, a)| b - a);
    (last_duration(c, &words[0].to_lowercase()), cpu)
}

impl Cost {
    fn add(&mut self, (slowlog, cpu): (u64, Option<u64>)) {
        self.slowlog.push(slowlog);
        self.cpu.extend(cpu);
    }
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// `median (slowest)` of some durations.
fn cell(mut us: Vec<u64>) -> String {
    if us.is_empty() {
        return "-".into();
    }
    us.sort_unstable();
    let median = us[us.len() / 2];
    let max = us[us.len() - 1];
    if us.len() == 1 {
        format!("{median}")
    } else {
        format!("{median} ({max})")
    }
}

fn wait_lazyfree(c: &mut Connection) {
    wait_until("the lazy-free thread", 60, || {
        info_field(c, "lazyfree_pending_objects") == 0
    });
}

struct Row {
    name: &'static str,
    cells: Vec<String>,
}

/// Runs `count` calls made by `call(j)` for j = 1..=count in pipelines, and returns their
/// SLOWLOG durations and the main thread's CPU time per call on average.
fn pipelined(
    c: &mut Connection,
    main: &MainThread,
    count: u64,
    call: impl Fn(u64) -> Vec<String>,
) -> (Vec<u64>, Option<u64>) {
    let (mut durations, mut cpu) = (Vec::new(), Some(0));
    let mut done = 0;
    while done < count {
        reset_slowlog(c);
        let batch = (count - done).min(500);
        let mut pipe = redis::pipe();
        for j in done + 1..=done + batch {
            let w = call(j);
            let cmd = pipe.cmd(&w[0]);
            for arg in &w[1..] {
                cmd.arg(arg);
            }
            cmd.ignore();
        }
        let before = main.cpu_us();
        let _: () = pipe.query(c).expect("pipelined calls");
        let spent = main.cpu_us().zip(before).map(|(b, a)| b - a);
        cpu = cpu.zip(spent).map(|(a, b)| a + b);
        let got = durations_of(c, &call(1)[0].to_lowercase());
        assert_eq!(got.len() as u64, batch, "SLOWLOG holds every call");
        durations.extend(got);
        done += batch;
    }
    (durations, cpu.map(|total| total / count.max(1)))
}

/// Calls timed one by one after a big trim.
const AFTER_TRIM: u64 = 100;

/// A Lua loop that keeps the main thread busy for some 50 to 100 microseconds: the noise
/// floor of the machine for a call of that length (the same loop takes longer only when the
/// machine takes the CPU away).
const BUSY_LOOP: &str = "local x = 0 for i = 1, 20000 do x = x + i end return x";

const ROWS: [&str; 18] = [
    "RL.RESTORE of the whole key (O(n), like RESTORE)",
    "RL.SLIDE adding a record (BIGKEYS_PUSHES calls in a row)",
    "99.9% of those calls took at most",
    "RL.SLIDE leaving 24% (time moved on)",
    "RL.SLIDE with a window keeping 24%",
    "each of the 100 calls after that",
    "RL.SLIDE with a second window (nothing trimmed)",
    "RL.SLIDE refused (exact retry_after)",
    "RL.PEEK",
    "RL.REFUND COST 1",
    "RL.REFUND COST 1000000",
    "RL.REFUND 80% of the units",
    "RL.REFUND of everything (deletes the key)",
    "MEMORY USAGE",
    "DEL (frees on the main thread)",
    "UNLINK",
    "UNLINK: freed by the lazy-free thread",
    "control: a Lua loop (EVAL), as many calls as the after-trim row: the machine's jitter",
];

fn timings(server: &Server, sizes: &[u64], repeat: usize, pushes: u64) -> Vec<Row> {
    let mut c = server.conn();
    let main = MainThread::of(server);
    let mut rows: Vec<Row> = ROWS
        .iter()
        .map(|name| Row {
            name,
            cells: Vec::new(),
        })
        .collect();
    for &n in sizes {
        eprintln!("bigkeys: timings on {n} records");
        let log = BigLog::new(n);
        let (t_end, limit, window) = (log.t_end, LIMIT, log.window);
        let mut costs: Vec<Cost> = vec![Cost::default(); ROWS.len()];
        let slide =
            |key: &str, pairs: &str, now: u64| words(&format!("RL.SLIDE {key} {pairs} NOW {now}"));
        let all = format!("{limit} {window}");
        // Growth: one record per call, across many chunk boundaries.
        costs[0].slowlog.push(log.restore_timed(server, "grow"));
        let (durations, cpu) = pipelined(&mut c, &main, pushes, |j| slide("grow", &all, t_end + j));
        let mut sorted = durations.clone();
        sorted.sort_unstable();
        costs[2]
            .slowlog
            .extend(sorted.get(sorted.len() * 999 / 1000));
        costs[1].slowlog = durations;
        costs[1].cpu.extend(cpu);
        let peek = common::rl(&mut c, &format!("RL.PEEK grow NOW {}", t_end + pushes));
        assert_eq!(peek[2], (limit - n - pushes) as i64, "every record counted");
        run(&mut c, &["DEL", "grow"]).expect("DEL");
        // Calls that change little, on one copy.
        log.restore(server, "k");
        for _ in 0..repeat {
            let second = format!("{all} {limit} 1000");
            costs[6].add(timed(&mut c, &main, &slide("k", &second, t_end)));
            costs[7].add(timed(&mut c, &main, &slide("k", "10 1000", t_end)));
            costs[8].add(timed(
                &mut c,
                &main,
                &words(&format!("RL.PEEK k NOW {t_end}")),
            ));
            costs[13].add(timed(&mut c, &main, &words("MEMORY USAGE k")));
        }
        // Destructive calls, each on a fresh copy.
        let quarter = n * 24 / 100;
        let cases: [(usize, Vec<String>); 7] = [
            (3, slide("k", &all, log.when_edge_is(t_end - quarter))),
            (4, slide("k", &format!("{limit} {quarter}"), t_end)),
            (9, words(&format!("RL.REFUND k COST 1 NOW {t_end}"))),
            (10, words(&format!("RL.REFUND k COST 1000000 NOW {t_end}"))),
            (
                11,
                words(&format!("RL.REFUND k COST {} NOW {t_end}", n * 8 / 10)),
            ),
            (12, words(&format!("RL.REFUND k COST {n} NOW {t_end}"))),
            (14, words("DEL k")),
        ];
        let mut lazy = 0;
        for _ in 0..repeat * AFTER_TRIM as usize {
            let busy = vec!["EVAL".to_string(), BUSY_LOOP.to_string(), "0".to_string()];
            costs[17].add(timed(&mut c, &main, &busy));
        }
        for _ in 0..repeat {
            for (row, call) in &cases {
                log.restore(server, "k");
                costs[*row].add(timed(&mut c, &main, call));
                if *row == 4 {
                    // The calls after a big trim free what it left, a bounded number each.
                    let pairs = format!("{limit} {quarter}");
                    for j in 1..=AFTER_TRIM {
                        costs[5].add(timed(&mut c, &main, &slide("k", &pairs, t_end + j)));
                    }
                }
            }
            // UNLINK, checking that the lazy-free thread freed it.
            log.restore(server, "k");
            wait_lazyfree(&mut c);
            let before = info_field(&mut c, "lazyfreed_objects");
            costs[15].add(timed(&mut c, &main, &words("UNLINK k")));
            wait_lazyfree(&mut c);
            lazy += info_field(&mut c, "lazyfreed_objects") - before;
        }
        run(&mut c, &["DEL", "k"]).expect("DEL");
        for (i, (row, cost)) in rows.iter_mut().zip(costs).enumerate() {
            if i == 16 {
                row.cells.push(format!("{lazy} of {repeat}"));
                row.cells.push(String::new());
            } else {
                row.cells.push(cell(cost.slowlog));
                row.cells.push(cell(cost.cpu));
            }
        }
    }
    rows
}

/// `used_memory` growth per record for a key of `n` records, then right after the next growth
/// step (and the records then).
fn memory(server: &Server, n: u64, max_pushes: u64) -> (f64, Option<(u64, f64)>) {
    let mut c = server.conn();
    run(&mut c, &["FLUSHALL", "SYNC"]).expect("FLUSHALL");
    wait_lazyfree(&mut c);
    let base = info_field(&mut c, "used_memory");
    let log = BigLog::new(n);
    log.restore(server, "m");
    let used = info_field(&mut c, "used_memory");
    let per_record = (used - base) as f64 / n as f64;
    let mut size = int(&mut c, &["MEMORY", "USAGE", "m", "SAMPLES", "0"]);
    for j in 1..=max_pushes {
        let now = (log.t_end + j).to_string();
        let window = log.window.to_string();
        run(
            &mut c,
            &["RL.SLIDE", "m", &LIMIT.to_string(), &window, "NOW", &now],
        )
        .expect("RL.SLIDE");
        let after = int(&mut c, &["MEMORY", "USAGE", "m", "SAMPLES", "0"]);
        if after > size {
            let used = info_field(&mut c, "used_memory");
            return (
                per_record,
                Some((n + j, (used - base) as f64 / (n + j) as f64)),
            );
        }
        size = after;
    }
    (per_record, None)
}

fn main() {
    let sizes = env_list("BIGKEYS_SIZES", "1000000,4000000,10000000");
    let memory_sizes = env_list("BIGKEYS_MEMORY_SIZES", "1000,10000,100000,1000000,10000000");
    let repeat = env_u64("BIGKEYS_REPEAT", 5).max(1) as usize;
    let pushes = env_u64("BIGKEYS_PUSHES", 20_000);
    let server = Server::start(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "1000",
    ]);
    let mut c = server.conn();

    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let rows = timings(&server, &sizes, repeat, pushes);
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!();
    println!(
        "Server time per call in microseconds, median (slowest) of {repeat}: SLOWLOG (wall time of the command) and CPU (the main thread's CPU time for the call, read and reply included; pipelined rows: the average per call). RL.SLIDE keys of one unit per ms under one window holding them all."
    );
    println!();
    let head: Vec<String> = sizes
        .iter()
        .map(|n| format!("{n}: SLOWLOG | {n}: CPU"))
        .collect();
    println!("| call | {} |", head.join(" | "));
    println!("|---|{}", "---:|".repeat(2 * sizes.len()));
    for row in &rows {
        println!("| {} | {} |", row.name, row.cells.join(" | "));
    }
    println!();
    println!(
        "load average (1, 5, 15 min): {} before, {} after",
        load_before
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        load_after
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );

    // Memory, with the SLOWLOG off (its entries take memory too).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(-1)
        .query(&mut c)
        .expect("CONFIG SET");
    reset_slowlog(&mut c);
    run(&mut c, &["FLUSHALL", "SYNC"]).expect("FLUSHALL");
    let base = info_field(&mut c, "used_memory");
    run(&mut c, &["RL.SLIDE", "one", "100", "60000"]).expect("RL.SLIDE");
    let one = info_field(&mut c, "used_memory") - base;
    let one_usage = int(&mut c, &["MEMORY", "USAGE", "one", "SAMPLES", "0"]);
    println!();
    println!("used_memory growth per record (key, value and allocator rounding included)");
    println!();
    println!("| records | bytes per record | right after the next growth step |");
    println!("|---:|---:|---|");
    for &n in &memory_sizes {
        eprintln!("bigkeys: memory of {n} records");
        let (per, grown) = memory(&server, n, 20_000);
        let grown = match grown {
            Some((records, per)) => format!("{per:.2} at {records} records"),
            None => "no growth within 20000 records".into(),
        };
        println!("| {n} | {per:.2} | {grown} |");
    }
    // Many keys of one request each, as most keys of a deployment are: used_memory per key,
    // the keyspace's own tables included.
    run(&mut c, &["FLUSHALL", "SYNC"]).expect("FLUSHALL");
    let base = info_field(&mut c, "used_memory");
    let keys = 100_000;
    for start in (0..keys).step_by(10_000) {
        let mut pipe = redis::pipe();
        for i in start..start + 10_000 {
            pipe.cmd("RL.SLIDE")
                .arg(format!("k:{i:06}"))
                .arg(100)
                .arg(60_000)
                .ignore();
        }
        let _: () = pipe.query(&mut c).expect("RL.SLIDE");
    }
    let per_key = (info_field(&mut c, "used_memory") - base) as f64 / keys as f64;
    println!();
    println!(
        "a key with one request (RL.SLIDE one 100 60000): used_memory +{one} bytes in an empty database, MEMORY USAGE {one_usage}"
    );
    println!(
        "{keys} keys k:000000.. with one request each: used_memory {per_key:.1} bytes per key"
    );
    let version = common::text(&mut c, &["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_string();
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    println!(
        "produced by: make bigkeys   (cargo run --release --example bigkeys); redis-server {version}; {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "module: {}; run from commit {}",
        common::module_path().display(),
        commit.trim()
    );
}
