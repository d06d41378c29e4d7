//! What the module writes, it reads back, through a real server: a few thousand random calls
//! of every command (edge values as in `src/tests/roundtrip.rs`) on a primary with a replica
//! and an AOF, then every way a dataset comes back must give the same dataset:
//! - a replica, after `WAIT`, several times during the run and at the end;
//! - `DEBUG RELOAD` (an RDB saved and loaded);
//! - `BGREWRITEAOF` then `DEBUG LOADAOF` (the rewritten AOF: `RL.RESTORE` and `PEXPIREAT`);
//! - `DUMP`/`RESTORE` and `COPY` of each key;
//! - `SHUTDOWN SAVE` and a restart;
//! - a second replica started afterwards (a full sync);
//! - then more calls on those keys, which both replicas follow, with as many parameter sets
//!   in use (`ratelimit_param_sets`) on every server.
//!
//! The calls include policies, keyed and compact (`RL.HIT`, and `RL.POLICY` setting them
//! again with other numbers and limiters, as the other storage, deleting them, reading and
//! forgetting subjects): their keys and families are keys as the others, and the policies
//! (`RL.POLICY LIST`) must come back too.
//!
//! "The same" is `DEBUG DIGEST`, `DBSIZE`, and each key's `DEBUG DIGEST-VALUE` and
//! `PEXPIRETIME` (the digest says whether a key has an expiry, not when). Every call gets a
//! reply, an error reply included (they are counted); never a dropped connection.
//!
//! Every `NOW` is half a day or more ahead of the real clock, so no key expires in real time
//! while the test runs (a replica does not expire keys by itself: that would make digests
//! differ for a reason that is not the module's). Times start from a base a day or more
//! ahead at a multiple of every window and resolution, so that a run's replies do not depend
//! on when it runs; the last tenth of the first calls run near the largest time a call
//! takes. `ROUNDTRIP_CALLS` (default 3000, then a fifth more) and `ROUNDTRIP_SEED` (default
//! 1) choose the run; a failure names the keys that differ and the last calls on them.
//!
//! The generator of the calls is in tests/it/common/roundtrip.rs.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::common::roundtrip::{
    env, render, show, Call, Gen, Rng, DAY, DAY31, KEYS, MAX_TIMESTAMP, POLICIES, W,
};
use crate::common::{info_field, run, text, wait_until, Server};
use redis::{Connection, ConnectionLike, Value};

/// A primary's arguments: an AOF, and a replica synced at once (not after 5 s).
const PRIMARY: [&str; 4] = ["--appendonly", "yes", "--repl-diskless-sync-delay", "0"];

/// Sends `call` and returns its reply, an error reply included; panics when the server
/// gives none (a dropped connection).
fn send(c: &mut Connection, call: &Call, base: u64, what: &str) -> Value {
    let words = render(call, base);
    let mut cmd = redis::cmd(&words[0]);
    for w in &words[1..] {
        cmd.arg(w);
    }
    c.req_command(&cmd)
        .unwrap_or_else(|e| panic!("{what}: {}: no reply: {e}", show(call)))
}

/// An error's kind: its text with numbers and key names blanked out.
fn error_kind(reply: &Value) -> Option<String> {
    let Value::ServerError(e) = reply else {
        return None;
    };
    if e.code() == "WRONGTYPE" {
        return Some("WRONGTYPE".to_string());
    }
    let details = e.details().unwrap_or("");
    let details = details.split(" (key '").next().unwrap_or(details);
    let kind = format!("{} {details}", e.code())
        .split(|ch: char| ch.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("#");
    Some(kind.chars().take(72).collect())
}

/// What must come back: the dataset's digest, and each key's digest and absolute expiry.
#[derive(Debug, PartialEq)]
struct State {
    digest: String,
    dbsize: i64,
    keys: BTreeMap<String, (String, i64)>,
    /// `RL.POLICY LIST`: each policy's name, digest and words (server state, not keys).
    policies: String,
}

fn state(c: &mut Connection) -> State {
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query(c).expect("KEYS");
    let keys = names
        .into_iter()
        .map(|k| {
            let d: Vec<String> = redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg(&k)
                .query(c)
                .expect("DEBUG DIGEST-VALUE");
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&k)
                .query(c)
                .expect("PEXPIRETIME");
            (k, (d.concat(), at))
        })
        .collect();
    State {
        digest: text(c, &["DEBUG", "DIGEST"]),
        dbsize: redis::cmd("DBSIZE").query(c).expect("DBSIZE"),
        keys,
        policies: format!(
            "{:?}",
            redis::cmd("RL.POLICY")
                .arg("LIST")
                .arg(0)
                .arg("COUNT")
                .arg(100)
                .query::<Value>(c)
                .expect("RL.POLICY LIST")
        ),
    }
}

/// What differs between two states: `None` when they are the same.
fn difference(want: &State, got: &State) -> Option<String> {
    if want == got {
        return None;
    }
    let mut out = format!(
        "DEBUG DIGEST {} -> {}, DBSIZE {} -> {}",
        want.digest, got.digest, want.dbsize, got.dbsize
    );
    for (k, w) in &want.keys {
        match got.keys.get(k) {
            None => out += &format!("\n  {k}: missing (was {w:?})"),
            Some(g) if g != w => out += &format!("\n  {k}: {w:?} -> {g:?}"),
            _ => {}
        }
    }
    for k in got.keys.keys().filter(|k| !want.keys.contains_key(*k)) {
        out += &format!("\n  {k}: new");
    }
    if want.policies != got.policies {
        out += &format!("\n  policies: {} -> {}", want.policies, got.policies);
    }
    Some(out)
}

/// The calls that named a key among `keys` (or the policy of a key a policy derived), the
/// last `n` of them, as a report shows them.
fn calls_on(log: &[Call], keys: &[String], n: usize) -> String {
    let names = |s: &String| {
        keys.iter().any(|k| {
            k == s
                || k.strip_prefix(s.as_str())
                    .is_some_and(|r| r.starts_with('|'))
        })
    };
    let on: Vec<String> = log
        .iter()
        .enumerate()
        .filter(|(_, call)| call.iter().any(|w| matches!(w, W::Lit(s) if names(s))))
        .map(|(i, call)| format!("  #{i}: {}", show(call)))
        .collect();
    on[on.len().saturating_sub(n)..].join("\n")
}

/// Checks that `got` equals `want` after `step`; on a difference, fails with it and the
/// last calls on the keys that differ.
fn check(step: &str, want: &State, got: &State, log: &[Call]) {
    if let Some(diff) = difference(want, got) {
        let keys: Vec<String> = want
            .keys
            .iter()
            .filter(|(k, v)| got.keys.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .chain(
                got.keys
                    .keys()
                    .filter(|k| !want.keys.contains_key(*k))
                    .cloned(),
            )
            .collect();
        panic!(
            "{step}: the dataset differs: {diff}\nthe last calls on {keys:?} (T = the run's base time):\n{}",
            calls_on(log, &keys, 40)
        );
    }
}

/// Waits until `n` replicas have everything the primary sent.
fn wait_replicas(p: &mut Connection, n: i64) {
    let acked: i64 = redis::cmd("WAIT").arg(n).arg(5000).query(p).expect("WAIT");
    assert_eq!(
        acked, n,
        "WAIT {n} 5000: only {acked} replicas acknowledged"
    );
}

fn rewriting(c: &mut Connection) -> bool {
    let info = text(c, &["INFO", "persistence"]);
    !(info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
}

fn server_ms(c: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(c).expect("TIME");
    secs * 1000 + micros / 1000
}

/// The calls made so far, and what they answered.
struct Run {
    gen: Gen,
    base: u64,
    log: Vec<Call>,
    /// Errors by command and kind.
    errors: BTreeMap<String, usize>,
    /// Replies by command: 1 (allowed), 0 (refused), and others (nil, errors).
    outcomes: BTreeMap<String, [usize; 3]>,
}

impl Run {
    /// Makes `n` calls on the primary, checking `replicas` after each quarter (not after the
    /// last: the caller checks then); the last tenth of them near the end of time when
    /// `to_the_end` says so.
    fn calls(
        &mut self,
        p: &mut Connection,
        n: usize,
        replicas: &mut [&mut Connection],
        to_the_end: bool,
    ) {
        for i in 0..n {
            if to_the_end && i == n - n / 10 {
                self.gen.jump_to_the_end_of_time();
            }
            let call = self.gen.call();
            let at = self.log.len();
            let reply = send(p, &call, self.base, &format!("call #{at}"));
            let first = match &reply {
                Value::Array(fields) => fields.first(),
                _ => None,
            };
            let command = show(&call[..1].to_vec());
            let counts = self.outcomes.entry(command.clone()).or_default();
            match first {
                Some(Value::Int(1)) => counts[0] += 1,
                Some(Value::Int(0)) => counts[1] += 1,
                _ => counts[2] += 1,
            }
            match error_kind(&reply) {
                Some(kind) => *self.errors.entry(format!("{command}: {kind}")).or_default() += 1,
                None => self.gen.granted(&call, &reply, self.base),
            }
            self.log.push(call);
            if (i + 1) % (n / 4).max(1) == 0 && i + 1 < n {
                wait_replicas(p, replicas.len() as i64);
                let want = state(p);
                for r in replicas.iter_mut() {
                    check(
                        &format!("a replica after call #{at}"),
                        &want,
                        &state(r),
                        &self.log,
                    );
                }
            }
        }
    }
}

#[test]
fn every_state_survives_every_way_back() {
    let started = Instant::now();
    let calls = env("ROUNDTRIP_CALLS", 3000) as usize;
    let mut primary = Server::start(&PRIMARY);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    // A day or more ahead, at a multiple of every window and resolution (124 days): a seed
    // makes the same calls, which get the same replies, in every run.
    let base = (server_ms(&mut p) + DAY as u64).next_multiple_of(4 * DAY31);
    let mut run_ = Run {
        gen: Gen {
            rng: Rng(env("ROUNDTRIP_SEED", 1).max(1)),
            t: 0,
            held: vec![Vec::new(); KEYS],
            tame: false,
            end: (MAX_TIMESTAMP - DAY31 - base) as i64,
            policies: [None; POLICIES],
        },
        base,
        log: Vec::with_capacity(calls),
        errors: BTreeMap::new(),
        outcomes: BTreeMap::new(),
    };
    run_.calls(&mut p, calls, &mut [&mut r], true);
    // The replica.
    wait_replicas(&mut p, 1);
    let want = state(&mut p);
    check("the replica at the end", &want, &state(&mut r), &run_.log);

    // An RDB saved and loaded.
    run(&mut p, &["DEBUG", "RELOAD"]).expect("DEBUG RELOAD answers OK");
    check("DEBUG RELOAD", &want, &state(&mut p), &run_.log);

    // The AOF rewritten, then loaded.
    wait_until("no AOF rewrite", 30, || !rewriting(&mut p));
    run(&mut p, &["BGREWRITEAOF"]).expect("BGREWRITEAOF");
    wait_until("the AOF rewrite", 30, || !rewriting(&mut p));
    let info = text(&mut p, &["INFO", "persistence"]);
    assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
    run(&mut p, &["DEBUG", "LOADAOF"]).expect("DEBUG LOADAOF answers OK");
    check(
        "BGREWRITEAOF and DEBUG LOADAOF",
        &want,
        &state(&mut p),
        &run_.log,
    );

    // DUMP and RESTORE (with the same absolute expiry), and COPY, of each key.
    for (key, (digest, at)) in &want.keys {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut p).expect("DUMP");
        let (restored, copied) = (format!("restored:{key}"), format!("copied:{key}"));
        let mut restore = redis::cmd("RESTORE");
        restore.arg(&restored).arg((*at).max(0)).arg(dump);
        if *at > 0 {
            restore.arg("ABSTTL");
        }
        restore
            .query::<()>(&mut p)
            .unwrap_or_else(|e| panic!("RESTORE of {key}'s DUMP: {e}"));
        let copy: i64 = redis::cmd("COPY")
            .arg(key)
            .arg(&copied)
            .query(&mut p)
            .expect("COPY");
        assert_eq!(copy, 1, "COPY {key} {copied}");
        let now = state(&mut p);
        for name in [&restored, &copied] {
            assert_eq!(
                now.keys.get(name),
                Some(&(digest.clone(), *at)),
                "{name}: DEBUG DIGEST-VALUE and PEXPIRETIME, against {key}'s; the last calls on {key}:\n{}",
                calls_on(&run_.log, std::slice::from_ref(key), 40)
            );
        }
        let deleted: i64 = redis::cmd("DEL")
            .arg(&restored)
            .arg(&copied)
            .query(&mut p)
            .expect("DEL");
        assert_eq!(deleted, 2);
    }
    check(
        "DUMP/RESTORE and COPY (deleted)",
        &want,
        &state(&mut p),
        &run_.log,
    );

    // A clean shutdown and a restart.
    primary.save_and_restart();
    let mut p = primary.conn();
    check(
        "SHUTDOWN SAVE and a restart",
        &want,
        &state(&mut p),
        &run_.log,
    );

    // The first replica follows the restarted primary; a second one syncs in full.
    let second = primary.replica();
    let mut s2 = second.conn();
    wait_until("the first replica's link", 30, || {
        text(&mut r, &["INFO", "replication"]).contains("master_link_status:up")
    });
    wait_replicas(&mut p, 2);
    check(
        "the first replica, after the restart",
        &want,
        &state(&mut r),
        &run_.log,
    );
    check(
        "a second replica (a full sync)",
        &want,
        &state(&mut s2),
        &run_.log,
    );

    // More calls, on keys that went through all of the above (their parameter sets
    // interned again, copied, released), and both replicas follow.
    run_.calls(&mut p, calls / 5, &mut [&mut r, &mut s2], false);
    wait_replicas(&mut p, 2);
    let want = state(&mut p);
    check(
        "the first replica, at the end",
        &want,
        &state(&mut r),
        &run_.log,
    );
    check(
        "the second replica, at the end",
        &want,
        &state(&mut s2),
        &run_.log,
    );
    // The parameter sets in use are those of the keys, on every server. A key a call
    // deleted may still wait for a lazy-free thread, here or on a replica, with its set:
    // the three counts are read again until they agree.
    let sets = |c: &mut Connection| info_field(c, "ratelimit_param_sets");
    wait_until("the same parameter sets on every server", 10, || {
        let on_primary = sets(&mut p);
        sets(&mut r) == on_primary && sets(&mut s2) == on_primary
    });
    let on_primary = sets(&mut p);
    assert_eq!(text(&mut p, &["PING"]), "PONG");
    let Run {
        log,
        errors,
        outcomes,
        ..
    } = run_;
    let errors_total: usize = errors.values().sum();
    eprintln!(
        "roundtrip: {} calls answering [1, 0, other] {outcomes:?}; {errors_total} errors {errors:?}; {} keys; {on_primary} parameter sets; {:.1} s",
        log.len(),
        want.dbsize,
        started.elapsed().as_secs_f64()
    );
}
