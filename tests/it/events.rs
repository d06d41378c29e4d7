//! Keyspace notifications: every change by an RL.* command emits a module event (class `d`)
//! named after the command in lower case, a key a command removes emits `del`, and refused
//! calls emit nothing.

use std::time::Duration;

use crate::common::{rl, run, server, Server};
use rstest::rstest;

/// `(event, key)` pairs received on `__keyevent@0__:*` until `n` have arrived.
fn events(ps: &mut redis::PubSub, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|_| {
            let msg = ps.get_message().expect("a keyspace event in time");
            let channel = msg.get_channel_name().to_string();
            let event = channel.trim_start_matches("__keyevent@0__:").to_string();
            (event, msg.get_payload::<String>().expect("the key name"))
        })
        .collect()
}

#[rstest]
fn changes_emit_module_events_and_deletions_emit_del(server: Server) {
    let mut c = server.conn();
    run(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Egd"]).unwrap();
    let mut sub = server.conn();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("__keyevent@0__:*").unwrap();

    rl(&mut c, "RL.SLIDE s 1 60000");
    rl(&mut c, "RL.SLIDE s 1 60000"); // refused: no event
    rl(&mut c, "RL.TOKEN t 1 60000");
    rl(&mut c, "RL.LEAKY l 1 60000");
    rl(&mut c, "RL.FIXED f 1 60000");
    rl(&mut c, "RL.SUBWIN w 1 60000 1000");
    rl(&mut c, "RL.SLIDE s 1 60000 COST 0"); // a read: no event
    rl(&mut c, "RL.REFUND s COST 1"); // empties and deletes the key
                                      // A fixed window in the module's own encoding (what AOF rewrite emits).
    let payload: Vec<u8> = vec![1, 4, 232, 7, 200, 220, 3, 3, 10, 224, 212, 3, 1];
    let ok: String = redis::cmd("RL.RESTORE")
        .arg("r")
        .arg(payload)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let got = events(&mut ps, 8);
    let want: Vec<(String, String)> = [
        ("rl.slide", "s"),
        ("rl.token", "t"),
        ("rl.leaky", "l"),
        ("rl.fixed", "f"),
        ("rl.subwin", "w"),
        ("rl.refund", "s"),
        ("del", "s"),
        ("rl.restore", "r"),
    ]
    .iter()
    .map(|(e, k)| (e.to_string(), k.to_string()))
    .collect();
    assert_eq!(got, want);
}

#[rstest]
fn a_limiter_that_empties_emits_expired(server: Server) {
    let mut c = server.conn();
    run(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Exd"]).unwrap();
    let mut sub = server.conn();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("__keyevent@0__:*").unwrap();
    rl(&mut c, "RL.TOKEN brief 10 100");
    assert_eq!(
        events(&mut ps, 2),
        [
            ("rl.token".to_string(), "brief".to_string()),
            ("expired".to_string(), "brief".to_string())
        ]
    );
}
