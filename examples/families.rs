//! Server time of a compact policy's work on one family (issue 30), at the sizes a family
//! has at 10 M subjects (about 600 over the 16,384 slots), at 100 M (about 6,100) and at
//! its cap (32,768): `make families`.
//!
//! Starts its own redis-server with the module, and for each size fills one family (its
//! subjects share a hash tag) with one `RL.HIT` each under a policy whose states are empty
//! again a second later, then reads each call's duration from `SLOWLOG` (the time Redis
//! spends executing it, in microseconds; `slowlog-log-slower-than 0`, the log as long as the
//! calls):
//! - the fill: every call, a new subject each (the index rebuilt as it grows among them);
//! - a hit of a subject it holds;
//! - the sweep: once every subject is empty again, hits of one subject sweep the others out
//!   (16 index slots a hit; the family rebuilt, smaller, once half of it is removed);
//! - `DUMP`, `RESTORE` and `MIGRATE` of the family, and `DEBUG RELOAD` of a server holding
//!   only it (its RDB save and load, the CPU time of the main thread).
//!
//! Cells are `median / slowest` over the calls. Environment: FAMILY_SIZES (comma-separated;
//! default 610,6100,32767), FAMILY_LIMITER (the policy's limiter, default `per TOKEN 1
//! 1000`; `per SLIDE 1 1000` for a family of logs), RATELIMIT_MODULE (the module to load).

#[path = "../tests/it/common/mod.rs"]
mod common;

use common::{info_field, int, run, slowlog, unix_ms, wait_until, Server};
use redis::Connection;

fn sizes() -> Vec<usize> {
    std::env::var("FAMILY_SIZES")
        .unwrap_or_else(|_| "610,6100,32767".into())
        .split(',')
        .map(|v| v.trim().parse().expect("FAMILY_SIZES: numbers"))
        .collect()
}

/// The durations of the SLOWLOG entries whose first word is `command`.
fn durations(c: &mut Connection, command: &str) -> Vec<i64> {
    slowlog(c)
        .into_iter()
        .filter(|(_, words)| {
            words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case(command))
        })
        .map(|(us, _)| us)
        .collect()
}

fn reset(c: &mut Connection) {
    run(c, &["SLOWLOG", "RESET"]).expect("SLOWLOG RESET");
}

/// `median / slowest` of microseconds.
fn cell(mut us: Vec<i64>) -> String {
    if us.is_empty() {
        return "-".into();
    }
    us.sort_unstable();
    format!("{} / {}", us[us.len() / 2], us[us.len() - 1])
}

/// Sends `lines` in one pipeline, ignoring the replies (errors included: checked apart).
fn pipeline(c: &mut Connection, lines: impl Iterator<Item = Vec<String>>) {
    let mut p = redis::pipe();
    let mut n = 0;
    for words in lines {
        let mut cmd = redis::cmd(&words[0]);
        for w in &words[1..] {
            cmd.arg(w);
        }
        p.add_command(cmd).ignore();
        n += 1;
        if n == 2000 {
            let _: () = p.query(c).expect("pipeline");
            p = redis::pipe();
            n = 0;
        }
    }
    let _: () = p.query(c).expect("pipeline");
}

fn cpu_ms(c: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(c).expect("INFO cpu");
    info.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k, "used_cpu_user_main_thread" | "used_cpu_sys_main_thread")
                .then(|| v.trim().parse::<f64>().ok())
                .flatten()
        })
        .sum::<f64>()
        * 1000.0
}

fn main() {
    let server = Server::start(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "40000",
        "--enable-debug-command",
        "yes",
    ]);
    let other = Server::start(&[]);
    let mut c = server.conn();
    let mut o = other.conn();
    let limiter = std::env::var("FAMILY_LIMITER").unwrap_or_else(|_| "per TOKEN 1 1000".into());
    let policy = format!("RL.POLICY SET f COMPACT {limiter}");
    let policy = policy.as_str();
    for conn in [&mut c, &mut o] {
        let words: Vec<&str> = policy.split(' ').collect();
        run(conn, &words).expect(policy);
    }
    // The server's first calls make what it makes once (not a family's work).
    for k in 0..100 {
        run(&mut c, &["RL.HIT", "f", &format!("warm:{k}")]).unwrap();
    }
    println!("Server time of a compact policy's calls on one family, in microseconds (median / slowest), redis-server {}", {
        let info: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
        info.lines().find_map(|l| l.strip_prefix("redis_version:").map(str::to_string)).unwrap_or_default()
    });
    println!("policy: {policy}; subjects {{f}}:000000001 ... (one hash tag: one family)");
    println!();
    println!(
        "| subjects | fill (a new subject each) | hit of a held subject | sweep (every hit) | DUMP | RESTORE | MIGRATE | DEBUG RELOAD (CPU ms) | MEMORY USAGE (bytes) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for n in sizes() {
        run(&mut c, &["FLUSHALL"]).unwrap();
        reset(&mut c);
        let subject = |k: usize| format!("{{f}}:{k:09}");
        pipeline(
            &mut c,
            (0..n).map(|k| vec!["RL.HIT".into(), "f".into(), subject(k)]),
        );
        let fill = durations(&mut c, "RL.HIT");
        // One subject hit ten minutes ahead keeps the family through what follows (the
        // others are empty a few seconds after their hit).
        let t = unix_ms();
        let ahead = (t + 600_000).to_string();
        let kept = run(&mut c, &["RL.HIT", "f", "{f}:live", "NOW", &ahead]).unwrap();
        assert!(format!("{kept:?}").starts_with("array([int(1)"), "{kept:?}");
        let family: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
        assert_eq!(family.len(), 1, "{family:?}");
        let family = family[0].clone();
        let usage = int(&mut c, &["MEMORY", "USAGE", &family, "SAMPLES", "0"]);
        reset(&mut c);
        for k in (0..n).step_by((n / 200).max(1)) {
            run(&mut c, &["RL.HIT", "f", &subject(k), "COST", "0"]).unwrap();
        }
        let held = durations(&mut c, "RL.HIT");
        // DUMP, RESTORE (a copy), MIGRATE (to another server), each a few times.
        reset(&mut c);
        for _ in 0..9 {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&family).query(&mut c).unwrap();
            let _: () = redis::cmd("RESTORE")
                .arg("copy")
                .arg(0)
                .arg(&dump)
                .arg("REPLACE")
                .query(&mut c)
                .unwrap();
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(other.port)
                .arg(&family)
                .arg(0)
                .arg(5000)
                .arg("COPY")
                .arg("REPLACE")
                .query(&mut c)
                .unwrap();
        }
        let (dump, restore, migrate) = (
            durations(&mut c, "DUMP"),
            durations(&mut c, "RESTORE"),
            durations(&mut c, "MIGRATE"),
        );
        run(&mut c, &["DEL", "copy"]).unwrap();
        let mut reload = Vec::new();
        for _ in 0..3 {
            let before = cpu_ms(&mut c);
            run(&mut c, &["DEBUG", "RELOAD"]).unwrap();
            reload.push(cpu_ms(&mut c) - before);
        }
        reload.sort_by(f64::total_cmp);
        // Every subject empty a second after its hit (whole seconds, rounded up) but the one
        // ahead: its hits (COST 0, which records nothing) then sweep the others out.
        wait_until("the subjects empty", 10, || unix_ms() > t + 2100);
        reset(&mut c);
        let mut hits = 0;
        assert_eq!(
            int(&mut c, &["EXISTS", &family]),
            1,
            "the family, before the sweep"
        );
        wait_until("the family swept", 500, || {
            for _ in 0..100 {
                run(
                    &mut c,
                    &["RL.HIT", "f", "{f}:live", "COST", "0", "NOW", &ahead],
                )
                .unwrap();
            }
            hits += 100;
            int(&mut c, &["MEMORY", "USAGE", &family, "SAMPLES", "0"]) < usage / 8
        });
        assert_eq!(int(&mut c, &["EXISTS", &family]), 1, "the family kept");
        let sweep = durations(&mut c, "RL.HIT");
        println!(
            "| {n} | {} | {} | {} ({hits} hits) | {} | {} | {} | {:.1} | {usage} |",
            cell(fill),
            cell(held),
            cell(sweep),
            cell(dump),
            cell(restore),
            cell(migrate),
            reload[0],
        );
        let _ = info_field(&mut c, "used_memory");
    }
}
