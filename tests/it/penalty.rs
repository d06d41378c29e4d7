//! A policy's penalty box (`PENALTY` in `RL.POLICY SET`) and `RL.PENALTY`: a banned subject
//! is refused without charging any limiter, bans escalate and expire exactly (with `NOW`),
//! the ban state is an ordinary key (replicated, persisted, visible to `RL.PEEK`, lifted by
//! `DEL` or `RL.POLICY UNBAN`), and `INFO` and `RL.TOP` count bans.

use crate::common::policy::{hit, info_line, line, ok, rewrite_aof};
use crate::common::{digest, err, int, rl, server, text, unix_ms, wait_until, Server};
use redis::Connection;
use rstest::rstest;

const LOGIN: &str =
    "RL.POLICY SET login PENALTY 3 60000 1000 MAX 4000 HORIZON 10000 tries TOKEN 1 60000";
const BAN_KEY: &str = "login||penalty|{u}";

#[rstest]
fn a_banned_subject_is_refused_without_charging_any_limiter(server: Server) {
    let mut c = server.conn();
    ok(&mut c, LOGIN);
    let t = unix_ms();
    // The first takes the one token; the next two are refused by it (two refusals).
    assert_eq!(hit(&mut c, &format!("RL.HIT login u NOW {t}")).fields[0], 1);
    for i in 1..3 {
        let h = hit(&mut c, &format!("RL.HIT login u NOW {}", t + i));
        assert_eq!(h.refused_by.as_deref(), Some("tries"), "{h:?}");
    }
    // The third refusal starts the ban: the reply names the penalty, retry_after its length.
    let h = hit(&mut c, &format!("RL.HIT login u NOW {}", t + 3));
    assert_eq!(h.refused_by.as_deref(), Some("PENALTY"), "{h:?}");
    assert_eq!(h.fields, [0, 3, 0, 1000, 11000]);
    // Banned: refused, the rest of the ban to wait; the bucket answers its state, untouched.
    let tokens_before = digest(&mut c, "login|tries|token|{u}");
    let h = hit(&mut c, &format!("RL.HIT login u NOW {}", t + 500));
    assert_eq!(h.fields, [0, 3, 0, 503, 10503]);
    assert_eq!(h.refused_by.as_deref(), Some("PENALTY"));
    assert_eq!(h.each[0][..3], [1, 1, 0], "COST 0: {h:?}");
    assert_eq!(digest(&mut c, "login|tries|token|{u}"), tokens_before);
    // The ban state is a key of its own, in the subject's slot, visible to RL.PEEK.
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK {BAN_KEY} NOW {}", t + 500)),
        [0, 3, 0, 503, 10503]
    );
    let pttl = int(&mut c, &["PTTL", BAN_KEY]);
    assert!((9_000..=11_003).contains(&pttl), "{pttl}");
    // Other subjects are not banned.
    assert_eq!(
        hit(&mut c, &format!("RL.HIT login v NOW {}", t + 500)).fields[0],
        1
    );
    let info = info_line(&mut c, "login");
    assert!(info.contains(",bans=1,banned=1"), "{info}");
    let top: Vec<(String, i64, i64)> =
        redis::from_redis_value(&line(&mut c, "RL.TOP POLICY login BANNED").unwrap()).unwrap();
    assert_eq!(top.first().map(|t| t.0.as_str()), Some("u"));
}

#[rstest]
fn bans_escalate_within_the_horizon_and_reset_after_it(server: Server) {
    let mut c = server.conn();
    ok(&mut c, LOGIN);
    let t = unix_ms();
    hit(&mut c, &format!("RL.HIT login u NOW {t}"));
    // Three refusals at `at` (by the bucket, empty for a minute) start a ban: its length.
    let ban_at = |c: &mut Connection, at: u64| -> u64 {
        let mut last = None;
        for _ in 0..3 {
            last = Some(hit(c, &format!("RL.HIT login u NOW {at}")));
        }
        let h = last.unwrap();
        assert_eq!(h.refused_by.as_deref(), Some("PENALTY"), "{h:?}");
        h.fields[3] as u64
    };
    // Each ban starting as the one before ends (within the horizon) lasts twice as long,
    // up to MAX; its last millisecond is still banned.
    let mut at = t + 1;
    for want in [1000, 2000, 4000, 4000] {
        assert_eq!(ban_at(&mut c, at), want);
        let last = hit(&mut c, &format!("RL.HIT login u NOW {}", at + want - 1));
        assert_eq!(
            (last.fields[3], last.refused_by.as_deref()),
            (1, Some("PENALTY"))
        );
        at += want;
    }
    // A quiet horizon (10 s after the last ban ended, to the millisecond): 1 s again.
    assert_eq!(ban_at(&mut c, at + 10_000), 1000);
}

#[rstest]
fn unban_and_del_lift_a_ban(server: Server) {
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET p PENALTY 1 60000 60000 a FIXED 1 60000",
    );
    hit(&mut c, "RL.HIT p u");
    let h = hit(&mut c, "RL.HIT p u");
    assert_eq!(h.refused_by.as_deref(), Some("PENALTY"));
    assert_eq!(int(&mut c, &["RL.POLICY", "UNBAN", "p", "u"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "p||penalty|{u}"]), 0);
    assert_eq!(int(&mut c, &["RL.POLICY", "UNBAN", "p", "u"]), 0);
    // Not banned: refused by its limiter again (which bans again).
    let h = hit(&mut c, "RL.HIT p u");
    assert_eq!(
        h.refused_by.as_deref(),
        Some("PENALTY"),
        "a refusal bans at once: {h:?}"
    );
    assert_eq!(int(&mut c, &["DEL", "p||penalty|{u}"]), 1);
    assert_eq!(
        hit(&mut c, "RL.HIT p u").refused_by.as_deref(),
        Some("PENALTY")
    );
    // UNBAN's key is the subject (cluster routing), read by COMMAND GETKEYS.
    let keys: Vec<String> =
        redis::from_redis_value(&line(&mut c, "COMMAND GETKEYS RL.POLICY UNBAN p u").unwrap())
            .unwrap();
    assert_eq!(keys, ["u"]);
}

#[rstest]
fn rl_penalty_is_a_command_of_its_own(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    assert_eq!(
        rl(&mut c, &format!("RL.PENALTY k 2 1000 500 NOW {t}")),
        [1, 2, 1, 0, 1000]
    );
    // The second starts the ban: allowed (counted), none left; then refused for 500 ms.
    // The key holds the ban's end for a horizon (MAX, the ban, by default) after it.
    assert_eq!(
        rl(&mut c, &format!("RL.PENALTY k 2 1000 500 NOW {}", t + 1)),
        [1, 2, 0, 0, 1000]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.PENALTY k 2 1000 500 NOW {}", t + 2)),
        [0, 2, 0, 499, 999]
    );
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.PENALTY k 2 1000 500 COST 0 NOW {}", t + 501)
        ),
        [1, 2, 2, 0, 500]
    );
}

#[rstest]
#[case(
    "RL.POLICY SET p PENALTY 0 1000 1000 a TOKEN 1 1000",
    "ERR refusals must be an integer from 1 to 4294967295 (limiter 'PENALTY')"
)]
#[case(
    "RL.POLICY SET p PENALTY 3 1000 1000 MAX 10 a TOKEN 1 1000",
    "ERR MAX must be at least ban_ms (limiter 'PENALTY')"
)]
#[case(
    "RL.POLICY SET p PENALTY 3 1000 1000 COST 2 a TOKEN 1 1000",
    "ERR a policy's penalty counts one refusal per refused hit: no COST (limiter 'PENALTY')"
)]
#[case("RL.POLICY SET p a TOKEN 1 1000 PENALTY TOKEN 1 1000", "ERR a limiter's name may not be a keyword of the policy grammar (a kind, an option, NOW, BLOCK, SHADOW), got 'PENALTY'")]
#[case(
    "RL.PENALTY k 3 1000",
    "ERR wrong number of arguments for 'rl.penalty' command"
)]
#[case(
    "RL.TOP BANNED",
    "ERR SHADOW and BANNED are a policy's: POLICY name SHADOW (or BANNED)"
)]
fn bad_input_is_refused_with_a_clear_error(#[case] l: &str, #[case] expected: &str) {
    let s = server();
    let mut c = s.conn();
    let words: Vec<&str> = l.split_whitespace().collect();
    let got = err(&mut c, &words);
    assert_eq!(got.to_lowercase(), expected.to_lowercase());
}

#[rstest]
fn replicas_reloads_and_restarts_keep_the_bans(server: Server) {
    let mut s = server;
    let mut c = s.conn();
    ok(
        &mut c,
        "RL.POLICY SET p PENALTY 2 60000 60000 a TOKEN 1 60000",
    );
    let replica = s.replica();
    let mut r = replica.conn();
    let t = unix_ms();
    for i in 0..4 {
        hit(&mut c, &format!("RL.HIT p u NOW {}", t + i));
    }
    line(&mut c, "WAIT 1 5000").unwrap();
    wait_until("the ban on the replica", 10, || {
        int(&mut r, &["EXISTS", "p||penalty|{u}"]) == 1
    });
    assert_eq!(
        text(&mut r, &["DEBUG", "DIGEST"]),
        text(&mut c, &["DEBUG", "DIGEST"])
    );
    assert_eq!(
        digest(&mut r, "p||penalty|{u}"),
        digest(&mut c, "p||penalty|{u}")
    );
    // UNBAN goes to the replica as DEL.
    assert_eq!(int(&mut c, &["RL.POLICY", "UNBAN", "p", "u"]), 1);
    line(&mut c, "WAIT 1 5000").unwrap();
    wait_until("the unban on the replica", 10, || {
        int(&mut r, &["EXISTS", "p||penalty|{u}"]) == 0
    });
    for i in 0..3 {
        hit(&mut c, &format!("RL.HIT p u NOW {}", t + 10 + i));
    }
    let before = digest(&mut c, "p||penalty|{u}");
    line(&mut c, "DEBUG RELOAD").unwrap();
    assert_eq!(digest(&mut c, "p||penalty|{u}"), before);
    s.save_and_restart();
    let mut c = s.conn();
    assert_eq!(digest(&mut c, "p||penalty|{u}"), before);
    let h = hit(&mut c, &format!("RL.HIT p u NOW {}", t + 20));
    assert_eq!(h.refused_by.as_deref(), Some("PENALTY"), "{h:?}");
}

#[test]
fn the_aof_and_its_rewrite_keep_bans_and_shadow_policies() {
    // Every write in the AOF before its reply (a crash follows; `everysec` may hold one
    // back while a fsync runs).
    let mut s = Server::start(crate::common::AOF_ALWAYS_NO_PREAMBLE);
    let mut c = s.conn();
    ok(
        &mut c,
        "RL.POLICY SET p PENALTY 2 60000 60000 MAX 240000 a TOKEN 1 60000 b SLIDE 1 60000 SHADOW",
    );
    let t = unix_ms();
    for i in 0..4 {
        hit(&mut c, &format!("RL.HIT p u NOW {}", t + i));
    }
    let keys = ["p||penalty|{u}", "p|a|token|{u}", "p|b|slide|{u}"];
    let state = |c: &mut Connection| -> Vec<String> {
        let mut v: Vec<String> = keys.iter().map(|k| digest(c, k)).collect();
        v.push(text(c, &["DEBUG", "DIGEST"]));
        v
    };
    let before = state(&mut c);
    assert_eq!(int(&mut c, &["EXISTS", keys[0]]), 1, "banned");
    // From the AOF's commands (each an effect), then from a rewrite without an RDB preamble
    // (RL.RESTORE of each key, the policy with the first key).
    s.crash_and_restart();
    let mut c = s.conn();
    assert_eq!(state(&mut c), before);
    rewrite_aof(&mut c);
    s.crash_and_restart();
    let mut c = s.conn();
    assert_eq!(state(&mut c), before);
    let words: Vec<String> =
        redis::from_redis_value(&line(&mut c, "RL.POLICY GET p").unwrap()).unwrap();
    assert_eq!(words.first().map(String::as_str), Some("PENALTY"));
}
