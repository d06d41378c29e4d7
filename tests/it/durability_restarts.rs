//! Across crashes: kill -9 in the middle of a load. With `appendfsync always` every
//! acknowledged unit is still counted after the restart; with `everysec` the loss is
//! measured, and at most what was acknowledged in the last seconds; without an AOF a restart
//! goes back to the last save. Under load: tests/it/durability.rs; at the memory limit:
//! tests/it/durability_maxmemory.rs.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::durability::{call_words, key_of, query, Rng};
use crate::common::{digest, int, rl, run, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// Limiters that hold everything the load records: `used = limit - remaining`.
const DURABLE: [&str; 5] = [
    "RL.SLIDE d:slide 1000000 600000",
    "RL.SUBWIN d:subwin 1000000 600000 10000",
    "RL.TOKEN d:token 1 86400000 BURST 1000000",
    "RL.LEAKY d:leaky 1 86400000 MAXDELAY 0 BURST 1000000",
    "RL.FIXED d:fixed 1000000 600000",
];

/// Units used on each limiter of `DURABLE`, from `RL.PEEK` (0 for a missing key).
fn used_units(c: &mut Connection) -> Vec<u64> {
    DURABLE
        .iter()
        .map(|line| match run(c, &["RL.PEEK", key_of(line)]).unwrap() {
            Value::Nil => 0,
            v => {
                let r: Vec<u64> = redis::from_redis_value(&v).unwrap();
                r[1] - r[2]
            }
        })
        .collect()
}

/// What one client saw before the server died.
struct Witness {
    units: Vec<u64>,
    /// The call whose reply never came: (limiter, cost).
    in_flight: Option<(usize, u64)>,
    /// When each allowed reply arrived: (when, limiter, cost).
    acks: Vec<(Instant, usize, u64)>,
}

/// Clients call the limiters of `DURABLE` (server clock, cost 1 to 3) until their server
/// dies; `kill` kills it after `after`. Returns what the clients saw and when the kill was.
fn load_until_killed(
    conns: Vec<Connection>,
    after: Duration,
    kill: impl FnOnce(),
) -> (Vec<Witness>, Instant) {
    let start = Arc::new(Barrier::new(conns.len() + 1));
    let clients: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 100);
                let mut w = Witness {
                    units: vec![0; DURABLE.len()],
                    in_flight: None,
                    acks: Vec::new(),
                };
                start.wait();
                // The kill comes long before this; it is only a deadline.
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    let k = rng.below(DURABLE.len() as u64) as usize;
                    let cost = 1 + rng.below(3);
                    w.in_flight = Some((k, cost));
                    let Ok(reply) = query(&mut c, &call_words(DURABLE[k], cost)) else {
                        return w; // the server is gone; this call may or may not count
                    };
                    w.in_flight = None;
                    assert_eq!(reply[0], 1, "{}: refused {reply:?}", DURABLE[k]);
                    w.units[k] += cost;
                    w.acks.push((Instant::now(), k, cost));
                }
                panic!("the server was never killed");
            })
        })
        .collect();
    start.wait();
    thread::sleep(after);
    let killed_at = Instant::now();
    kill();
    let witnesses = clients
        .into_iter()
        .map(|c| c.join().expect("a client thread"))
        .collect();
    (witnesses, killed_at)
}

#[rstest]
#[case::always("always")]
#[case::everysec("everysec")]
fn kill_minus_9_mid_load(#[case] fsync: &str) {
    const CLIENTS: usize = 8;
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", fsync]);
    let conns: Vec<Connection> = (0..CLIENTS).map(|_| server.conn()).collect();
    let (witnesses, killed_at) =
        load_until_killed(conns, Duration::from_secs(5), || server.crash_and_restart());
    let restarted_in = killed_at.elapsed();
    let mut c = server.conn();
    let used = used_units(&mut c);

    // everysec: Redis may hold the AOF buffer, already acknowledged, while a background
    // fsync runs, for up to 2 s on its cached clock; half a second more for that clock.
    const EVERYSEC_WINDOW: Duration = Duration::from_millis(2500);
    let n = DURABLE.len();
    let (mut seen, mut in_flight, mut recent) = (vec![0; n], vec![0; n], vec![0; n]);
    let mut acks: Vec<(Instant, u64)> = Vec::new();
    for w in &witnesses {
        w.units.iter().enumerate().for_each(|(k, u)| seen[k] += u);
        if let Some((k, cost)) = w.in_flight {
            in_flight[k] += cost;
        }
        for &(at, k, cost) in &w.acks {
            if killed_at.saturating_duration_since(at) <= EVERYSEC_WINDOW {
                recent[k] += cost;
            }
            acks.push((at, cost));
        }
    }
    let total = |v: &[u64]| v.iter().sum::<u64>();
    let lost: Vec<u64> = (0..n).map(|k| seen[k].saturating_sub(used[k])).collect();
    // The loss in time: the last how many ms of acknowledged units it amounts to.
    acks.sort_by_key(|&(at, _)| std::cmp::Reverse(at));
    let mut lost_ms = 0;
    let mut counted = 0;
    for (at, cost) in acks {
        if counted >= total(&lost) {
            break;
        }
        counted += cost;
        lost_ms = killed_at.saturating_duration_since(at).as_millis();
    }
    println!(
        "appendfsync {fsync}: {CLIENTS} clients saw {} units allowed ({} in the last {:.1} s), \
         killed with {} units in flight; after the restart {} units counted, {} acknowledged \
         units lost (the last {lost_ms} ms of acknowledgements); kill, restart and AOF load \
         took {:.1} s",
        total(&seen),
        total(&recent),
        EVERYSEC_WINDOW.as_secs_f64(),
        total(&in_flight),
        total(&used),
        total(&lost),
        restarted_in.as_secs_f64()
    );
    if server.log().contains("short read") {
        println!("  the AOF ended in a partial command, which Redis dropped at load");
    }
    for (k, line) in DURABLE.iter().enumerate() {
        let key = key_of(line);
        println!(
            "  {key:<9} seen {:>6} in flight {:>2} counted {:>6} lost {}",
            seen[k], in_flight[k], used[k], lost[k]
        );
        // Calls whose replies were lost may or may not count; nothing else may.
        assert!(
            used[k] <= seen[k] + in_flight[k],
            "{key}: {} units counted, clients saw {} allowed and had {} in flight",
            used[k],
            seen[k],
            in_flight[k]
        );
        if fsync == "always" {
            // The reply goes out after the write and fsync: nothing acknowledged is lost.
            assert!(
                used[k] >= seen[k],
                "{key}: {} units counted, clients saw {} allowed",
                used[k],
                seen[k]
            );
        } else {
            // everysec may lose what was acknowledged in the last second or two.
            assert!(
                lost[k] <= recent[k],
                "{key}: lost {} units, more than the {} acknowledged in the last {:?}",
                lost[k],
                recent[k],
                EVERYSEC_WINDOW
            );
        }
    }
    assert!(
        total(&seen) > 1000,
        "the load was too light to show anything"
    );
}

/// Without an AOF, a restart after kill -9 goes back to the last save: nothing when there
/// was none, exactly the saved state otherwise.
#[rstest]
fn without_aof_a_restart_returns_to_the_last_save() {
    let mut server = Server::start(&[]);
    let mut c = server.conn();
    let calls = |c: &mut Connection, n: u64| {
        for line in DURABLE {
            for _ in 0..n {
                assert_eq!(rl(c, &format!("{line} COST 2"))[0], 1);
            }
        }
    };
    calls(&mut c, 10);
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(
        int(&mut c, &["DBSIZE"]),
        0,
        "no save, no AOF: nothing is kept"
    );

    calls(&mut c, 10);
    run(&mut c, &["SAVE"]).unwrap();
    let saved: Vec<(String, i64)> = DURABLE
        .iter()
        .map(|l| {
            (
                digest(&mut c, key_of(l)),
                int(&mut c, &["PEXPIRETIME", key_of(l)]),
            )
        })
        .collect();
    calls(&mut c, 5);
    assert_eq!(used_units(&mut c), vec![30; DURABLE.len()]);
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(
        used_units(&mut c),
        vec![20; DURABLE.len()],
        "the units recorded after the save are lost"
    );
    for (line, before) in DURABLE.iter().zip(saved) {
        let key = key_of(line);
        let after = (digest(&mut c, key), int(&mut c, &["PEXPIRETIME", key]));
        assert_eq!(after, before, "{key}: not the saved state");
    }
}
