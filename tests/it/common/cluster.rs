//! The Redis Cluster of tests/it/cluster.rs: six nodes with the module on free ports (three
//! primaries, three replicas) made by `redis-cli --cluster create`, their shards as
//! `CLUSTER NODES` shows them, and a failover by `kill -9` of a primary; the limiters the
//! test drives, with the replies worked out by hand; pipelines through the cluster client and
//! to a single server.

use std::fs::File;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::cluster::{cluster_pipe, ClusterClient, ClusterConnection};
use redis::{Connection, Value};

use super::{free_port, run, text, wait_until, Server};

/// Commands per pipeline (the cluster client splits each one per node).
pub const PIPELINE: usize = 6_000;
/// Every window is 10 minutes: no key expires while the test runs.
pub const WINDOW: u64 = 600_000;

/// One shard as `CLUSTER NODES` describes it: its slot ranges, its primary and its replica
/// (0 while it has none).
#[derive(Debug, Clone)]
pub struct Shard {
    pub slots: Vec<(u16, u16)>,
    pub primary: u16,
    pub replica: u16,
}

impl Shard {
    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
    }

    pub fn size(&self) -> usize {
        self.slots.iter().map(|(a, b)| (b - a) as usize + 1).sum()
    }
}

/// Six cluster nodes on free ports, in their own directories; dropping it kills and removes
/// them all (each [`Server`] does so on drop, also when the test fails).
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<Server> = (0..6)
            .map(|_| {
                // The bus port is given, not left at port + 10000: that is over 65535 for
                // ports above 55535, which the kernel hands out.
                let bus = free_port().to_string();
                Server::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    &bus,
                    // Replicas sync at once instead of after the default 5 s.
                    "--repl-diskless-sync-delay",
                    "0",
                ])
            })
            .collect();
        let cluster = Cluster { nodes };
        cluster.create();
        cluster.wait_healthy(30);
        cluster
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|s| s.port).collect()
    }

    pub fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|s| s.port == port)
            .expect("a node of this cluster")
    }

    pub fn conn(&self, port: u16) -> Connection {
        self.node(port).conn()
    }

    /// `redis-cli --cluster create`, killed if it takes more than 60 seconds.
    pub fn create(&self) {
        let log_path = self.nodes[0].path("cluster-create.log");
        let log = File::create(&log_path).expect("create log");
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for port in self.ports() {
            cmd.arg(format!("127.0.0.1:{port}"));
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let mut child = cmd.spawn().expect("redis-cli on PATH (make deps)");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            sleep(Duration::from_millis(50));
        };
        let out = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(
            status.is_some_and(|s| s.success()),
            "redis-cli --cluster create failed or timed out ({status:?}):\n{out}"
        );
    }

    /// Waits until every node says `cluster_state:ok` and sees three shards covering every
    /// slot, each with a replica whose link to its primary is up.
    pub fn wait_healthy(&self, secs: u64) {
        wait_until("a healthy cluster", secs, || {
            self.ports().into_iter().all(|port| {
                let Ok(mut c) = self.node(port).conn_checked() else {
                    return false;
                };
                let state = text(&mut c, &["CLUSTER", "INFO"]);
                let map = shards(&mut c);
                state.contains("cluster_state:ok")
                    && map.len() == 3
                    && map.iter().map(Shard::size).sum::<usize>() == 16384
                    && map.iter().all(|s| {
                        s.replica != 0
                            && self.node(s.replica).conn_checked().is_ok_and(|mut r| {
                                info_field(&mut r, "replication", "master_link_status") == "up"
                            })
                    })
            })
        });
    }
}

/// The shard that owns `slot`.
pub fn shard_of(map: &[Shard], slot: u16) -> &Shard {
    map.iter()
        .find(|s| s.owns(slot))
        .expect("a shard for every slot")
}

pub trait CheckedConn {
    fn conn_checked(&self) -> redis::RedisResult<Connection>;
}

impl CheckedConn for Server {
    /// A connection that may fail (a node being killed), where `conn` panics.
    fn conn_checked(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let c = client.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(c)
    }
}

/// A line of `CLUSTER NODES`.
struct Node {
    id: String,
    port: u16,
    /// `master` or `slave`, and not failed.
    primary: bool,
    replica: bool,
    /// The primary's id, for a replica.
    of: String,
    slots: Vec<(u16, u16)>,
}

impl Node {
    /// `<id> <ip:port@bus> <flags> <primary> <ping> <pong> <epoch> <link> <slot ranges...>`
    fn parse(line: &str) -> Option<Node> {
        let f: Vec<&str> = line.split(' ').collect();
        let flags: Vec<&str> = f.get(2)?.split(',').collect();
        let up = !flags.iter().any(|f| *f == "fail" || *f == "fail?");
        Some(Node {
            id: f[0].to_string(),
            port: f.get(1)?.split([':', '@']).nth(1)?.parse().ok()?,
            primary: up && flags.contains(&"master"),
            replica: up && flags.contains(&"slave"),
            of: f.get(3)?.to_string(),
            slots: (f.iter().skip(8))
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => r.parse().ok().map(|a| (a, a)),
                })
                .collect(),
        })
    }
}

/// The shards as a node sees them in `CLUSTER NODES`: each primary holding slots, with its
/// replica. (`CLUSTER SLOTS` leaves out a replica until it has a replication offset, up to
/// 10 s on an idle cluster.)
pub fn shards(c: &mut Connection) -> Vec<Shard> {
    let nodes: String = run(c, &["CLUSTER", "NODES"])
        .and_then(|v| redis::from_redis_value(&v))
        .unwrap_or_default();
    let nodes: Vec<Node> = nodes.lines().filter_map(Node::parse).collect();
    (nodes.iter())
        .filter(|n| n.primary && !n.slots.is_empty())
        .map(|n| Shard {
            slots: n.slots.clone(),
            primary: n.port,
            replica: (nodes.iter())
                .find(|r| r.replica && r.of == n.id)
                .map_or(0, |r| r.port),
        })
        .collect()
}

/// A reply as five integers, `None` for nil; anything else fails the test.
pub fn five(what: &str, v: &Value) -> Option<[i64; 5]> {
    if *v == Value::Nil {
        return None;
    }
    let v: Vec<i64> = redis::from_redis_value(v).unwrap_or_else(|e| panic!("{what}: {v:?}: {e}"));
    Some(
        v.try_into()
            .unwrap_or_else(|v| panic!("{what}: not 5 fields: {v:?}")),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Slide,
    Subwin,
    Token,
    Leaky,
    Fixed,
}

/// Limiter `i` of the test: its key, its kind and how many requests it gets (1 to 5; the
/// kinds with a limit of 3 or 4 refuse the last ones).
pub struct Limiter {
    pub key: String,
    pub kind: Kind,
    pub calls: u64,
}

impl Limiter {
    pub fn new(i: usize) -> Limiter {
        let kind = [
            Kind::Slide,
            Kind::Subwin,
            Kind::Token,
            Kind::Leaky,
            Kind::Fixed,
        ][i % 5];
        Limiter {
            key: format!("rl:{kind:?}:{i}").to_lowercase(),
            kind,
            calls: 1 + (i as u64 / 5) % 5,
        }
    }

    /// Request `j`, made at `t + j`.
    pub fn request(&self, t: u64, j: u64) -> Vec<String> {
        let args = match self.kind {
            Kind::Slide => vec!["RL.SLIDE", "3", "600000"],
            Kind::Subwin => vec!["RL.SUBWIN", "4", "600000", "60000"],
            Kind::Token => vec!["RL.TOKEN", "4", "600000"],
            Kind::Leaky => vec!["RL.LEAKY", "4", "600000"],
            Kind::Fixed => vec!["RL.FIXED", "3", "600000"],
        };
        let mut words = vec![args[0].to_string(), self.key.clone()];
        words.extend(args[1..].iter().map(|s| s.to_string()));
        words.extend(["NOW".to_string(), (t + j).to_string()]);
        words
    }

    /// The reply request `j` must get, worked out from docs/commands.md's definitions (`None`
    /// where it is left to the comparison with a single server: a refused `RL.SUBWIN`).
    pub fn expected(&self, t: u64, j: u64) -> Option<[i64; 5]> {
        let (w, j) = (WINDOW as i64, j as i64);
        // Token and leaky buckets: one unit every 600000 / 4 ms.
        let step = w / 4;
        Some(match self.kind {
            // The first 3 are logged; then the one at t leaves the window at t + w, and the
            // log is empty once the one at t + 2 has left.
            Kind::Slide if j < 3 => [1, 3, 2 - j, 0, w],
            Kind::Slide => [0, 3, 0, w - j, w + 2 - j],
            // The sub-interval holding the last call stops trailing one resolution after the
            // window has passed it.
            Kind::Subwin if j < 4 => {
                let now = t as i64 + j;
                let start = now - now % 60_000;
                [1, 4, 3 - j, 0, start + w + 60_000 - 1 - now]
            }
            Kind::Subwin => return None,
            // Full after `step` per token taken; refused, the next token comes `step` after
            // the bucket emptied.
            Kind::Token if j < 4 => [1, 4, 3 - j, 0, step * (j + 1) - j],
            Kind::Token => [0, 4, 0, step - j, w - j],
            // Bookings one `step` apart; MAXDELAY (the window) holds 4 more after the first.
            Kind::Leaky => [1, 5, 4 - j, step * j - j, step * (j + 1) - j],
            Kind::Fixed if j < 3 => [1, 3, 2 - j, 0, w - j],
            Kind::Fixed => [0, 3, 0, w - j, w - j],
        })
    }
}

pub fn cmd(words: &[String]) -> redis::Cmd {
    let mut c = redis::cmd(&words[0]);
    for w in &words[1..] {
        c.arg(w);
    }
    c
}

/// Runs `commands` through the cluster client, pipelined.
pub fn cluster_run(c: &mut ClusterConnection, commands: &[Vec<String>]) -> Vec<Value> {
    let mut replies = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(PIPELINE) {
        let mut pipe = cluster_pipe();
        for words in chunk {
            pipe.add_command(cmd(words));
        }
        let out: Vec<Value> = pipe.query(c).expect("cluster pipeline");
        replies.extend(out);
    }
    replies
}

/// Runs `commands` on one server, pipelined.
pub fn single_run(c: &mut Connection, commands: &[Vec<String>]) -> Vec<Value> {
    let mut replies = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(PIPELINE) {
        let mut pipe = redis::pipe();
        for words in chunk {
            pipe.add_command(cmd(words));
        }
        let out: Vec<Value> = pipe.query(c).expect("pipeline");
        replies.extend(out);
    }
    replies
}

pub fn client(ports: &[u16]) -> ClusterConnection {
    let seeds: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    ClusterClient::new(seeds)
        .and_then(|c| c.get_connection())
        .expect("cluster client")
}

/// `INFO` field `name` of `section`.
pub fn info_field(c: &mut Connection, section: &str, name: &str) -> String {
    text(c, &["INFO", section])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// `words` with `NOW <ms>` appended.
pub fn at(words: &[&str], now: u64) -> Vec<String> {
    let mut v: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    v.extend(["NOW".to_string(), now.to_string()]);
    v
}

/// `WAIT 1 5000` on a primary: its replica has acknowledged everything it was sent.
pub fn wait_for_replica(primary: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(primary)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica did not acknowledge");
}

/// Kills the shard's primary (`kill -9`) and waits until its replica is a primary and every
/// other node says `cluster_state:ok` with the replica owning the shard's slots. Returns the
/// ports of the nodes still running.
pub fn fail_over(cluster: &Cluster, shard: &Shard) -> Vec<u16> {
    let pid = info_field(&mut cluster.conn(shard.primary), "server", "process_id");
    let killed = Command::new("kill").args(["-9", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -9 {pid}");
    let timer = Instant::now();
    let survivors: Vec<u16> = (cluster.ports().into_iter())
        .filter(|p| *p != shard.primary)
        .collect();
    wait_until("the replica's promotion", 30, || {
        let promoted = cluster
            .node(shard.replica)
            .conn_checked()
            .is_ok_and(|mut r| info_field(&mut r, "replication", "role") == "master");
        promoted
            && survivors.iter().all(|&port| {
                cluster.node(port).conn_checked().is_ok_and(|mut c| {
                    text(&mut c, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                        && shards(&mut c)
                            .iter()
                            .any(|s| s.slots == shard.slots && s.primary == shard.replica)
                })
            })
    });
    eprintln!("failover in {:?}", timer.elapsed());
    survivors
}
