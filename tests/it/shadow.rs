//! Shadow limiters (`SHADOW` in `RL.POLICY SET`): they decide and record as they would
//! enforced, never refuse a hit, and are told apart in the reply, `INFO` and `RL.TOP`; a
//! policy switched between shadow and enforced keeps its keys' history, under load too;
//! replicas, digests and reloads agree.

use std::time::{Duration, Instant};

use crate::common::policy::{alternating, hit, info_line, line, ok, Hit};
use crate::common::{digest, err, rl, server, text, unix_ms, Server};
use redis::Connection;
use rstest::rstest;

/// RL.TOP's names, heaviest first.
fn top_names(c: &mut Connection, l: &str) -> Vec<String> {
    let v: Vec<(String, i64, i64)> = redis::from_redis_value(&line(c, l).unwrap()).unwrap();
    v.into_iter().map(|(name, ..)| name).collect()
}

#[rstest]
fn a_shadow_limiter_never_refuses_nor_hides_an_enforced_refusal(server: Server) {
    let mut c = server.conn();
    // The same enforced limiter twice, one policy with a shadow limiter beside it, one
    // without; the shadow limiter's own command on a key of its own beside them.
    ok(
        &mut c,
        "RL.POLICY SET p enf TOKEN 4 60000 new FIXED 2 10000 SHADOW",
    );
    ok(&mut c, "RL.POLICY SET q enf TOKEN 4 60000");
    let t = unix_ms();
    let mut would = 0;
    for i in 0..12 {
        let now = t + i * 1500;
        let h = hit(&mut c, &format!("RL.HIT p s NOW {now}"));
        let alone = hit(&mut c, &format!("RL.HIT q s NOW {now}"));
        // The call is what the enforced limiter decides, answered with its fields.
        assert_eq!(
            (h.fields, &h.refused_by),
            (alone.fields, &alone.refused_by),
            "{i}: {h:?}"
        );
        assert_eq!(h.each[0], alone.each[0], "{i}");
        // The shadow limiter records as its own command would, only when the call is
        // allowed; in a refused call, it answers its refusal, or its state as it stands
        // when it would have allowed.
        let peek = rl(&mut c, &format!("RL.FIXED own 2 10000 COST 0 NOW {now}"));
        let refuses = peek[2] < 1;
        let own = match alone.fields[0] == 1 || refuses {
            true => rl(&mut c, &format!("RL.FIXED own 2 10000 NOW {now}")),
            false => peek,
        };
        assert_eq!(h.each[1], own.to_vec(), "{i}: {h:?}");
        would += i64::from(refuses);
        assert_eq!(
            h.would_refuse,
            Some(refuses.then(|| "new".to_string())),
            "{i}"
        );
        // A policy without shadow limiters answers as before: no name after the entries.
        assert_eq!(alone.would_refuse, None);
    }
    assert!(would >= 3, "the shadow limiter would have refused: {would}");
    let info = info_line(&mut c, "p");
    assert!(
        info.contains(&format!(",would_refuse={would},shadow=-/{would}")),
        "{info}"
    );
    assert!(!info_line(&mut c, "q").contains("would_refuse"));
    assert_eq!(top_names(&mut c, "RL.TOP POLICY p SHADOW"), ["s"]);
}

#[rstest]
fn a_policy_all_in_shadow_allows_every_hit_and_answers_as_if_each_allowed(server: Server) {
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET p SHADOW a TOKEN 2 60000 b SLIDE 3 60000",
    );
    let words: Vec<String> =
        redis::from_redis_value(&line(&mut c, "RL.POLICY GET p").unwrap()).unwrap();
    assert_eq!(words.join(" "), "SHADOW a TOKEN 2 60000 b SLIDE 3 60000");
    let t = unix_ms();
    let mut seen: Vec<Hit> = Vec::new();
    for i in 0..4 {
        let h = hit(&mut c, &format!("RL.HIT p s NOW {}", t + i));
        assert_eq!(h.fields[0], 1, "{h:?}");
        assert_eq!(h.fields[3], 0, "no wait: {h:?}");
        assert_eq!(h.refused_by, None);
        seen.push(h);
    }
    // The bucket held 2: the third and fourth hits would have been refused by it; the
    // log holds 3, so the fourth by both, and the reply names the one that would wait
    // longest (as it names the refusing one).
    let names: Vec<_> = seen.iter().map(|h| h.would_refuse.clone()).collect();
    assert_eq!(
        names,
        [
            Some(None),
            Some(None),
            Some(Some("a".into())),
            Some(Some("b".into()))
        ]
    );
    assert_eq!((seen[3].each[0][0], seen[3].each[1][0]), (0, 0));
    // Counted per hit, and per limiter that would have refused it.
    let info = info_line(&mut c, "p");
    assert!(info.contains("refused=0"), "{info}");
    assert!(info.contains(",would_refuse=2,shadow=2/1"), "{info}");
    // A policy of one shadow limiter (run as its own command).
    ok(&mut c, "RL.POLICY SET one SHADOW a TOKEN 1 60000");
    let first = hit(&mut c, &format!("RL.HIT one s NOW {t}"));
    let second = hit(&mut c, &format!("RL.HIT one s NOW {}", t + 1));
    assert_eq!((first.fields[0], &first.would_refuse), (1, &Some(None)));
    assert_eq!(
        (second.fields[0], &second.would_refuse),
        (1, &Some(Some("a".into())))
    );
    assert_eq!(second.each[0][0], 0, "its own fields say it refuses");
}

#[rstest]
fn switching_shadow_on_and_off_keeps_the_history(server: Server) {
    let mut c = server.conn();
    ok(&mut c, "RL.POLICY SET p a TOKEN 3 60000 SHADOW");
    let t = unix_ms();
    for i in 0..5 {
        let h = hit(&mut c, &format!("RL.HIT p s NOW {}", t + i));
        assert_eq!(h.fields[0], 1);
    }
    // Enforced now: the bucket it emptied in shadow refuses at once.
    ok(&mut c, "RL.POLICY SET p a TOKEN 3 60000");
    let h = hit(&mut c, &format!("RL.HIT p s NOW {}", t + 6));
    assert_eq!((h.fields[0], h.refused_by.as_deref()), (0, Some("a")));
    assert_eq!(h.would_refuse, None);
    // And in shadow again, the same bucket is told as refusing, the hit allowed.
    ok(&mut c, "RL.POLICY SET p SHADOW a TOKEN 3 60000");
    let h = hit(&mut c, &format!("RL.HIT p s NOW {}", t + 7));
    assert_eq!(h.fields[0], 1);
    assert_eq!(h.would_refuse, Some(Some("a".into())));
}

#[rstest]
fn a_policy_switched_under_load_answers_by_one_definition_or_the_other(server: Server) {
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET p a TOKEN 5 1000 b SLIDE 50 1000 SHADOW",
    );
    let changer = alternating(
        server.port,
        "RL.POLICY SET p a TOKEN 5 1000 b SLIDE 50 1000",
        "RL.POLICY SET p a TOKEN 5 1000 b SLIDE 50 1000 SHADOW",
        1500,
    );
    let (mut shadowed, mut enforced, mut refused) = (0, 0, 0);
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut i = 0;
    while Instant::now() < deadline {
        let h = hit(&mut c, &format!("RL.HIT p s{}", i % 4));
        i += 1;
        match &h.would_refuse {
            // Shadow: only the bucket decides.
            Some(would) => {
                shadowed += 1;
                assert_eq!(h.fields[0], h.each[0][0], "{h:?}");
                if let Some(name) = would {
                    assert_eq!((name.as_str(), h.each[1][0]), ("b", 0), "{h:?}");
                }
            }
            // Enforced: both do.
            None => {
                enforced += 1;
                let both = h.each[0][0] == 1 && h.each[1][0] == 1;
                assert_eq!(h.fields[0] == 1, both, "{h:?}");
            }
        }
        refused += i64::from(h.fields[0] == 0);
    }
    let changes = changer.join().unwrap();
    assert!(changes > 10, "{changes}");
    assert!(shadowed > 0 && enforced > 0, "{shadowed} {enforced}");
    assert!(refused > 0, "the buckets refused some: {refused}");
}

#[rstest]
#[case(
    "RL.POLICY SET p SHADOW a b",
    "ERR expected a limiter kind (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE, THROTTLE), got 'b' (limiter 'a')"
)]
#[case(
    "RL.POLICY SET p a TOKEN 1 1000 SHADOW SHADOW",
    "ERR a limiter's name may not be a keyword of the policy grammar (a kind, an option, NOW, BLOCK, SHADOW), got 'SHADOW'"
)]
#[case(
    "RL.POLICY SET p a TOKEN 1 1000 SHADOW TOKEN 1 1000",
    "ERR a limiter's name may not be a keyword of the policy grammar (a kind, an option, NOW, BLOCK, SHADOW), got 'SHADOW'"
)]
#[case(
    "RL.TOP SHADOW",
    "ERR SHADOW and BANNED are a policy's: POLICY name SHADOW (or BANNED)"
)]
#[case("RL.TOP POLICY nope SHADOW", "ERR no policy named 'nope'")]
fn bad_input_is_refused_with_a_clear_error(#[case] l: &str, #[case] expected: &str) {
    let s = server();
    let mut c = s.conn();
    let words: Vec<&str> = l.split_whitespace().collect();
    assert_eq!(err(&mut c, &words), expected);
}

#[rstest]
fn replicas_and_reloads_agree_on_shadow_policies(server: Server) {
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET p a TOKEN 3 60000 b FIXED 1 60000 SHADOW",
    );
    let replica = server.replica();
    let mut r = replica.conn();
    let t = unix_ms();
    for i in 0..10 {
        hit(&mut c, &format!("RL.HIT p s{} NOW {}", i % 3, t + i));
    }
    line(&mut c, "WAIT 1 5000").unwrap();
    assert_eq!(
        text(&mut r, &["DEBUG", "DIGEST"]),
        text(&mut c, &["DEBUG", "DIGEST"])
    );
    assert_eq!(
        digest(&mut r, "p|b|fixed|{s0}"),
        digest(&mut c, "p|b|fixed|{s0}")
    );
    let before = line(&mut c, "RL.POLICY GET p").unwrap();
    let digest_before = text(&mut c, &["DEBUG", "DIGEST"]);
    line(&mut c, "DEBUG RELOAD").unwrap();
    assert_eq!(line(&mut c, "RL.POLICY GET p").unwrap(), before);
    assert_eq!(text(&mut c, &["DEBUG", "DIGEST"]), digest_before);
    let h = hit(&mut c, &format!("RL.HIT p s0 NOW {}", t + 20));
    assert_eq!(h.would_refuse, Some(Some("b".into())), "{h:?}");
}
