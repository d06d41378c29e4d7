//! Changing parameters never erases history a window still counts (issue 9, part 2): one
//! key called with "3 per 10 s" and "5 per 1 s", as two services sharing a key, or a config
//! rollout and its rollback, would. For every kind, through the real commands on the `NOW`
//! timeline: three calls fill 3 per 10 s, one call with 5 per 1 s is allowed, and the next
//! 3 per 10 s calls must still be refused.

use crate::common::{int, rl, server, unix_ms, Server};
use rstest::rstest;

/// A time on a whole second, a little ahead of the server's clock, so that keys stay alive.
fn start() -> u64 {
    unix_ms() / 1000 * 1000 + 1000
}

#[rstest]
fn slide_a_shorter_window_keeps_what_the_longer_one_counts(server: Server) {
    let mut c = server.conn();
    let t = start();
    let long = |ms: u64| format!("RL.SLIDE k 3 10000 NOW {}", t + ms);
    for ms in [0, 100, 200] {
        assert_eq!(rl(&mut c, &long(ms))[0], 1);
    }
    // The 1 s window counts only its own second; the limiter is back to empty (and the key
    // expires, its PTTL equal to reset_after_ms) once the 10 s window lets go of +200.
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE k 5 1000 NOW {}", t + 1250)),
        [1, 5, 4, 0, 8950]
    );
    // The key lives until the 10 s window lets go of the record at +200.
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]), (t + 10_200) as i64);
    // Before: both allowed, 5 calls of 3 per 10 s in 1.5 s.
    assert_eq!(rl(&mut c, &long(1300)), [0, 3, 0, 8800, 9950]);
    assert_eq!(rl(&mut c, &long(1500)), [0, 3, 0, 8600, 9750]);
}

#[rstest]
fn slide_frees_what_no_window_counts_once_the_longer_one_has_passed(server: Server) {
    let mut c = server.conn();
    let t = start();
    for ms in [0, 100, 200] {
        rl(&mut c, &format!("RL.SLIDE k 3 10000 NOW {}", t + ms));
    }
    for ms in (2000..=10_000).step_by(1000).chain([10_300]) {
        let reply = rl(&mut c, &format!("RL.SLIDE k 5 1000 NOW {}", t + ms));
        assert_eq!(reply[0], 1, "at +{ms}");
    }
    // The retention ended at +10200: the key is back to the 1 s window's expiry, and the
    // log holds only the last second (the calls at +10000 and +10300).
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]), (t + 11_300) as i64);
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.SLIDE k 3 10000 COST 0 NOW {}", t + 10_300)
        ),
        [1, 3, 1, 0, 10_000]
    );
}

#[rstest]
fn subwin_a_shorter_window_keeps_what_the_longer_one_counts(server: Server) {
    let mut c = server.conn();
    let t = start();
    let long = |ms: u64| format!("RL.SUBWIN k 3 10000 1000 NOW {}", t + ms);
    for ms in [0, 100, 200] {
        assert_eq!(rl(&mut c, &long(ms))[0], 1);
    }
    // Empty (and expiring) once the 10 s ring lets go of the units of +0..1000.
    assert_eq!(
        rl(&mut c, &format!("RL.SUBWIN k 5 1000 1000 NOW {}", t + 2500)),
        [1, 5, 4, 0, 8499]
    );
    // The ring still spans 10 s (ten more header words for the retention, 11 counters: 104
    // bytes, in a 112-byte allocation), until the units of +0..1000 have left it. (MEMORY
    // USAGE adds the object and module value, 32, and the name and its entry, 32.)
    let wide = int(&mut c, &["MEMORY", "USAGE", "k", "SAMPLES", "0"]);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]), (t + 10_999) as i64);
    // Before: the ring shrank to 1 s and dropped them; both were allowed.
    assert_eq!(rl(&mut c, &long(2600)), [0, 3, 0, 8066, 10_399]);
    assert_eq!(rl(&mut c, &long(2700))[0], 0);
    // Once the 10 s window has let go of them, the ring is the 1 s window's again.
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.SUBWIN k 5 1000 1000 NOW {}", t + 11_000)
        )[0],
        1
    );
    // Now a block of 4 * (5 + 2) bytes, in a 32-byte allocation: 80 bytes less. (The rest of
    // MEMORY USAGE, the name and its entry, differs between servers: Valkey 8 counts less.)
    let narrow = int(&mut c, &["MEMORY", "USAGE", "k", "SAMPLES", "0"]);
    assert_eq!(wide - narrow, 112 - 32);
}

#[rstest]
fn fixed_a_window_counts_its_units_for_the_longest_window_used_in_it(server: Server) {
    let mut c = server.conn();
    let t = start();
    let long = |k: &str, ms: u64| format!("RL.FIXED {k} 3 10000 NOW {}", t + ms);
    let short = |k: &str, ms: u64| format!("RL.FIXED {k} 5 1000 NOW {}", t + ms);
    // The order: the 10 s window is open, and the 1 s call keeps its end.
    for ms in [0, 100, 200] {
        assert_eq!(rl(&mut c, &long("a", ms))[0], 1);
    }
    assert_eq!(rl(&mut c, &short("a", 1250)), [1, 5, 1, 0, 8750]);
    assert_eq!(rl(&mut c, &long("a", 1300)), [0, 3, 0, 8700, 8700]);
    // The other way round: the 1 s call opens the window, the 10 s calls join it and keep
    // it open for their 10 s. Before: it ended at +1000 and 3 more were allowed.
    assert_eq!(rl(&mut c, &short("b", 0)), [1, 5, 4, 0, 1000]);
    assert_eq!(rl(&mut c, &long("b", 100)), [1, 3, 1, 0, 9900]);
    assert_eq!(rl(&mut c, &long("b", 200)), [1, 3, 0, 0, 9800]);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "b"]), (t + 10_000) as i64);
    assert_eq!(rl(&mut c, &long("b", 1000)), [0, 3, 0, 9000, 9000]);
    assert_eq!(rl(&mut c, &long("b", 1500)), [0, 3, 0, 8500, 8500]);
}

/// Buckets carry the units owed across a change, re-timed at the new rate.
#[rstest]
#[case::token("RL.TOKEN k 3 10000", "RL.TOKEN k 5 1000")]
#[case::leaky(
    "RL.LEAKY k 3 10000 BURST 3 MAXDELAY 0",
    "RL.LEAKY k 5 1000 BURST 5 MAXDELAY 0"
)]
fn buckets_carry_the_units_owed(server: Server, #[case] long: &str, #[case] short: &str) {
    let mut c = server.conn();
    let t = start();
    for ms in [0, 100, 200] {
        assert_eq!(rl(&mut c, &format!("{long} NOW {}", t + ms))[0], 1);
    }
    // 2.625 units owed, repaid at 5 per second from here.
    assert_eq!(
        rl(&mut c, &format!("{short} NOW {}", t + 1250)),
        [1, 5, 1, 0, 725]
    );
    // 3.375 owed at +1300, at one per 3.33 s again.
    assert_eq!(
        rl(&mut c, &format!("{long} NOW {}", t + 1300)),
        [0, 3, 0, 4584, 11_250]
    );
    assert_eq!(rl(&mut c, &format!("{long} NOW {}", t + 1500))[0], 0);
}

/// Issue 9's review: one 10 s call, then 5 s and 1 s calls alternating every 300 ms. Once
/// the 10 s window has passed, the log holds only what the 5 s window counts: a 10 s call
/// then sees 17 records (+10300..+15000), not the 34 of the last 10 s.
#[rstest]
fn slide_alternating_shorter_windows_let_an_old_longer_one_go(server: Server) {
    let mut c = server.conn();
    let t = start();
    assert_eq!(rl(&mut c, &format!("RL.SLIDE k 1000 10000 NOW {t}"))[0], 1);
    for i in 1..=50u64 {
        let window = if i % 2 == 1 { 5000 } else { 1000 };
        let call = format!("RL.SLIDE k 1000 {window} NOW {}", t + 300 * i);
        assert_eq!(rl(&mut c, &call)[0], 1, "call {i}");
    }
    let peek = format!("RL.SLIDE k 1000 10000 COST 0 NOW {}", t + 15_000);
    assert_eq!(rl(&mut c, &peek)[2], 1000 - 17);
    // The key lives while the 5 s window (last used at +14700) may count a record.
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "k"]),
        (t + 14_700 + 5000) as i64
    );
}
