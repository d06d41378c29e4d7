//! A redis-server with the module loaded, on a free port, in its own directory, killed and
//! cleaned up on drop. Integration tests only talk to it over the network: linking the crate
//! would bring in the Redis allocator, which aborts outside a server.
#![allow(dead_code)] // the binaries that take this with #[path] use a part of it each

// What the parts of one concern, split over several test files, share.
pub mod cluster;
pub mod durability;
pub mod leases;
pub mod policy;
pub mod roundtrip;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};
use rstest::fixture;

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// The module config that bounds how far ahead of the server clock a client's NOW may be.
pub const NOW_MAX_AHEAD: &str = "ratelimit.now-max-ahead-ms";

/// A server's arguments for an AOF of commands only (no RDB preamble), each write in it
/// before its reply (`everysec` may hold one back while a fsync runs): for tests that read
/// the AOF, or crash the server, right after writing.
pub const AOF_ALWAYS_NO_PREAMBLE: &[&str] = &[
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--aof-use-rdb-preamble",
    "no",
];

/// The module built by `cargo test`: next to the test binary (`target/<profile>/deps`) or one
/// level up, unless `RATELIMIT_MODULE` names it.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("RATELIMIT_MODULE") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    // libredis_ratelimit.so, or .dylib on macOS.
    let name = format!(
        "{}redis_ratelimit{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let candidate = dir.join(&name);
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("{name} not found near {}", deps.display());
}

/// Unix time in milliseconds, for `NOW` values that keep keys alive in real time.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits for `cond`, failing the test after `secs` seconds.
pub fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}

pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    /// Another module to load instead of this one (a peer's, to compare with).
    other_module: Option<PathBuf>,
    child: Option<Child>,
    /// Only the first owner of a directory removes it.
    owns_dir: bool,
}

impl Server {
    /// Starts a server in a new directory with the module and `extra` argv words
    /// (`["--appendonly", "yes"]`).
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with_files(&[], extra)
    }

    /// A server with another module than this one loaded (a peer's, to compare with).
    pub fn start_with_module(module: &std::path::Path) -> Server {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rl-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test dir");
        Server::start_in(dir, &[], true, Some(module.to_path_buf()))
    }

    /// Like [`Server::start`], with `(source, name)` files copied into its directory first
    /// (an RDB to load, say).
    pub fn start_with_files(files: &[(&str, &str)], extra: &[&str]) -> Server {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rl-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test dir");
        for (source, name) in files {
            std::fs::copy(source, dir.join(name)).expect("copy a file into the test dir");
        }
        Server::start_in(dir, extra, true, None)
    }

    fn start_in(
        dir: PathBuf,
        extra: &[&str],
        owns_dir: bool,
        other_module: Option<PathBuf>,
    ) -> Server {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        // A port can be taken between probing and binding: try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut s = Server {
                port,
                dir: dir.clone(),
                args: args.clone(),
                other_module: other_module.clone(),
                child: None,
                owns_dir,
            };
            if s.spawn() {
                return s;
            }
            s.owns_dir = false;
        }
        panic!(
            "redis-server did not start; see {}/redis.log",
            dir.display()
        );
    }

    fn spawn(&mut self) -> bool {
        let module = self.other_module.clone().unwrap_or_else(module_path);
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg("redis.log")
            .arg("--save")
            .arg("")
            .arg("--enable-debug-command")
            .arg("yes")
            .arg("--enable-module-command")
            .arg("yes")
            .arg("--loadmodule")
            .arg(&module)
            .args(&self.args);
        // Tests drive time through NOW, ahead of the server clock: no bound on how far,
        // unless the test sets one (tests/it/clock.rs checks the default).
        if self.other_module.is_none() && !self.args.iter().any(|a| a.contains("now-max-ahead-ms"))
        {
            cmd.arg(format!("--{NOW_MAX_AHEAD}")).arg("-1");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("redis-server on PATH (make deps)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false; // exited: port taken, bad config...
            }
            if let Ok(mut c) = self.try_conn() {
                // A server still loading its data answers LOADING: wait for it.
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    self.child = Some(child);
                    return true;
                }
            }
            sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    fn try_conn(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let c = client.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(c)
    }

    pub fn conn(&self) -> Connection {
        self.try_conn().expect("connection to the test server")
    }

    /// Kills the server without letting it save (like a crash), then starts it again in the
    /// same directory with the same arguments, so it loads whatever it had persisted.
    pub fn crash_and_restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "restart failed; see {}/redis.log",
            self.dir.display()
        );
    }

    /// A clean `SHUTDOWN SAVE` and a start from the saved RDB.
    pub fn save_and_restart(&mut self) {
        let _: redis::RedisResult<Value> =
            redis::cmd("SHUTDOWN").arg("SAVE").query(&mut self.conn());
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        assert!(
            self.spawn(),
            "restart failed; see {}/redis.log",
            self.dir.display()
        );
    }

    /// A replica of this server, in its own directory, once its link is up.
    pub fn replica(&self) -> Server {
        let port = self.port.to_string();
        let replica = Server::start(&["--replicaof", "127.0.0.1", &port]);
        let mut c = replica.conn();
        wait_until("the replica's link", 30, || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut c)
                .unwrap_or_default();
            info.contains("master_link_status:up")
        });
        replica
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            // The directory goes either way: show what the server said instead.
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- redis.log (port {}), last lines:", self.port);
            tail.iter().rev().for_each(|l| eprintln!("{l}"));
        }
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A server for one test.
#[fixture]
pub fn server() -> Server {
    Server::start(&[])
}

/// Runs a command given as words and returns its reply.
pub fn run(c: &mut Connection, words: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query(c)
}

/// A limiter reply as its five integers.
pub fn rl(c: &mut Connection, line: &str) -> [i64; 5] {
    let words: Vec<&str> = line.split_whitespace().collect();
    let v: Vec<i64> = match run(c, &words) {
        Ok(v) => redis::from_redis_value(&v).unwrap_or_else(|e| panic!("{line}: {e}")),
        Err(e) => panic!("{line}: {e}"),
    };
    v.try_into()
        .unwrap_or_else(|v| panic!("{line}: not 5 fields: {v:?}"))
}

/// A reply of integers (a limiter's, `CL.THROTTLE`'s) as they are, however many.
pub fn cl(c: &mut Connection, line: &str) -> Vec<i64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match run(c, &words) {
        Ok(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => *i,
                other => panic!("{line}: {other:?}"),
            })
            .collect(),
        other => panic!("{line}: {other:?}"),
    }
}

/// The full error text (`CODE message`) a command gets.
pub fn err(c: &mut Connection, words: &[&str]) -> String {
    match run(c, words) {
        Ok(v) => panic!("{words:?} answered {v:?}, expected an error"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

pub fn int(c: &mut Connection, words: &[&str]) -> i64 {
    redis::from_redis_value(&run(c, words).expect("reply")).expect("integer")
}

pub fn text(c: &mut Connection, words: &[&str]) -> String {
    redis::from_redis_value(&run(c, words).expect("reply")).expect("string")
}

/// `DEBUG DIGEST-VALUE` of one key.
pub fn digest(c: &mut Connection, key: &str) -> String {
    let v: Vec<String> =
        redis::from_redis_value(&run(c, &["DEBUG", "DIGEST-VALUE", key]).expect("digest"))
            .expect("digest");
    v.concat()
}

/// `DEBUG DIGEST` of the whole dataset.
pub fn dataset_digest(c: &mut Connection) -> String {
    text(c, &["DEBUG", "DIGEST"])
}

/// Two `RL.SLIDE tx 1 60000` in one MULTI/EXEC and one `RL.SLIDE lua 3 60000` from a Lua
/// script: their replies.
pub fn slide_in_multi_and_lua(c: &mut Connection) -> (Vec<Vec<i64>>, Vec<i64>) {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for _ in 0..2 {
        pipe.cmd("RL.SLIDE").arg("tx").arg(1).arg(60000);
    }
    let multi: Vec<Vec<i64>> = pipe.query(c).expect("MULTI/EXEC");
    let lua: Vec<i64> = redis::cmd("EVAL")
        .arg("return redis.call('RL.SLIDE', KEYS[1], 3, 60000)")
        .arg(1)
        .arg("lua")
        .query(c)
        .expect("EVAL");
    (multi, lua)
}

/// Appends `v` as a LEB128 varint, as the module's encoding does (src/codec.rs).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An `RL.RESTORE` payload for a sliding log (encoding version 1, kind 1, see src/value.rs):
/// `latest`, the `(limit, window_ms)` pairs, and the `(timestamp, units)` records, oldest
/// first. Builds a log of millions of records in one command, where recording them would
/// take as many calls.
pub fn slide_payload(
    latest: u64,
    windows: &[(u64, u64)],
    records: impl ExactSizeIterator<Item = (u64, u64)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 3 * records.len());
    out.extend_from_slice(&[1, 1]);
    put_varint(&mut out, latest);
    put_varint(&mut out, windows.len() as u64);
    for (limit, window_ms) in windows {
        put_varint(&mut out, *limit);
        put_varint(&mut out, *window_ms);
    }
    put_varint(&mut out, records.len() as u64);
    let mut prev = 0;
    for (at, units) in records {
        put_varint(&mut out, at - prev);
        put_varint(&mut out, units);
        prev = at;
    }
    out
}

/// Every `SLOWLOG GET` entry, newest first: the call's microseconds and its words (as
/// SLOWLOG keeps them: at most 32, each cut at 128 bytes), read as UTF-8 where they are not.
pub fn slowlog(c: &mut Connection) -> Vec<(i64, Vec<String>)> {
    let log = run(c, &["SLOWLOG", "GET", "-1"]).expect("SLOWLOG GET");
    let Value::Array(entries) = log else {
        panic!("SLOWLOG GET: {log:?}");
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Value::Array(e) = entry else { return None };
            let us: i64 = redis::from_redis_value(e.get(2)?).ok()?;
            let words: Vec<Vec<u8>> = redis::from_redis_value(e.get(3)?).ok()?;
            let words = words
                .iter()
                .map(|w| String::from_utf8_lossy(w).into_owned());
            Some((us, words.collect()))
        })
        .collect()
}

/// A field of `INFO` (`lazyfreed_objects`, `used_memory`, ...) as an integer.
pub fn info_field(c: &mut Connection, field: &str) -> i64 {
    let info = text(c, &["INFO", "everything"]);
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no integer {field} in INFO"))
}

/// The textual form (`RL.TOKEN 100 60000 NOW t`) of an effect as a primary propagates it in
/// `RL.APPLY key effect`: a compact effect (first byte 1, the command's code, then each word
/// as a tag, 0 for a LEB128 number or a keyword's code) is spelled out, a textual one kept.
/// Written here from the format's description, independently of the module's own decoder.
#[allow(dead_code)]
pub fn effect_text(effect: &[u8]) -> String {
    const COMMANDS: [&str; 8] = [
        "RL.SLIDE",
        "RL.TOKEN",
        "RL.LEAKY",
        "RL.FIXED",
        "RL.SUBWIN",
        "RL.REFUND",
        "RL.CHARGE",
        "CL.THROTTLE",
    ];
    const KEYWORDS: [&str; 5] = ["BURST", "MAXDELAY", "COST", "NOW", "ALIGN"];
    let [1, code, rest @ ..] = effect else {
        return String::from_utf8_lossy(effect).into_owned();
    };
    // A damaged effect (a fuzz test's) shows its unknown codes as `?n`.
    let name = |names: &[&str], code: u8| match usize::from(code).checked_sub(1) {
        Some(i) if i < names.len() => names[i].to_string(),
        _ => format!("?{code}"),
    };
    let mut words = vec![name(&COMMANDS, *code)];
    let mut bytes = rest.iter();
    while let Some(&tag) = bytes.next() {
        if tag == 0 {
            let (mut v, mut shift) = (0u64, 0);
            for &b in bytes.by_ref() {
                v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            words.push(v.to_string());
        } else {
            words.push(name(&KEYWORDS, tag));
        }
    }
    words.join(" ")
}

/// The commands of the server's incremental AOF files, in order, as they are written there
/// (`RL.APPLY` and all), a compact effect spelled out (see [`effect_text`]).
#[allow(dead_code)]
pub fn aof_raw_commands(server: &Server) -> Vec<Vec<String>> {
    aof_raw_words(server)
        .into_iter()
        .map(|words| words.iter().map(|w| effect_text(w)).collect())
        .collect()
}

/// The commands of the server's incremental AOF files, in order, each word as its bytes
/// (a compact effect as the primary wrote it).
#[allow(dead_code)]
pub fn aof_raw_words(server: &Server) -> Vec<Vec<Vec<u8>>> {
    let dir = server.path("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    let mut commands = Vec::new();
    for line in manifest.lines() {
        // file appendonly.aof.1.incr.aof seq 1 type i
        let words: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| {
            let at = words.iter().position(|w| *w == name)?;
            words.get(at + 1).copied()
        };
        if let (Some(file), Some("i")) = (field("file"), field("type")) {
            let bytes = std::fs::read(dir.join(file)).expect("an incremental AOF file");
            commands.extend(parse_resp_words(&bytes));
        }
    }
    commands
}

/// [`aof_raw_commands`] with each change of an `RL.APPLY` as the command line it stands for
/// (see [`unapply`]).
#[allow(dead_code)]
pub fn aof_commands(server: &Server) -> Vec<Vec<String>> {
    aof_raw_commands(server)
        .into_iter()
        .flat_map(unapply)
        .collect()
}

/// `RL.APPLY key "RL.X p1 p2 ... COST n NOW t"` (how a decision is propagated) as the command
/// line it stands for, `RL.X key p1 p2 ... COST n NOW t`; `RL.APPLY` of several changes (what
/// `RL.ALL` propagates) as one such line per change, in order; other commands unchanged.
pub fn unapply(words: Vec<String>) -> Vec<Vec<String>> {
    match words.split_first() {
        Some((apply, changes)) if apply == "RL.APPLY" && changes.len() % 2 == 0 => changes
            .chunks_exact(2)
            .map(|change| {
                let mut effect = change[1].split(' ').map(str::to_owned);
                let command = effect.next().expect("an effect names its command");
                [command, change[0].clone()]
                    .into_iter()
                    .chain(effect)
                    .collect()
            })
            .collect(),
        _ => vec![words],
    }
}

/// RESP arrays of bulk strings, back to back, as the AOF holds them, a compact effect spelled
/// out (see [`effect_text`]).
pub fn parse_resp_commands(bytes: &[u8]) -> Vec<Vec<String>> {
    parse_resp_words(bytes)
        .into_iter()
        .map(|words| words.iter().map(|w| effect_text(w)).collect())
        .collect()
}

/// RESP arrays of bulk strings, back to back, as the AOF holds them: each word's bytes.
pub fn parse_resp_words(bytes: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(bytes: &'a [u8], at: &mut usize) -> &'a str {
        let end = bytes[*at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| *at + p)
            .expect("a CRLF-terminated line in the AOF");
        let l = std::str::from_utf8(&bytes[*at..end]).expect("ASCII header");
        *at = end + 2;
        l
    }
    let mut at = 0;
    let mut commands = Vec::new();
    while at < bytes.len() {
        let head = line(bytes, &mut at);
        let n: usize = head
            .strip_prefix('*')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("expected an array header in the AOF, got {head:?}"));
        let mut words = Vec::with_capacity(n);
        for _ in 0..n {
            let head = line(bytes, &mut at);
            let len: usize = head
                .strip_prefix('$')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("expected a bulk header in the AOF, got {head:?}"));
            let word = bytes.get(at..at + len).expect("a complete bulk string");
            words.push(word.to_vec());
            assert_eq!(&bytes[at + len..at + len + 2], b"\r\n", "bulk string end");
            at += len + 2;
        }
        commands.push(words);
    }
    commands
}
