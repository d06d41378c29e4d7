//! RL.SLIDE keys of millions of records: every kind of call answers right, the log holds
//! exactly what it should afterwards, memory follows the records (given back in the call
//! that drops them), and big values are freed by Redis's lazy-free thread where Redis allows
//! it. One test times its calls, around a refund that frees most of a key: none over a
//! millisecond in `SLOWLOG` (a slow one is tried again, as the machine is shared and noisy);
//! `make bigkeys` measures every kind of call.
//!
//! A key is built with one RL.RESTORE of a payload made here, and checked against a model of
//! what the log must hold: after each step, `DEBUG DIGEST-VALUE` of the key equals that of a
//! key restored from the model (the digest is the value's canonical encoding), so every
//! record's time and units are compared, not only the totals.

use crate::common::{
    digest, info_field, int, rl, run, server, slide_payload, slowlog, unix_ms, wait_until, Server,
};
use redis::Connection;
use rstest::rstest;

const LIMIT: u64 = u32::MAX as u64;

/// What a sliding log holds: the encoding's fields.
struct Model {
    latest: u64,
    windows: Vec<(u64, u64)>,
    records: Vec<(u64, u64)>,
    /// The records' units.
    units: u64,
}

impl Model {
    fn longest(&self) -> u64 {
        self.windows.iter().map(|w| w.1).max().unwrap_or(0)
    }

    fn units(&self) -> u64 {
        self.units
    }

    fn payload(&self) -> Vec<u8> {
        slide_payload(self.latest, &self.windows, self.records.iter().copied())
    }

    /// An allowed call of `cost` at `now` under `windows`.
    fn record(&mut self, now: u64, windows: &[(u64, u64)], cost: u64) {
        self.windows = windows.to_vec();
        self.latest = now;
        let longest = self.longest();
        let gone = self.records.partition_point(|r| r.0 + longest <= now);
        self.units -= self.records.drain(..gone).map(|r| r.1).sum::<u64>();
        self.units += cost;
        match self.records.last_mut() {
            Some(last) if last.0 == now => last.1 += cost,
            _ => self.records.push((now, cost)),
        }
    }

    fn refund(&mut self, now: u64, mut units: u64) {
        self.latest = self.latest.max(now);
        while units > 0 {
            let Some(last) = self.records.last_mut() else {
                break;
            };
            let take = units.min(last.1);
            last.1 -= take;
            units -= take;
            self.units -= take;
            if last.1 == 0 {
                self.records.pop();
            }
        }
    }

    /// Stores the model in `key`.
    fn restore(&self, c: &mut Connection, key: &str) {
        let _: () = redis::cmd("RL.RESTORE")
            .arg(key)
            .arg(self.payload())
            .query(c)
            .expect("RL.RESTORE");
    }
}

/// `n` records, one per millisecond up to now, of 1 to 5 units.
fn big_model(n: u64) -> Model {
    let t_end = unix_ms();
    let records: Vec<(u64, u64)> = (0..n).map(|i| (t_end + 1 - n + i, i % 5 + 1)).collect();
    Model {
        latest: t_end,
        windows: vec![(LIMIT, 2 * n + 3_600_000)],
        units: records.iter().map(|r| r.1).sum(),
        records,
    }
}

/// The key holds exactly what the model says.
fn assert_holds(c: &mut Connection, key: &str, model: &Model, step: &str) {
    model.restore(c, "expected");
    assert_eq!(
        digest(c, key),
        digest(c, "expected"),
        "{step}: the log differs from the model"
    );
    run(c, &["DEL", "expected"]).expect("DEL");
}

fn windows_words(windows: &[(u64, u64)]) -> String {
    let pairs: Vec<String> = windows.iter().map(|(l, w)| format!("{l} {w}")).collect();
    pairs.join(" ")
}

/// An allowed RL.SLIDE on `key` and on the model; checks the reply.
fn slide(c: &mut Connection, key: &str, model: &mut Model, windows: &[(u64, u64)], now: u64) {
    let reply = rl(
        c,
        &format!("RL.SLIDE {key} {} NOW {now}", windows_words(windows)),
    );
    model.record(now, windows, 1);
    let longest = model.longest() as i64;
    assert_eq!(
        reply,
        [1, LIMIT as i64, (LIMIT - model.units()) as i64, 0, longest],
        "RL.SLIDE at {now}"
    );
}

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    int(c, &["MEMORY", "USAGE", key, "SAMPLES", "0"])
}

fn wait_lazyfree(c: &mut Connection) {
    wait_until("the lazy-free thread", 60, || {
        info_field(c, "lazyfree_pending_objects") == 0
    });
}

#[rstest]
fn a_log_of_millions_of_records_answers_and_holds_the_right_records(server: Server) {
    let mut c = server.conn();
    // 4 million records, 12 million units.
    let mut model = big_model(4_000_000);
    model.restore(&mut c, "k");
    assert_holds(&mut c, "k", &model, "restored");
    let usage = memory_usage(&mut c, "k");
    assert!(usage < 9 * 4_000_000, "MEMORY USAGE {usage}");

    // Growth across many chunk boundaries (a chunk holds at most 1,536 records).
    let windows = model.windows.clone();
    let start = model.latest;
    for j in 1..=5_000 {
        slide(&mut c, "k", &mut model, &windows, start + j);
    }
    assert_holds(&mut c, "k", &model, "growth");

    // A second window: the reply is the tightest window's.
    let two = vec![(LIMIT, model.longest()), (LIMIT, 1000)];
    let now = model.latest + 1;
    slide(&mut c, "k", &mut model, &two, now);
    let newest = model.records.last().unwrap().0;
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK k NOW {}", now + 10)),
        [
            1,
            LIMIT as i64,
            (LIMIT - model.units()) as i64,
            0,
            (newest + model.longest() - now - 10) as i64
        ]
    );
    // Refused, with the exact wait: 1000 units per second, and the last second holds
    // 1,000 records.
    let tight = rl(&mut c, &format!("RL.SLIDE k 1000 1000 NOW {now}"));
    assert_eq!(tight[..3], [0, 1000, 0]);
    assert_eq!(
        tight[3], 1,
        "the oldest record of the last second leaves in 1 ms"
    );

    // Refunds of 1 million, then 8 million units: cut by binary search, within a record.
    for units in [1_000_000, 8_000_000] {
        let reply = rl(&mut c, &format!("RL.REFUND k COST {units} NOW {now}"));
        model.refund(now, units);
        assert_eq!(
            reply[2],
            (LIMIT - model.units()) as i64,
            "refund of {units}"
        );
        assert_holds(&mut c, "k", &model, &format!("refund of {units}"));
    }
    assert!(model.units() < 4_000_000);

    // Time moves on: 76% of the records leave the longest window in one call, which gives
    // their memory back (what it does not free itself goes to the module's freeing thread).
    let cut = model.records.len() * 76 / 100;
    let edge = model.records[cut - 1].0;
    let before = memory_usage(&mut c, "k");
    let two = model.windows.clone();
    let at = edge + model.longest();
    slide(&mut c, "k", &mut model, &two, at);
    assert_holds(&mut c, "k", &model, "trim leaving 24%");
    let trimmed = memory_usage(&mut c, "k");
    let records = model.records.len() as i64;
    assert!(
        trimmed < 9 * records + 50_000,
        "{trimmed} bytes for {records} records right after the trim ({before} before)"
    );
    for _ in 0..50 {
        let next = model.latest + 1;
        slide(&mut c, "k", &mut model, &two, next);
    }
    let later = memory_usage(&mut c, "k");
    let records = model.records.len() as i64;
    assert!(
        later < 9 * records + 50_000,
        "{later} bytes for {records} records, 50 calls later"
    );
    assert_holds(&mut c, "k", &model, "50 calls after the trim");

    // A shorter window keeps what the longer one still counts: every record stays, and
    // the long window, used again, still counts them all.
    let next = model.latest + 1;
    let (limit, window) = two[0];
    let again = format!("RL.SLIDE k {limit} {window} COST 0 NOW {next}");
    let remaining = rl(&mut c, &again)[2];
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE k {LIMIT} 2000 NOW {next}"))[0],
        1
    );
    assert_eq!(rl(&mut c, &again)[2], remaining - 1);
    model.latest = next;
    model.records.push((next, 1));
    model.units += 1;

    // A refund of everything deletes the key.
    let all = model.units();
    let reply = rl(
        &mut c,
        &format!("RL.REFUND k COST {all} NOW {}", model.latest),
    );
    assert_eq!(reply, [1, LIMIT as i64, LIMIT as i64, 0, 0]);
    assert_eq!(int(&mut c, &["EXISTS", "k"]), 0);
}

#[rstest]
fn big_values_are_freed_by_the_lazy_free_thread(server: Server) {
    let mut c = server.conn();
    let model = big_model(2_000_000);
    let lazy = |c: &mut Connection| {
        wait_lazyfree(c);
        info_field(c, "lazyfreed_objects")
    };
    // UNLINK.
    model.restore(&mut c, "u");
    let before = lazy(&mut c);
    assert_eq!(int(&mut c, &["UNLINK", "u"]), 1);
    assert_eq!(
        lazy(&mut c),
        before + 1,
        "UNLINK went to the lazy-free thread"
    );
    // DEL frees on the main thread with lazyfree-lazy-user-del no (the default before Valkey
    // 8.0, whose default is yes), lazily with yes.
    run(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-del", "no"]).expect("CONFIG");
    model.restore(&mut c, "d");
    assert_eq!(int(&mut c, &["DEL", "d"]), 1);
    assert_eq!(lazy(&mut c), before + 1, "a plain DEL frees at once");
    run(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-del", "yes"]).expect("CONFIG");
    model.restore(&mut c, "d");
    assert_eq!(int(&mut c, &["DEL", "d"]), 1);
    assert_eq!(lazy(&mut c), before + 2, "DEL with lazyfree-lazy-user-del");
    // A refund that empties a big key hands its records' chunks to the module's freeing
    // thread, then deletes what is left, a few allocations, as UNLINK does.
    model.restore(&mut c, "r");
    let usage = memory_usage(&mut c, "r");
    let used = info_field(&mut c, "used_memory");
    let all = model.units();
    let reply = rl(
        &mut c,
        &format!("RL.REFUND r COST {all} NOW {}", model.latest),
    );
    assert_eq!(reply[2], LIMIT as i64);
    assert_eq!(int(&mut c, &["EXISTS", "r"]), 0);
    wait_until("the module's freeing thread", 10, || {
        info_field(&mut c, "ratelimit_free_pending") == 0
    });
    let freed = used - info_field(&mut c, "used_memory");
    assert!(freed > usage * 9 / 10, "{freed} of {usage} bytes freed");
    assert_eq!(
        lazy(&mut c),
        before + 2,
        "nothing of the emptied key was left for the lazy-free thread"
    );
    // Expiry, with lazyfree-lazy-expire: a log whose window ends in half a second.
    run(&mut c, &["CONFIG", "SET", "lazyfree-lazy-expire", "yes"]).expect("CONFIG");
    let expiring = Model {
        windows: vec![(LIMIT, 500)],
        ..big_model(2_000_000)
    };
    expiring.restore(&mut c, "e");
    assert!(int(&mut c, &["PTTL", "e"]) <= 500);
    wait_until("the key's expiry", 30, || {
        int(&mut c, &["EXISTS", "e"]) == 0
    });
    assert_eq!(
        lazy(&mut c),
        before + 3,
        "the expired key went to the lazy-free thread"
    );
    // A small log is freed at once, whatever the command.
    let small = big_model(1_000);
    small.restore(&mut c, "s");
    assert_eq!(int(&mut c, &["UNLINK", "s"]), 1);
    assert_eq!(lazy(&mut c), before + 3);
}

#[rstest]
fn memory_per_record_stays_under_ten_bytes(server: Server) {
    let mut c = server.conn();
    // Each size built the way growth builds it, then 2,000 more records one call at a time,
    // across a chunk boundary: MEMORY USAGE never exceeds 10 bytes per record.
    for n in [1_000, 3_000, 30_000, 1_000_000] {
        let mut model = big_model(n);
        model.restore(&mut c, "m");
        let windows = model.windows.clone();
        let start = model.latest;
        let mut worst: f64 = 0.0;
        for j in 1..=2_000 {
            slide(&mut c, "m", &mut model, &windows, start + j);
            let per = memory_usage(&mut c, "m") as f64 / model.records.len() as f64;
            worst = worst.max(per);
        }
        assert!(worst < 10.0, "{worst:.2} bytes per record near {n} records");
        run(&mut c, &["DEL", "m"]).expect("DEL");
    }
}

/// A refund that leaves a thousand records of a million gives their memory back in that one
/// call: the chunks it no longer uses leave the key at once (to the module's freeing thread),
/// so `MEMORY USAGE` right after it is a fresh thousand-record key's, and `used_memory` falls
/// by the rest once that thread is done. No call of the module takes a millisecond; a shared
/// machine can hold any command that long now and then (a `SLOWLOG RESET` was seen at 4 ms),
/// so a slow call is tried again, on a key built again, up to three times. The shrunk key
/// holds, answers, digests and reloads as a key restored with those thousand records, and
/// grows again from there.
#[test]
fn a_refund_to_a_small_log_gives_the_memory_back_at_once() {
    let server = Server::start(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "1024",
    ]);
    let mut c = server.conn();
    let pending = |c: &mut Connection| info_field(c, "ratelimit_free_pending");
    let mut tries = Vec::new();
    let model = loop {
        let mut model = big_model(1_000_000);
        model.restore(&mut c, "k");
        wait_until("nothing left to free", 10, || pending(&mut c) == 0);
        let used_before = info_field(&mut c, "used_memory");
        let before = memory_usage(&mut c, "k");
        run(&mut c, &["SLOWLOG", "RESET"]).expect("SLOWLOG RESET");
        // Units 1 to 5 a record: the refund cuts between the 1,000th record and the next.
        let units = model.records[1000..].iter().map(|r| r.1).sum::<u64>();
        let now = model.latest;
        let reply = rl(&mut c, &format!("RL.REFUND k COST {units} NOW {now}"));
        model.refund(now, units);
        assert_eq!(model.records.len(), 1000);
        assert_eq!(
            reply[2],
            (LIMIT - model.units()) as i64,
            "the refund's reply"
        );
        // Right after the refund, the only call on the key.
        let after = memory_usage(&mut c, "k");
        wait_until("the freeing thread", 10, || pending(&mut c) == 0);
        let used_after = info_field(&mut c, "used_memory");
        model.restore(&mut c, "fresh");
        let fresh = memory_usage(&mut c, "fresh");
        run(&mut c, &["DEL", "fresh"]).expect("DEL");
        eprintln!(
            "MEMORY USAGE of 1,000,000 records {before}, of the 1,000 left by one refund \
             {after}, of 1,000 restored {fresh}; used_memory {used_before} before, \
             {used_after} after"
        );
        assert!(
            after <= 2 * fresh,
            "{after} bytes right after the refund, {fresh} for a fresh key of its records"
        );
        assert!(
            used_before - used_after > (before - after) * 9 / 10,
            "used_memory {used_before} before, {used_after} once freed: MEMORY USAGE \
             {before}, then {after}"
        );
        // The module's calls (RL.RESTORE copies a whole value, like RESTORE: not timed).
        let calls: Vec<(i64, String)> = slowlog(&mut c)
            .into_iter()
            .filter(|(_, words)| words[0].starts_with("RL.") && words[0] != "RL.RESTORE")
            .map(|(us, words)| (us, words[..2].join(" ")))
            .collect();
        let slowest = calls.iter().max().cloned().expect("the refund in SLOWLOG");
        eprintln!("slowest call: {} µs ({})", slowest.0, slowest.1);
        if slowest.0 < 1000 {
            break model;
        }
        tries.push(slowest);
        assert!(
            tries.len() < 3,
            "slower than 1 ms three times (us, call): {tries:?}"
        );
        run(&mut c, &["DEL", "k"]).expect("DEL");
    };
    // The shrunk key: its records, its answer, its digest through a reload.
    assert_holds(&mut c, "k", &model, "the refund");
    let now = model.latest;
    model.restore(&mut c, "fresh");
    let peek = format!("RL.PEEK k NOW {now}");
    assert_eq!(
        rl(&mut c, &peek),
        rl(&mut c, &peek.replace(" k ", " fresh "))
    );
    let before = digest(&mut c, "k");
    run(&mut c, &["DEBUG", "RELOAD"]).expect("DEBUG RELOAD");
    assert_eq!(digest(&mut c, "k"), before, "DEBUG RELOAD");
    assert_eq!(digest(&mut c, "k"), digest(&mut c, "fresh"));
    assert!(memory_usage(&mut c, "k") <= 2 * memory_usage(&mut c, "fresh"));
    // And it grows again.
    let mut model = model;
    let windows = model.windows.clone();
    for j in 1..=2000 {
        slide(&mut c, "k", &mut model, &windows, now + j);
    }
    assert_holds(&mut c, "k", &model, "growth after the refund");
}
