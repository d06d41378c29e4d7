//! Real servers for the tests: a redis-server on a free port (with the module, or without it),
//! and a 6-node cluster from `cluster/cluster.sh`; each killed and removed on drop. Every wait
//! polls with a deadline.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The repository's root (this crate is `clients/rust`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `MODULE`, or the release build in the repository.
pub fn module() -> PathBuf {
    let m = std::env::var_os("MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/release/libredis_ratelimit.so"));
    assert!(
        m.exists(),
        "module not found: {} (cargo build --release at the repository's root, or set MODULE)",
        m.display()
    );
    m
}

/// A name no other test or run uses.
pub fn fresh(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}:{}:{nanos}", std::process::id())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(fresh(&format!("rlc-{tag}")).replace(':', "-"));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One redis-server, killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl Server {
    /// With the module loaded.
    pub fn start() -> Server {
        Server::start_with(true)
    }

    /// Without the module: the server of a managed service that forbids it.
    pub fn without_module() -> Server {
        Server::start_with(false)
    }

    fn start_with(with_module: bool) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let dir = TempDir::new("server");
            let mut cmd = Command::new("redis-server");
            cmd.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--logfile", "redis.log"])
            .arg("--dir")
            .arg(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
            if with_module {
                cmd.arg("--loadmodule").arg(module());
            }
            let mut child = cmd.spawn().expect("redis-server (is it installed?)");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken meanwhile: try another
                }
                if ping(port) {
                    return Server {
                        child,
                        port,
                        _dir: dir,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a client")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ping(port: u16) -> bool {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

/// The sum of `field` (such as `cmdstat_RL.HIT:calls=`) over the lines of `INFO section`.
pub fn info_count(con: &mut impl redis::ConnectionLike, section: &str, field: &str) -> u64 {
    let text: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    text.lines()
        .filter_map(|l| l.strip_prefix(field))
        .filter_map(|rest| rest.split([',', '\r']).next())
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

/// A 3-primary, 3-replica cluster from `cluster/cluster.sh`, stopped on drop.
pub struct Cluster {
    pub ports: Vec<u16>,
    dir: TempDir,
}

impl Cluster {
    pub fn start() -> Cluster {
        let taken = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_err();
        // Below 32768, where Linux picks the local ports of outgoing connections; each port
        // + 10000 is its cluster bus.
        let mut ports: Vec<u16> = Vec::new();
        let mut seed = (SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(7)
            ^ std::process::id()) as u64;
        while ports.len() < 6 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = 10000 + ((seed >> 33) % 12000) as u16;
            if !taken(p) && !taken(p + 10000) && !ports.contains(&p) {
                ports.push(p);
            }
        }
        let dir = TempDir::new("cluster");
        let cluster = Cluster { ports, dir };
        let out = cluster.script("start");
        assert!(
            out.status.success(),
            "cluster.sh start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    fn script(&self, what: &str) -> std::process::Output {
        let ports: Vec<String> = self.ports.iter().map(|p| p.to_string()).collect();
        Command::new("bash")
            .arg(repo().join("cluster/cluster.sh"))
            .arg(what)
            .env("CLUSTER_PORTS", ports.join(" "))
            .env("CLUSTER_DIR", self.dir.0.join("nodes"))
            .env("MODULE", module())
            .env("CLUSTER_TIMEOUT", "60")
            .output()
            .expect("bash cluster/cluster.sh")
    }

    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// A direct connection to each node.
    pub fn nodes(&self) -> Vec<redis::Connection> {
        self.urls()
            .iter()
            .map(|u| {
                redis::Client::open(u.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("a node")
            })
            .collect()
    }

    /// The sum over every node of `field` in `INFO section`.
    pub fn count(&self, section: &str, field: &str) -> u64 {
        self.nodes()
            .iter_mut()
            .map(|c| info_count(c, section, field))
            .sum()
    }

    /// The direct connections to the primaries.
    pub fn primaries(&self) -> Vec<redis::Connection> {
        self.nodes()
            .into_iter()
            .filter_map(|mut c| {
                let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).ok()?;
                (role.first() == Some(&redis::Value::BulkString(b"master".to_vec()))).then_some(c)
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
}
