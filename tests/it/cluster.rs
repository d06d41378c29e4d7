//! Redis Cluster: three primaries and three replicas, each with the module. Every RL.* command
//! takes one key, so a cluster client routes it like any single-key command; hash-tagged keys
//! share a slot and go through one MULTI, one script or one RL.ALL (other keys get
//! CROSSSLOT); a slot moves with its limiters;
//! replicas hold the primaries' limiters, and a failover keeps every limiter the promoted
//! replica had received.
//! The cluster, the limiters and the pipelines are in tests/it/common/cluster.rs.

use std::collections::HashMap;
use std::time::Instant;

use crate::common::cluster::{
    at, client, cluster_run, cmd, fail_over, five, shard_of, shards, single_run, wait_for_replica,
    Cluster, Kind, Limiter, Shard,
};
use crate::common::{int, run, text, unix_ms, wait_until, Server};
use redis::cluster::ClusterConnection;
use redis::cluster_routing::get_slot;
use redis::{Connection, Value};
use rstest::rstest;

/// Limiter keys spread over the slots.
const KEYS: usize = 10_000;

#[rstest]
fn limiters_route_replicate_and_survive_a_failover() {
    let started = Instant::now();
    let cluster = Cluster::start();
    let map = shards(&mut cluster.conn(cluster.nodes[0].port));
    eprintln!("cluster up in {:?}: {map:?}", started.elapsed());
    let primaries: Vec<u16> = map.iter().map(|s| s.primary).collect();
    let mut c = client(&primaries);
    // The same calls also go to a single server with the module: every reply must match.
    let single = Server::start(&[]);
    let mut s = single.conn();
    let t = unix_ms();
    let limiters: Vec<Limiter> = (0..KEYS).map(Limiter::new).collect();

    // Every kind of limiter, through the cluster client: the replies worked out by hand.
    let (requests, expected): (Vec<_>, Vec<_>) = limiters
        .iter()
        .flat_map(|l| (0..l.calls).map(move |j| (l.request(t, j), (l.kind, l.expected(t, j)))))
        .unzip();
    let timer = Instant::now();
    let got = cluster_run(&mut c, &requests);
    eprintln!("{} requests in {:?}", requests.len(), timer.elapsed());
    let reference = single_run(&mut s, &requests);
    let mut refused = HashMap::new();
    for (i, words) in requests.iter().enumerate() {
        let what = words.join(" ");
        let reply = five(&what, &got[i]).unwrap_or_else(|| panic!("{what}: nil"));
        let (kind, want) = expected[i];
        if let Some(want) = want {
            assert_eq!(reply, want, "{what}");
        }
        assert_eq!(
            Some(reply),
            five(&what, &reference[i]),
            "{what}: single server"
        );
        *refused.entry(kind).or_insert(0) += usize::from(reply[0] == 0);
    }
    for kind in [Kind::Slide, Kind::Subwin, Kind::Token, Kind::Fixed] {
        assert!(refused[&kind] > 0, "no {kind:?} refused");
    }

    // Refunds on a third of the keys (some become empty and go), then a peek at every key.
    let refunds: Vec<Vec<String>> = (limiters.iter().step_by(3))
        .map(|l| at(&["RL.REFUND", &l.key], t + 10))
        .collect();
    let peeks: Vec<Vec<String>> = (limiters.iter())
        .map(|l| at(&["RL.PEEK", &l.key], t + 20))
        .collect();
    let mut before = Vec::new();
    for batch in [&refunds, &peeks] {
        let got = cluster_run(&mut c, batch);
        let reference = single_run(&mut s, batch);
        for (i, words) in batch.iter().enumerate() {
            let what = words.join(" ");
            assert_eq!(five(&what, &got[i]), five(&what, &reference[i]), "{what}");
        }
        before = got;
    }
    let alive: Vec<bool> = before.iter().map(|v| *v != Value::Nil).collect();
    let gone = alive.iter().filter(|a| !**a).count();
    assert!(
        gone > 0 && gone < KEYS / 3,
        "{gone} keys emptied by refunds"
    );

    keys_live_on_their_slots_primary(&cluster, &map, &limiters, &alive);
    let i = (0..KEYS).find(|&i| alive[i]).expect("a live key");
    redirects(&cluster, &map, &limiters[i].key, &peeks[i], &before[i]);
    hash_tags(&cluster, &map, &mut c);
    rl_all_in_one_slot(&cluster, &map, &mut c);
    reshard_one_slot(&cluster, &map, &limiters, &before, &mut c, t + 20);
    leases_route(&cluster, &map, &mut c, &mut s);

    // Every replica has everything its primary wrote.
    for shard in &map {
        let mut p = cluster.conn(shard.primary);
        wait_for_replica(&mut p);
        assert_eq!(
            text(&mut cluster.conn(shard.replica), &["DEBUG", "DIGEST"]),
            text(&mut p, &["DEBUG", "DIGEST"]),
            "{shard:?}"
        );
    }

    // Fail the primary of a shard: every limiter answers as before, those of that shard too.
    let failed = map[0].clone();
    let survivors = fail_over(&cluster, &failed);
    let mut c = client(&survivors);
    let after = cluster_run(&mut c, &peeks);
    for (i, words) in peeks.iter().enumerate() {
        let what = words.join(" ");
        assert_eq!(
            five(&what, &after[i]),
            five(&what, &before[i]),
            "{what} after the failover"
        );
    }
    let on_failed: Vec<&Limiter> = (limiters.iter().zip(&alive))
        .filter(|(l, a)| **a && failed.owns(get_slot(l.key.as_bytes())))
        .map(|(l, _)| l)
        .collect();
    assert!(
        on_failed.len() > KEYS / 5,
        "{} keys on the failed shard",
        on_failed.len()
    );

    // And they go on from there: the next request on each key of that shard gets the reply
    // the single server (which saw the same history) gives; full limiters still refuse.
    let next: Vec<Vec<String>> = on_failed.iter().map(|l| l.request(t, 30)).collect();
    let got = cluster_run(&mut c, &next);
    let reference = single_run(&mut s, &next);
    let mut refused = 0;
    for (i, words) in next.iter().enumerate() {
        let what = words.join(" ");
        let reply = five(&what, &got[i]);
        assert_eq!(
            reply,
            five(&what, &reference[i]),
            "{what} after the failover"
        );
        refused += usize::from(reply.is_some_and(|r| r[0] == 0));
    }
    assert!(refused > 0, "no limiter of the failed shard was full");
    eprintln!("total {:?}", started.elapsed());
}

/// Each live key is on the primary that owns its slot, and only there; every primary holds a
/// share. The test computes slots as the client does (checked against `CLUSTER KEYSLOT`).
fn keys_live_on_their_slots_primary(
    cluster: &Cluster,
    map: &[Shard],
    limiters: &[Limiter],
    alive: &[bool],
) {
    let mut c = cluster.conn(map[0].primary);
    for l in limiters.iter().step_by(97) {
        let slot = int(&mut c, &["CLUSTER", "KEYSLOT", &l.key]);
        assert_eq!(slot, i64::from(get_slot(l.key.as_bytes())), "{}", l.key);
    }
    for shard in map {
        let mine: Vec<&Limiter> = (limiters.iter().zip(alive))
            .filter(|(l, a)| **a && shard.owns(get_slot(l.key.as_bytes())))
            .map(|(l, _)| l)
            .collect();
        assert!(mine.len() > KEYS / 5, "{shard:?}: {} keys", mine.len());
        let mut p = cluster.conn(shard.primary);
        assert_eq!(int(&mut p, &["DBSIZE"]), mine.len() as i64, "{shard:?}");
        let mut pipe = redis::pipe();
        for l in &mine {
            pipe.cmd("EXISTS").arg(&l.key);
        }
        let exists: Vec<i64> = pipe.query(&mut p).expect("EXISTS");
        assert!(exists.iter().all(|e| *e == 1), "{shard:?}");
    }
}

/// Sent straight to a node, a limiter command for a key of another node gets MOVED like any
/// keyed command; a replica redirects writes, and answers RL.PEEK (read-only) after
/// READONLY, with what its primary answered (`peeked`).
fn redirects(cluster: &Cluster, map: &[Shard], key: &str, peek: &[String], peeked: &Value) {
    let slot = get_slot(key.as_bytes());
    let owner = shard_of(map, slot);
    let other = map.iter().find(|s| !s.owns(slot)).expect("another shard");
    let e = run(
        &mut cluster.conn(other.primary),
        &["RL.SLIDE", key, "3", "600000"],
    )
    .expect_err("a redirect");
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    let to = format!("{slot} 127.0.0.1:{}", owner.primary);
    assert_eq!(e.detail(), Some(to.as_str()));

    wait_for_replica(&mut cluster.conn(owner.primary));
    let mut r = cluster.conn(owner.replica);
    let peek: Vec<&str> = peek.iter().map(String::as_str).collect();
    let e = run(&mut r, &peek).expect_err("a redirect before READONLY");
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    run(&mut r, &["READONLY"]).expect("READONLY");
    // Valkey 8.0 acknowledged WAIT before it served the write on the replica in about one
    // run of three here; the replica still gets the primary's answer, a moment later.
    let mut answer = Value::Nil;
    wait_until("the replica to hold the key", 5, || {
        answer = run(&mut r, &peek).expect("RL.PEEK on the replica");
        answer != Value::Nil
    });
    assert_eq!(
        five(key, &answer),
        five(key, peeked),
        "{key} on the replica"
    );
    let e = run(&mut r, &["RL.SLIDE", key, "3", "600000"]).expect_err("a redirect");
    assert_eq!(
        e.code(),
        Some("MOVED"),
        "a replica sends writes to its primary: {e}"
    );
}

/// Resharding, as `redis-cli --cluster reshard` does it: a slot holding limiters moves from
/// the second primary to the third (`SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE`, `SETSLOT NODE`).
/// `MIGRATE` carries each key with DUMP/RESTORE: it answers as before (`peeked` at `now`).
fn reshard_one_slot(
    cluster: &Cluster,
    map: &[Shard],
    limiters: &[Limiter],
    peeked: &[Value],
    c: &mut ClusterConnection,
    now: u64,
) {
    let (from, to) = (map[1].primary, map[2].primary);
    let (mut src, mut dst) = (cluster.conn(from), cluster.conn(to));
    let i = (0..limiters.len())
        .find(|&i| peeked[i] != Value::Nil && map[1].owns(get_slot(limiters[i].key.as_bytes())))
        .expect("a live key on the second shard");
    let key = &limiters[i].key;
    let slot = get_slot(key.as_bytes()).to_string();
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(&slot)
        .arg(1000)
        .query(&mut src)
        .expect("GETKEYSINSLOT");
    assert!(keys.contains(key), "{key} in {keys:?}");
    let expiry: Vec<i64> = (keys.iter())
        .map(|k| int(&mut src, &["PEXPIRETIME", k]))
        .collect();
    let (src_id, dst_id) = (
        text(&mut src, &["CLUSTER", "MYID"]),
        text(&mut dst, &["CLUSTER", "MYID"]),
    );
    run(
        &mut dst,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id],
    )
    .expect("IMPORTING");
    run(
        &mut src,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id],
    )
    .expect("MIGRATING");
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(to)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS");
    for k in &keys {
        migrate.arg(k);
    }
    migrate.query::<()>(&mut src).expect("MIGRATE");
    for shard in map {
        let mut p = cluster.conn(shard.primary);
        run(&mut p, &["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).expect("SETSLOT NODE");
    }
    assert_eq!(int(&mut src, &["CLUSTER", "COUNTKEYSINSLOT", &slot]), 0);
    assert_eq!(
        int(&mut dst, &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        keys.len() as i64
    );
    // MIGRATE sends a relative TTL (`RESTORE-ASKING key <expiry - now> ...`) and the target
    // adds its own clock: the expiry moves later by the milliseconds the transfer took.
    for (k, expiry) in keys.iter().zip(expiry) {
        let moved = int(&mut dst, &["PEXPIRETIME", k]);
        assert!(
            (0..1000).contains(&(moved - expiry)),
            "{k}: {expiry} -> {moved}"
        );
    }
    // Through the cluster client, which follows the move.
    for (l, peeked) in limiters.iter().zip(peeked) {
        if keys.contains(&l.key) {
            let answer: Value = redis::cmd("RL.PEEK")
                .arg(&l.key)
                .arg("NOW")
                .arg(now)
                .query(c)
                .expect("RL.PEEK");
            assert_eq!(
                five(&l.key, &answer),
                five(&l.key, peeked),
                "{} moved",
                l.key
            );
        }
    }
}

/// `{user:42}:sec` and `{user:42}:min` share a slot: one MULTI on that slot's primary, or one
/// script through the cluster client, updates both. A MULTI over two slots is refused whole.
fn hash_tags(cluster: &Cluster, map: &[Shard], c: &mut ClusterConnection) {
    let (sec, min) = ("{user:42}:sec", "{user:42}:min");
    let slot = get_slot(sec.as_bytes());
    assert_eq!(get_slot(min.as_bytes()), slot);
    let mut p = cluster.conn(shard_of(map, slot).primary);
    let t = unix_ms();
    let mut multi = redis::pipe();
    multi.atomic();
    for (key, limit, window) in [(sec, 10, 1000), (min, 100, 60000)] {
        multi
            .cmd("RL.SLIDE")
            .arg(key)
            .arg(limit)
            .arg(window)
            .arg("NOW")
            .arg(t);
    }
    let replies: Vec<Vec<i64>> = multi.query(&mut p).expect("MULTI/EXEC");
    assert_eq!(
        replies,
        [vec![1, 10, 9, 0, 1000], vec![1, 100, 99, 0, 60000]]
    );

    let script = "return {redis.call('RL.SLIDE', KEYS[1], 10, 1000, 'NOW', ARGV[1]), \
                  redis.call('RL.SLIDE', KEYS[2], 100, 60000, 'NOW', ARGV[1])}";
    let replies: Vec<Vec<i64>> = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg(sec)
        .arg(min)
        .arg(t + 1)
        .query(c)
        .expect("EVAL through the cluster client");
    assert_eq!(replies[1], [1, 100, 98, 0, 60000]);
    // The per-second key expires at t + 1000 in real time; on a stalled machine the script
    // may find it gone and start it again.
    if unix_ms() < t + 1000 {
        assert_eq!(replies[0], [1, 10, 8, 0, 1000]);
    } else {
        assert_eq!(replies[0][..2], [1, 10]);
    }

    let stranger = (0..)
        .map(|i| format!("user:{i}"))
        .find(|k| {
            let other = get_slot(k.as_bytes());
            other != slot && shard_of(map, other).primary == shard_of(map, slot).primary
        })
        .expect("a key of another slot on the same node");
    // Each command queues; EXEC refuses the transaction as a whole, so nothing runs.
    run(&mut p, &["MULTI"]).expect("MULTI");
    for key in [sec, &stranger] {
        let queued = run(&mut p, &["RL.SLIDE", key, "10", "1000"]).expect("queued");
        assert_eq!(queued, Value::SimpleString("QUEUED".into()));
    }
    let e = run(&mut p, &["EXEC"]).expect_err("keys of two slots in one MULTI");
    assert_eq!(e.kind(), redis::ErrorKind::CrossSlot, "{e}");
    assert_eq!(int(&mut p, &["EXISTS", &stranger]), 0);
}

/// RL.ALL follows the cluster's rules for multi-key commands: keys of one slot (hash tags)
/// decide together on their node, keys of two slots get CROSSSLOT, a node that does not hold
/// the slot redirects, and COMMAND GETKEYS finds the keys.
fn rl_all_in_one_slot(cluster: &Cluster, map: &[Shard], c: &mut ClusterConnection) {
    let (rpm, tpm) = ("{user:7}:rpm", "{user:7}:tpm");
    let slot = get_slot(rpm.as_bytes());
    let owner = shard_of(map, slot).primary;
    let mut p = cluster.conn(owner);
    let line = |keys: &[&str], t: u64| {
        let mut w = vec!["RL.ALL".to_string(), keys.len().to_string()];
        w.extend(keys.iter().map(|k| k.to_string()));
        for spec in ["SLIDE 2 600000", "TOKEN 10000 600000 COST 4000"]
            .iter()
            .take(keys.len())
        {
            w.extend(spec.split(' ').map(String::from));
        }
        w.extend(["NOW".to_string(), t.to_string()]);
        w
    };
    let t = unix_ms();
    let v = cmd(&line(&[rpm, tpm], t))
        .query::<Value>(&mut p)
        .expect("one slot");
    let Value::Array(items) = v else {
        panic!("{v:?}")
    };
    assert_eq!(items.len(), 7);
    assert_eq!(items[0], Value::Int(1));
    // Through the cluster client too (it follows MOVED for the module's command).
    let v: Value = cmd(&line(&[rpm, tpm], t + 1))
        .query(c)
        .expect("through the client");
    assert!(
        matches!(&v, Value::Array(items) if items[0] == Value::Int(1)),
        "{v:?}"
    );
    let v: Value = cmd(&line(&[rpm, tpm], t + 2)).query(c).expect("refused");
    assert!(
        matches!(&v, Value::Array(items) if items[0] == Value::Int(0)),
        "{v:?}"
    );

    let same_node = (0..)
        .map(|i| format!("org:{i}"))
        .find(|k| {
            let other = get_slot(k.as_bytes());
            other != slot && shard_of(map, other).primary == owner
        })
        .expect("a key of another slot on the same node");
    let e = cmd(&line(&[rpm, &same_node], t))
        .query::<Value>(&mut p)
        .expect_err("two slots");
    assert_eq!(e.kind(), redis::ErrorKind::CrossSlot, "{e}");
    assert_eq!(int(&mut p, &["EXISTS", &same_node]), 0);
    let elsewhere = (0..)
        .map(|i| format!("org:{i}"))
        .find(|k| shard_of(map, get_slot(k.as_bytes())).primary != owner)
        .expect("a key on another node");
    let e = cmd(&line(&[&elsewhere], t))
        .query::<Value>(&mut p)
        .expect_err("another node's slot");
    assert_eq!(e.kind(), redis::ErrorKind::Moved, "{e}");
    let e = cmd(&line(&[rpm, &elsewhere], t))
        .query::<Value>(&mut p)
        .expect_err("two slots, two nodes");
    assert_eq!(e.kind(), redis::ErrorKind::CrossSlot, "{e}");

    let mut getkeys = vec!["COMMAND".to_string(), "GETKEYS".to_string()];
    getkeys.extend(line(&[rpm, tpm], t));
    let keys: Vec<String> = cmd(&getkeys).query(&mut p).expect("GETKEYS");
    assert_eq!(keys, [rpm, tpm]);
}

/// RL.ACQUIRE, RL.EXTEND and RL.RELEASE through the cluster client on keys in every slot
/// range of every shard, answering as a single server does; each lease key lives on its
/// slot's primary only; sent to another node, each command gets MOVED; and when a slot
/// holding leases moves, the client (whose map is then stale) follows MOVED to the leases.
/// The slot moves between the two shards that are not failed over later.
fn leases_route(
    cluster: &Cluster,
    map: &[Shard],
    c: &mut ClusterConnection,
    single: &mut Connection,
) {
    // The slots as they are now (a slot has moved since `map` was read); the first shard
    // keeps its slots.
    let first = map[0].primary;
    let map = &shards(&mut cluster.conn(first))[..];
    let ranges: Vec<(u16, u16, u16)> = (map.iter())
        .flat_map(|s| s.slots.iter().map(|&(a, b)| (a, b, s.primary)))
        .collect();
    // Two keys in each slot range (more where they fall), at least 300 in all.
    let mut keys: Vec<String> = Vec::new();
    let mut per_range = vec![0; ranges.len()];
    for i in 0.. {
        let key = format!("lease:{i}");
        let slot = get_slot(key.as_bytes());
        let Some(r) = ranges.iter().position(|&(a, b, _)| (a..=b).contains(&slot)) else {
            continue;
        };
        if per_range[r] < 2 || keys.len() < 300 {
            per_range[r] += 1;
            keys.push(key);
        }
        if keys.len() >= 300 && per_range.iter().all(|&n| n >= 2) {
            break;
        }
    }
    let t = unix_ms();
    let mut calls: Vec<Vec<String>> = Vec::new();
    for k in &keys {
        let k = k.as_str();
        calls.push(at(&["RL.ACQUIRE", k, "2", "600000", "ID", "a"], t));
        calls.push(at(&["RL.ACQUIRE", k, "2", "600000"], t));
        calls.push(at(&["RL.ACQUIRE", k, "2", "600000", "ID", "c"], t));
        calls.push(at(&["RL.EXTEND", k, "a", "900000"], t + 1));
        calls.push(at(&["RL.RELEASE", k, "a"], t + 2));
        calls.push(at(&["RL.ACQUIRE", k, "2", "600000", "ID", "c"], t + 3));
    }
    let got = cluster_run(c, &calls);
    let reference = single_run(single, &calls);
    assert_eq!(got, reference, "the cluster answers as a single server");
    let ints = |v: &Value| -> Vec<i64> {
        let Value::Array(f) = v else { panic!("{v:?}") };
        f.iter()
            .take(5)
            .map(|x| redis::from_redis_value(x).expect("an integer"))
            .collect()
    };
    for (i, k) in keys.iter().enumerate() {
        let r = &got[i * 6..i * 6 + 6];
        assert_eq!(ints(&r[0]), [1, 2, 1, 0, 600_000], "{k}");
        assert!(matches!(&r[0], Value::Array(f) if f[5] == Value::BulkString(b"a".to_vec())));
        assert_eq!(ints(&r[1])[..3], [1, 2, 0], "{k}");
        assert_eq!(ints(&r[2])[..3], [0, 2, 0], "{k}: refused");
        assert_eq!(ints(&r[3])[..3], [1, 2, 0], "{k}: extended");
        assert_eq!(ints(&r[4])[..3], [1, 2, 1], "{k}: released");
        assert_eq!(
            ints(&r[5])[..3],
            [1, 2, 0],
            "{k}: acquired after the release"
        );
    }
    // Each key on its slot's primary only; straight to another primary, each command is
    // redirected there.
    for k in keys.iter().step_by(7) {
        let slot = get_slot(k.as_bytes());
        let owner = shard_of(map, slot).primary;
        for shard in map {
            let mut p = cluster.conn(shard.primary);
            if shard.primary == owner {
                assert_eq!(int(&mut p, &["EXISTS", k]), 1, "{k}");
                continue;
            }
            let count = int(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
            assert_eq!(count, 0, "{k} on another node");
            for words in [
                &["RL.ACQUIRE", k, "2", "600000"][..],
                &["RL.EXTEND", k, "c", "600000"],
                &["RL.RELEASE", k, "c"],
            ] {
                let e = run(&mut p, words).expect_err("a redirect");
                assert_eq!(e.code(), Some("MOVED"), "{words:?}: {e}");
                assert_eq!(e.detail(), Some(&*format!("{slot} 127.0.0.1:{owner}")));
            }
        }
    }
    // A slot with leases moves; the client still sends there, gets MOVED and follows it.
    let others: Vec<&Shard> = map.iter().filter(|s| s.primary != first).collect();
    let (from, to) = (others[0].primary, others[1].primary);
    let key = (keys.iter())
        .find(|k| others[0].owns(get_slot(k.as_bytes())))
        .expect("a lease key on another shard than the first");
    let slot = get_slot(key.as_bytes()).to_string();
    let (mut src, mut dst) = (cluster.conn(from), cluster.conn(to));
    let moving: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(&slot)
        .arg(1000)
        .query(&mut src)
        .expect("GETKEYSINSLOT");
    let (src_id, dst_id) = (
        text(&mut src, &["CLUSTER", "MYID"]),
        text(&mut dst, &["CLUSTER", "MYID"]),
    );
    run(
        &mut dst,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id],
    )
    .expect("IMPORTING");
    run(
        &mut src,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id],
    )
    .expect("MIGRATING");
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(to)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS");
    for k in &moving {
        migrate.arg(k);
    }
    migrate.query::<()>(&mut src).expect("MIGRATE");
    for shard in map {
        let mut p = cluster.conn(shard.primary);
        run(&mut p, &["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).expect("SETSLOT NODE");
    }
    let e = run(&mut src, &["RL.EXTEND", key, "c", "600000"]).expect_err("moved");
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    let moved = [
        at(&["RL.EXTEND", key, "c", "900000"], t + 4),
        at(&["RL.RELEASE", key, "c"], t + 5),
        at(&["RL.ACQUIRE", key, "2", "600000", "ID", "d"], t + 6),
        at(&["RL.RELEASE", key, "d"], t + 7),
        at(&["RL.RELEASE", key, "d"], t + 8),
    ];
    let want = [[1, 2, 0], [1, 2, 1], [1, 2, 0], [1, 2, 1], [0, 2, 1]];
    for (words, want) in moved.iter().zip(want) {
        let v: Value = cmd(words).query(c).expect("through the client");
        assert_eq!(ints(&v)[..3], want, "{words:?}");
    }
    assert_eq!(int(&mut dst, &["EXISTS", key]), 1);
    assert_eq!(int(&mut src, &["CLUSTER", "COUNTKEYSINSLOT", &slot]), 0);
}
