//! A file holding a value the module cannot read (written by another build, or damaged)
//! never takes the other keys with it: the load goes on, the value is kept as it is (saved,
//! rewritten, copied and digested as the same bytes), the log names its key, and commands
//! on it answer an error until it is deleted. A client's RESTORE of such a payload is
//! refused.

use crate::common::{
    dataset_digest, digest, err, info_field, int, rl, run, text, unix_ms, wait_until, Server,
};
use redis::Connection;

/// Sets up a token bucket `tk` whose encoding starts `3 2 <varint t>`, beside a string and a
/// readable limiter; returns `t`.
fn keys(c: &mut Connection) -> u64 {
    let t = unix_ms() + 86_400_000;
    run(c, &["SET", "important", "value"]).unwrap();
    rl(c, &format!("RL.TOKEN tk 123457 60000 NOW {t}"));
    rl(c, &format!("RL.SLIDE ok 10 60000 NOW {t}"));
    t
}

/// `bytes` with the kind byte of the encoding `3 2 <varint t>` changed to 9, a kind no build
/// knows: the loader refuses it.
fn unknown_kind(bytes: &[u8], t: u64) -> Vec<u8> {
    let mut pattern = vec![3u8, 2];
    crate::common::put_varint(&mut pattern, t);
    let at = bytes
        .windows(pattern.len())
        .position(|w| w == pattern)
        .expect("the token bucket's encoding in the file");
    let mut out = bytes.to_vec();
    out[at + 1] = 9;
    out
}

/// What the keys answer once `tk` could not be read: the others as before.
fn assert_kept(c: &mut Connection, server: &Server, t: u64) {
    assert_eq!(text(c, &["GET", "important"]), "value");
    assert_eq!(rl(c, &format!("RL.PEEK ok NOW {t}"))[2], 9);
    assert_eq!(text(c, &["TYPE", "tk"]), "ratelimit");
    for words in [
        vec!["RL.TOKEN", "tk", "10", "60000"],
        vec!["RL.PEEK", "tk"],
        vec!["RL.REFUND", "tk"],
    ] {
        let e = err(c, &words);
        assert!(
            e.starts_with("ERR the key holds a ratelimit value this server could not read")
                && e.contains("no such version for this kind")
                && e.contains("DEL the key"),
            "{words:?}: {e}"
        );
    }
    let e = err(
        c,
        &[
            "RL.ALL", "2", "ok", "tk", "SLIDE", "10", "60000", "TOKEN", "1", "1",
        ],
    );
    assert!(
        e.contains("could not read") && e.contains("(key 'tk')"),
        "{e}"
    );
    // The count falls when a value is freed, which the lazy-free thread may do after the
    // command that let it go (a flush, a DEL): the count a client sees settles then.
    wait_until("one unreadable value held", 10, || {
        info_field(c, "ratelimit_unreadable_keys") == 1
    });
    assert!(
        server.log().contains(
            "key 'tk' holds a value this build cannot read (no such version for this kind): kept as it is"
        ),
        "{}",
        server.log()
    );
}

/// The kept value goes through every way back as its own bytes; a client cannot RESTORE
/// it elsewhere; DEL removes it.
fn assert_kept_through_reloads(c: &mut Connection, t: u64, server: &Server) {
    let before = dataset_digest(c);
    let one = digest(c, "tk");
    assert_eq!(run(c, &["DEBUG", "RELOAD"]).unwrap(), redis::Value::Okay);
    assert_eq!(dataset_digest(c), before);
    assert_eq!(int(c, &["DBSIZE"]), 3);
    assert_kept(c, server, t);
    // COPY keeps the bytes; a client's RESTORE of them is refused.
    assert_eq!(int(c, &["COPY", "tk", "tk2"]), 1);
    assert_eq!(digest(c, "tk2"), one);
    assert_eq!(info_field(c, "ratelimit_unreadable_keys"), 2);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("tk").query(c).unwrap();
    let e = redis::cmd("RESTORE")
        .arg("tk3")
        .arg(0)
        .arg(dump)
        .query::<redis::Value>(c)
        .unwrap_err();
    assert!(e.to_string().contains("Bad data format"), "{e}");
    assert_eq!(int(c, &["EXISTS", "tk3"]), 0);
    assert_eq!(int(c, &["DEL", "tk", "tk2"]), 2);
    wait_until("the unreadable values freed", 10, || {
        info_field(c, "ratelimit_unreadable_keys") == 0
    });
    // The key starts afresh.
    assert_eq!(rl(c, &format!("RL.TOKEN tk 10 60000 NOW {t}"))[0], 1);
}

#[test]
fn an_unreadable_value_in_the_rdb_keeps_the_other_keys() {
    let mut server = Server::start(&["--repl-diskless-sync-delay", "0"]);
    let mut c = server.conn();
    let t = keys(&mut c);
    run(&mut c, &["SAVE"]).unwrap();
    let path = server.path("dump.rdb");
    let rdb = std::fs::read(&path).unwrap();
    let mut damaged = unknown_kind(&rdb, t);
    // A checksum of 0 is not checked.
    let n = damaged.len();
    damaged[n - 8..].fill(0);
    std::fs::write(&path, damaged).unwrap();
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["DBSIZE"]), 3);
    assert_kept(&mut c, &server, t);
    // A replica's full sync takes it as it is.
    let replica = server.replica();
    let mut r = replica.conn();
    assert_eq!(digest(&mut r, "tk"), digest(&mut c, "tk"));
    assert_kept_through_reloads(&mut c, t, &server);
}

#[test]
fn an_unreadable_payload_in_the_aof_keeps_the_other_keys() {
    let server = Server::start(&["--appendonly", "yes"]);
    let mut c = server.conn();
    let t = keys(&mut c);
    // The AOF's rewrite holds each key as RL.RESTORE of its encoding (no RDB preamble):
    // damage the token bucket's there.
    run(&mut c, &["CONFIG", "SET", "aof-use-rdb-preamble", "no"]).unwrap();
    run(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_until("the AOF rewrite", 30, || {
        let info = text(&mut c, &["INFO", "persistence"]);
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
    let dir = server.path("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).unwrap();
    let base = manifest
        .lines()
        .find(|l| l.ends_with("type b"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("a base AOF");
    let path = dir.join(base);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, unknown_kind(&bytes, t)).unwrap();
    assert_eq!(
        run(&mut c, &["DEBUG", "LOADAOF"]).unwrap(),
        redis::Value::Okay
    );
    assert_eq!(int(&mut c, &["DBSIZE"]), 3);
    assert_kept(&mut c, &server, t);
    // The same payload from a client is refused, naming why.
    let payload = {
        let mut p = vec![3u8, 9];
        crate::common::put_varint(&mut p, t);
        p
    };
    let e = redis::cmd("RL.RESTORE")
        .arg("tk4")
        .arg(payload)
        .query::<redis::Value>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("invalid limiter payload"), "{e}");
    assert_kept_through_reloads(&mut c, t, &server);
}
