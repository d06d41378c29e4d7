//! Policies (`RL.POLICY SET/GET/DEL/LIST`), `RL.HIT` under them, and `RL.TOP`: the contract
//! and bad input, persistence (RDB, AOF, AOF rewrite, restarts), replication, a policy
//! changed under load, and the heaviest of a flood of subjects.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::policy::{alternating, hit, line, ok, rewrite_aof};
use crate::common::{digest, err, int, run, server, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};
use rstest::rstest;

fn words(c: &mut Connection, l: &str) -> Option<Vec<String>> {
    match line(c, l).unwrap_or_else(|e| panic!("{l}: {e}")) {
        Value::Nil => None,
        v => Some(redis::from_redis_value(&v).unwrap()),
    }
}

/// Every policy, as (name, digest, definition): `RL.POLICY LIST` page after page.
fn list(c: &mut Connection) -> Vec<(String, String, Vec<String>)> {
    let mut all = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let v = run(c, &["RL.POLICY", "LIST", &cursor, "COUNT", "100"]).unwrap();
        let (next, page): (String, Vec<(String, String, Vec<String>)>) =
            redis::from_redis_value(&v).unwrap();
        all.extend(page);
        if next == "0" {
            return all;
        }
        cursor = next;
    }
}

#[rstest]
fn a_policy_decides_as_rl_all_on_keys_derived_from_the_subject(server: Server) {
    let mut c = server.conn();
    let t = unix_ms() + 10_000;
    ok(
        &mut c,
        "RL.POLICY SET api minute SLIDE 3 60000 hour TOKEN 100 3600000",
    );
    assert_eq!(
        words(&mut c, "RL.POLICY GET api").unwrap(),
        ["minute", "SLIDE", "3", "60000", "hour", "TOKEN", "100", "3600000"]
    );
    assert_eq!(words(&mut c, "RL.POLICY GET nope"), None);
    for i in 0..3 {
        let h = hit(&mut c, &format!("RL.HIT api user:42 NOW {t}"));
        assert_eq!(h.fields[..3], [1, 3, 2 - i]);
        assert_eq!(h.refused_by, None);
        assert_eq!(h.each.len(), 2);
        assert_eq!(h.each[1][..3], [1, 100, 99 - i]);
    }
    // Refused: by "minute", and nothing is taken from "hour".
    let h = hit(&mut c, &format!("RL.HIT api user:42 NOW {t}"));
    assert_eq!(h.fields, [0, 3, 0, 60_000, h.fields[4]]);
    assert_eq!(h.refused_by.as_deref(), Some("minute"));
    assert_eq!(h.each[1][..3], [1, 100, 97]);
    // The keys are ordinary limiter keys, in the subject's slot.
    for key in ["api|minute|slide|{user:42}", "api|hour|token|{user:42}"] {
        assert_eq!(text(&mut c, &["TYPE", key]), "ratelimit");
        assert!(int(&mut c, &["PTTL", key]) > 0);
    }
    let peek: Vec<i64> = redis::from_redis_value(
        &line(
            &mut c,
            &format!("RL.PEEK api|hour|token|{{user:42}} NOW {t}"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(peek[..3], [1, 100, 97]);
    // A subject with a hash tag keeps it: its keys go where the tag sends them.
    hit(&mut c, &format!("RL.HIT api {{org:7}}:user:1 NOW {t}"));
    assert_eq!(
        text(&mut c, &["TYPE", "api|minute|slide|={org:7}:user:1"]),
        "ratelimit"
    );
    // COMMAND GETKEYS names the subject, which cluster clients route by.
    let keys: Vec<String> =
        redis::from_redis_value(&line(&mut c, "COMMAND GETKEYS RL.HIT api user:42").unwrap())
            .unwrap();
    assert_eq!(keys, ["user:42"]);
}

#[rstest]
fn a_limiter_without_cost_takes_each_hits_and_one_with_cost_keeps_it(server: Server) {
    let mut c = server.conn();
    let t = unix_ms() + 10_000;
    ok(
        &mut c,
        "RL.POLICY SET llm rpm SLIDE 60 60000 COST 1 tpm TOKEN 100000 60000",
    );
    let h = hit(&mut c, &format!("RL.HIT llm org:1 COST 4000 NOW {t}"));
    assert_eq!(h.each[0][..3], [1, 60, 59]);
    assert_eq!(h.each[1][..3], [1, 100000, 96000]);
    // COST 0 asks every limiter without taking, the fixed COST 1 included.
    for _ in 0..3 {
        let h = hit(&mut c, &format!("RL.HIT llm org:1 COST 0 NOW {t}"));
        assert_eq!(h.each[0][..3], [1, 60, 59]);
        assert_eq!(h.each[1][..3], [1, 100000, 96000]);
    }
    // Too many tokens: refused by tpm, and the request is not counted either.
    let h = hit(&mut c, &format!("RL.HIT llm org:1 COST 200000 NOW {t}"));
    assert_eq!(h.refused_by.as_deref(), Some("tpm"));
    assert_eq!(h.fields[3], -1, "more than the bucket holds: never");
    assert_eq!(h.each[0][..3], [1, 60, 59]);
    // Leases and CL.THROTTLE's kind are limiters too.
    ok(
        &mut c,
        "RL.POLICY SET jobs run ACQUIRE 2 30000 cell THROTTLE 10 100 60",
    );
    let h = hit(&mut c, &format!("RL.HIT jobs u NOW {t}"));
    assert_eq!(h.fields[..3], [1, 2, 1]);
    assert_eq!(h.each[1][..3], [1, 11, 10]);
    assert_eq!(text(&mut c, &["TYPE", "jobs|run|acquire|{u}"]), "ratelimit");
}

#[rstest]
fn a_changed_policy_holds_from_the_next_call_with_the_history_kept(server: Server) {
    let mut c = server.conn();
    let t = unix_ms() + 10_000;
    ok(&mut c, "RL.POLICY SET p w SLIDE 5 60000");
    for _ in 0..3 {
        hit(&mut c, &format!("RL.HIT p s NOW {t}"));
    }
    // Lowered to 3: the three calls made count against it.
    ok(&mut c, "RL.POLICY SET p w SLIDE 3 60000");
    let h = hit(&mut c, &format!("RL.HIT p s NOW {}", t + 1));
    assert_eq!(h.fields[..3], [0, 3, 0]);
    // Raised again: the history is still there.
    ok(&mut c, "RL.POLICY SET p w SLIDE 4 60000");
    let h = hit(&mut c, &format!("RL.HIT p s NOW {}", t + 2));
    assert_eq!(h.fields[..3], [1, 4, 0]);
    // Deleted: the keys stay until they expire; RL.HIT under it is an error.
    assert_eq!(int(&mut c, &["RL.POLICY", "DEL", "p"]), 1);
    assert_eq!(int(&mut c, &["RL.POLICY", "DEL", "p"]), 0);
    assert_eq!(text(&mut c, &["TYPE", "p|w|slide|{s}"]), "ratelimit");
    assert_eq!(
        err(&mut c, &["RL.HIT", "p", "s"]),
        "ERR no policy named 'p'"
    );
}

#[rstest]
#[case(&["RL.POLICY", "SET", "p"], "ERR wrong number of arguments for 'RL.POLICY|set' command")]
#[case(&["RL.POLICY", "SET", "p", "x", "FOO", "1"], "ERR expected a limiter kind (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE, THROTTLE), got 'FOO' (limiter 'x')")]
#[case(&["RL.POLICY", "SET", "p", "x", "SLIDE", "0", "1000"], "ERR limit must be an integer from 1 to 4294967295 (limiter 'x')")]
#[case(&["RL.POLICY", "SET", "p", "x", "SLIDE", "5", "1000", "x", "TOKEN", "5", "1000"], "ERR the same limiter name is given twice (limiter 'x')")]
#[case(&["RL.POLICY", "SET", "p", "x", "SLIDE", "5", "1000", "NOW", "5"], "ERR NOW is each call's (RL.HIT policy subject NOW ms), not a policy's")]
#[case(&["RL.POLICY", "SET", "p", "x", "SLIDE", "5", "1000", "y"], "ERR a limiter's name is followed by its kind and parameters (limiter 'y')")]
#[case(&["RL.POLICY", "SET", "a b", "x", "SLIDE", "5", "1000"], "ERR a policy's name is 1 to 64 letters, digits and _ - . :, got 'a b'")]
#[case(&["RL.POLICY", "SET", "p", "{x}", "SLIDE", "5", "1000"], "ERR a limiter's name is 1 to 64 letters, digits and _ - . :, got '{x}'")]
#[case(&["RL.POLICY", "SET", "p", "x", "ACQUIRE", "5", "1000", "ID", "a"], "ERR ID is not allowed in a policy: each RL.HIT takes a lease of its own (limiter 'x')")]
#[case(&["RL.POLICY", "SET", "p", "x", "ACQUIRE", "5", "1000", "BLOCK", "10"], "ERR BLOCK is not allowed in a policy: RL.HIT never waits (limiter 'x')")]
#[case(&["RL.HIT", "nope", "s"], "ERR no policy named 'nope'")]
#[case(&["RL.HIT", "ok", "a}b"], "ERR a subject without a hash tag ({...}) may not hold '}', got 'a}b'")]
#[case(&["RL.HIT", "ok", ""], "ERR a subject is 1 to 1024 bytes")]
#[case(&["RL.HIT", "ok", "s", "COST", "-1"], "ERR COST must be an integer from 0 to 9223372036854775807")]
#[case(&["RL.HIT", "ok", "s", "FOO"], "ERR unknown option 'FOO'")]
#[case(&["RL.TOP", "COUNT", "0"], "ERR COUNT must be an integer from 1 to 128")]
#[case(&["RL.TOP", "POLICY", "nope"], "ERR no policy named 'nope'")]
fn bad_input_is_refused_with_a_clear_error(#[case] words: &[&str], #[case] expected: &str) {
    let s = Server::start(&[]);
    let mut c = s.conn();
    ok(&mut c, "RL.POLICY SET ok x SLIDE 5 1000");
    assert_eq!(err(&mut c, words), expected);
    // Nothing was made of it.
    assert_eq!(list(&mut c).len(), 1);
}

#[rstest]
fn policies_are_bounded_in_count_and_size(server: Server) {
    let mut c = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..1024 {
        pipe.cmd("RL.POLICY")
            .arg("SET")
            .arg(format!("p{i}"))
            .arg("x")
            .arg("SLIDE")
            .arg("5")
            .arg("1000")
            .ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    assert_eq!(
        err(
            &mut c,
            &["RL.POLICY", "SET", "one-more", "x", "SLIDE", "5", "1000"]
        ),
        "ERR the server holds 1024 policies, the most it may: RL.POLICY DEL one first"
    );
    // Setting an existing one again is always allowed.
    ok(&mut c, "RL.POLICY SET p7 x SLIDE 6 1000");
    let mut many = vec!["RL.POLICY", "SET", "p0"];
    let names: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
    for n in &names {
        many.extend([n.as_str(), "SLIDE", "5", "1000"]);
    }
    assert_eq!(err(&mut c, &many), "ERR a policy has at most 16 limiters");
    assert!(text(&mut c, &["INFO", "ratelimit"]).contains("ratelimit_policies:1024"));
}

/// The policies and the limiters' keys, as a server holds them.
fn state(c: &mut Connection) -> (Vec<(String, String, Vec<String>)>, String) {
    (list(c), text(c, &["DEBUG", "DIGEST"]))
}

fn some_policies(c: &mut Connection) {
    ok(
        c,
        "RL.POLICY SET api minute SLIDE 3 60000 hour TOKEN 100 3600000",
    );
    // Windows long enough that no key empties (and goes) while a test compares datasets
    // across a restart.
    ok(
        c,
        "RL.POLICY SET llm rpm SLIDE 60 60000 COST 1 tpm TOKEN 100000 86400000",
    );
    ok(c, "RL.POLICY SET gone x FIXED 5 1000");
    assert_eq!(int(c, &["RL.POLICY", "DEL", "gone"]), 1);
    let t = unix_ms();
    hit(c, &format!("RL.HIT api user:1 NOW {t}"));
    hit(c, &format!("RL.HIT llm org:1 COST 300 NOW {t}"));
}

#[rstest]
fn policies_survive_the_rdb_a_reload_and_restarts() {
    let mut s = Server::start(&[]);
    let mut c = s.conn();
    some_policies(&mut c);
    let before = state(&mut c);
    assert_eq!(before.0.len(), 2);
    // DEBUG RELOAD: saved, flushed, loaded.
    line(&mut c, "DEBUG RELOAD").unwrap();
    assert_eq!(state(&mut c), before);
    // FLUSHALL keeps the policies (server state, as Functions), not the keys.
    line(&mut c, "FLUSHALL").unwrap();
    assert_eq!(list(&mut c), before.0);
    hit(&mut c, &format!("RL.HIT api user:1 NOW {}", unix_ms()));
    let before = state(&mut c);
    s.save_and_restart();
    let mut c = s.conn();
    assert_eq!(state(&mut c), before);
    // An RDB without policies loaded in place of the data leaves none behind.
    let empty = Server::start(&[]);
    let mut e = empty.conn();
    line(&mut e, "SET k v").unwrap();
    line(&mut e, "SAVE").unwrap();
    let rdb = std::fs::read(empty.path("dump.rdb")).unwrap();
    std::fs::write(s.path("dump.rdb"), rdb).unwrap();
    line(&mut c, "DEBUG RELOAD NOSAVE").unwrap();
    assert_eq!(text(&mut c, &["GET", "k"]), "v");
    assert!(list(&mut c).is_empty());
}

#[rstest]
fn policies_survive_the_aof_and_its_rewrite() {
    // Every write in the AOF before its reply (a crash follows).
    let mut s = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = s.conn();
    some_policies(&mut c);
    let before = state(&mut c);
    // From the AOF's commands.
    s.crash_and_restart();
    let mut c = s.conn();
    assert_eq!(state(&mut c), before);
    // From a rewritten AOF (its RDB preamble), then more commands after it.
    rewrite_aof(&mut c);
    ok(&mut c, "RL.POLICY SET later x TOKEN 5 1000");
    let before = state(&mut c);
    s.crash_and_restart();
    let mut c = s.conn();
    assert_eq!(state(&mut c), before);
    line(&mut c, "DEBUG LOADAOF").unwrap();
    assert_eq!(state(&mut c), before);
}

#[rstest]
fn replicas_hold_the_same_policies_and_decisions(server: Server) {
    let mut c = server.conn();
    // Set before the replica: it gets them in the full sync.
    some_policies(&mut c);
    let replica = server.replica();
    let mut r = replica.conn();
    // Set after: replicated as the call.
    ok(&mut c, "RL.POLICY SET late x SUBWIN 10 60000 6000");
    assert_eq!(int(&mut c, &["RL.POLICY", "DEL", "llm"]), 1);
    let t = unix_ms();
    for i in 0..20 {
        hit(&mut c, &format!("RL.HIT api user:{} NOW {t}", i % 3));
        hit(&mut c, &format!("RL.HIT late s{} NOW {t}", i % 2));
    }
    line(&mut c, "WAIT 1 5000").unwrap();
    assert_eq!(list(&mut r), list(&mut c));
    assert_eq!(
        words(&mut r, "RL.POLICY GET api"),
        words(&mut c, "RL.POLICY GET api")
    );
    assert_eq!(
        text(&mut r, &["DEBUG", "DIGEST"]),
        text(&mut c, &["DEBUG", "DIGEST"])
    );
    assert_eq!(
        digest(&mut r, "late|x|subwin|{s1}"),
        digest(&mut c, "late|x|subwin|{s1}")
    );
    // A replica refuses a client's change, as any write.
    let e = err(
        &mut r,
        &["RL.POLICY", "SET", "x", "y", "SLIDE", "1", "1000"],
    );
    assert!(e.starts_with("READONLY"), "{e}");
    let e = err(&mut r, &["RL.HIT", "api", "u"]);
    assert!(e.starts_with("READONLY"), "{e}");
    // A server that held other policies takes its primary's at the full sync.
    let other = Server::start(&[]);
    let mut o = other.conn();
    ok(&mut o, "RL.POLICY SET stale x SLIDE 1 1000");
    line(&mut o, &format!("REPLICAOF 127.0.0.1 {}", server.port)).unwrap();
    wait_until("the full sync", 30, || {
        text(&mut o, &["INFO", "replication"]).contains("master_link_status:up")
    });
    assert_eq!(list(&mut o), list(&mut c));
}

#[rstest]
fn no_call_sees_half_a_policy_while_it_changes(server: Server) {
    // Two definitions told apart by every field a hit answers: A has two limiters of limits
    // 5 and 6, B one of limit 7.
    let mut c = server.conn();
    ok(&mut c, "RL.POLICY SET p a1 SLIDE 5 1000 a2 TOKEN 6 1000");
    let changer = alternating(
        server.port,
        "RL.POLICY SET p b1 FIXED 7 1000",
        "RL.POLICY SET p a1 SLIDE 5 1000 a2 TOKEN 6 1000",
        1500,
    );
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut i = 0;
    while Instant::now() < deadline {
        let h = hit(&mut c, &format!("RL.HIT p s{}", i % 50));
        i += 1;
        let limits: Vec<i64> = h.each.iter().map(|e| e[1]).collect();
        match limits.as_slice() {
            [5, 6] => assert!(h.fields[1] == 5 || h.fields[1] == 6, "{h:?}"),
            [7] => assert_eq!(h.fields[1], 7, "{h:?}"),
            other => panic!("half a policy: {other:?} in {h:?}"),
        }
        *seen.entry(limits.len()).or_default() += 1;
    }
    let changes = changer.join().unwrap();
    assert!(changes > 10, "{changes}");
    assert_eq!(seen.len(), 2, "both definitions were seen: {seen:?}");
}

/// RL.TOP's answer: (name, count, error).
fn top(c: &mut Connection, l: &str) -> Vec<(String, i64, i64)> {
    redis::from_redis_value(&line(c, l).unwrap()).unwrap()
}

#[rstest]
fn rl_top_finds_the_heaviest_of_a_flood_from_1000_subjects(server: Server) {
    let mut c = server.conn();
    // One call allowed per subject per day: every later call is refused.
    ok(&mut c, "RL.POLICY SET flood x SLIDE 1 86400000");
    ok(&mut c, "RL.POLICY SET quiet x SLIDE 1 86400000");
    let mut exact: HashMap<String, i64> = HashMap::new();
    // 990 subjects of 3 to 8 calls each; the 10 heaviest of 200 to 290; all interleaved in
    // a fixed shuffled order.
    let mut calls: Vec<String> = Vec::new();
    for i in 0..1000 {
        let n = if i < 10 { 200 + 10 * i } else { 3 + i % 6 };
        let subject = format!("s{i}");
        calls.extend(std::iter::repeat_n(subject.clone(), n as usize));
        *exact.entry(subject).or_default() += n - 1;
    }
    let mut seed = 7u64;
    for i in (1..calls.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        calls.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    for chunk in calls.chunks(1000) {
        let mut pipe = redis::pipe();
        for subject in chunk {
            pipe.cmd("RL.HIT").arg("flood").arg(subject).ignore();
        }
        let () = pipe.query(&mut c).unwrap();
    }
    let answer = top(&mut c, "RL.TOP COUNT 10 POLICY flood");
    let mut names: Vec<&str> = answer.iter().map(|(n, ..)| n.as_str()).collect();
    names.sort();
    let mut heaviest: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
    heaviest.sort();
    assert_eq!(names, heaviest);
    let total: i64 = exact.values().sum();
    for (name, count, error) in &answer {
        let truth = exact[name];
        assert!(
            *count >= truth && count - error <= truth,
            "{name}: {count} ({error}) vs {truth}"
        );
        assert!(error * 64 <= total, "{name}: error {error} of {total}");
    }
    // Most first; the default count is 10; other policies and plain calls are apart.
    assert!(answer.windows(2).all(|w| w[0].1 >= w[1].1));
    assert_eq!(answer[0].0, "s9");
    assert_eq!(top(&mut c, "RL.TOP POLICY flood").len(), 10);
    assert!(top(&mut c, "RL.TOP POLICY quiet").is_empty());
    assert!(top(&mut c, "RL.TOP").is_empty());
    for _ in 0..3 {
        line(&mut c, "RL.SLIDE plain 1 60000").unwrap();
    }
    assert_eq!(top(&mut c, "RL.TOP"), [("plain".to_string(), 2, 0)]);
    // INFO: each policy's calls, no figure per subject.
    let info = text(&mut c, &["INFO", "ratelimit"]);
    let calls: i64 = exact.values().map(|n| n + 1).sum();
    let want = format!("calls={calls},allowed=1000,refused={total},errors=0,units=1000");
    assert!(info.contains(&want), "{want} in {info}");
    assert!(!info.contains("s9"), "{info}");
}

#[rstest]
fn rl_top_forgets_what_is_older_than_its_window() {
    let s = Server::start(&["--ratelimit.top-window-ms", "1000"]);
    let mut c = s.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.top-window-ms")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["ratelimit.top-window-ms", "1000"]);
    for _ in 0..3 {
        line(&mut c, "RL.SLIDE k 1 60000").unwrap();
    }
    assert_eq!(top(&mut c, "RL.TOP")[0].1, 2);
    // Two windows later it is gone.
    wait_until("RL.TOP forgets", 10, || top(&mut c, "RL.TOP").is_empty());
    let e = err(&mut c, &["CONFIG", "SET", "ratelimit.top-window-ms", "10"]);
    assert!(e.starts_with("ERR"), "{e}");
}

#[rstest]
fn a_rewrite_without_rdb_preamble_holds_the_policies_with_its_first_key() {
    // Every write in the AOF before its reply (a crash follows).
    let mut s = Server::start(crate::common::AOF_ALWAYS_NO_PREAMBLE);
    let mut c = s.conn();
    some_policies(&mut c);
    let rewriting = |c: &mut Connection| {
        let info = text(c, &["INFO", "persistence"]);
        !(info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
    };
    let rewrite = |c: &mut Connection| {
        wait_until("no AOF rewrite", 30, || !rewriting(c));
        line(c, "BGREWRITEAOF").unwrap();
        wait_until("the AOF rewrite", 30, || !rewriting(c));
    };
    rewrite(&mut c);
    let before = state(&mut c);
    assert_eq!(before.0.len(), 2);
    assert_eq!(info_int(&mut c, "ratelimit_policies_missing_from_aof"), 0);
    // A restart from the rewritten AOF alone (its incremental file holds nothing new).
    s.crash_and_restart();
    let mut c = s.conn();
    assert_eq!(state(&mut c), before);
    // Without a key of the module's type, the rewrite cannot hold them: INFO and the log
    // say so.
    line(&mut c, "FLUSHALL").unwrap();
    rewrite(&mut c);
    wait_until("INFO to count them", 10, || {
        info_int(&mut c, "ratelimit_policies_missing_from_aof") == 2
    });
    assert!(s
        .log()
        .contains("it holds none of the 2 policies (api, llm)"));
}

/// An integer field of `INFO everything`.
fn info_int(c: &mut Connection, field: &str) -> i64 {
    let info = text(c, &["INFO", "everything"]);
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO"))
}
