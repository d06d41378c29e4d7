//! RL.SLIDE keys of millions of records: every kind of call answers right, the log holds
//! exactly what it should afterwards, memory follows the records, and big values are freed by
//! Redis's lazy-free thread where Redis allows it. Timings are not asserted here (the machine
//! is shared and noisy): `make bigkeys` measures them.
//!
//! A key is built with one RL.RESTORE of a payload made here, and checked against a model of
//! what the log must hold: after each step, `DEBUG DIGEST-VALUE` of the key equals that of a
//! key restored from the model (the digest is the value's canonical encoding), so every
//! record's time and units are compared, not only the totals.

mod common;

use common::{
    digest, info_field, int, rl, run, server, slide_payload, unix_ms, wait_until, Server,
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

    // Time moves on: 76% of the records leave the longest window in one call.
    let cut = model.records.len() * 76 / 100;
    let edge = model.records[cut - 1].0;
    let before = memory_usage(&mut c, "k");
    let two = model.windows.clone();
    let at = edge + model.longest();
    slide(&mut c, "k", &mut model, &two, at);
    assert_holds(&mut c, "k", &model, "trim leaving 24%");
    // The call freed a bounded number of chunks; the next calls free the rest.
    let trimmed = memory_usage(&mut c, "k");
    for _ in 0..50 {
        let next = model.latest + 1;
        slide(&mut c, "k", &mut model, &two, next);
    }
    let later = memory_usage(&mut c, "k");
    assert!(
        later < trimmed && trimmed < before,
        "memory: {before} before the trim, {trimmed} right after, {later} 50 calls later"
    );
    let records = model.records.len() as i64;
    assert!(
        later < 9 * records + 50_000,
        "{later} bytes for {records} records"
    );
    assert_holds(&mut c, "k", &model, "after the deferred frees");

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
    // A refund that empties a big key deletes it as UNLINK does.
    model.restore(&mut c, "r");
    let all = model.units();
    let reply = rl(
        &mut c,
        &format!("RL.REFUND r COST {all} NOW {}", model.latest),
    );
    assert_eq!(reply[2], LIMIT as i64);
    assert_eq!(int(&mut c, &["EXISTS", "r"]), 0);
    assert_eq!(
        lazy(&mut c),
        before + 3,
        "the emptied key went to the lazy-free thread"
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
        before + 4,
        "the expired key went to the lazy-free thread"
    );
    // A small log is freed at once, whatever the command.
    let small = big_model(1_000);
    small.restore(&mut c, "s");
    assert_eq!(int(&mut c, &["UNLINK", "s"]), 1);
    assert_eq!(lazy(&mut c), before + 4);
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
