//! CL.THROTTLE side by side with redis-cell itself, built from its source (never committed):
//! `REDIS_CELL_MODULE=/path/libredis_cell.so`, or
//! `/tmp/redis-cell/target/release/libredis_cell.so` when it is there. Without it, each test
//! says so in cargo test's summary: ignored, with the reason. (The tests find out when they
//! run, so this file has a harness of its own, libtest-mimic: `harness = false` in
//! Cargo.toml. A `#[test]` here would never run: list each test in `main`.)

#[path = "it/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::Duration;

use common::{cl, run, text, wait_until, Server};
use libtest_mimic::{Arguments, Completion, Trial};

fn main() {
    let tests = [
        with_redis_cell("side_by_side_with_redis_cell", side_by_side_with_redis_cell),
        with_redis_cell(
            "after_redis_cell_it_leaves_the_name_to_it",
            after_redis_cell_it_leaves_the_name_to_it,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests.into()).exit();
}

/// A test that runs given redis-cell's module, or is reported as ignored saying how to get
/// one. A panic fails it, as under libtest.
fn with_redis_cell(name: &str, test: fn(&Path)) -> Trial {
    Trial::ignorable_test(name, move || match redis_cell() {
        Some(cell) => {
            test(&cell);
            Ok(Completion::Completed)
        }
        None => Ok(Completion::ignored_with(
            "no redis-cell module: build brandur/redis-cell in /tmp/redis-cell, or set \
             REDIS_CELL_MODULE",
        )),
    })
}

/// redis-cell, built from its source, if it is there.
fn redis_cell() -> Option<PathBuf> {
    let path = std::env::var_os("REDIS_CELL_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/redis-cell/target/release/libredis_cell.so"));
    path.exists().then_some(path)
}

/// The same calls, made on this module and on redis-cell, get the same replies. The rates
/// are whole seconds apart (periods of a minute or more), so that the few milliseconds
/// between the two servers' calls cannot move a reply across a second.
fn side_by_side_with_redis_cell(cell: &Path) {
    let ours = Server::start(&[]);
    let theirs = Server::start_with_module(cell);
    let (mut a, mut b) = (ours.conn(), theirs.conn());
    // (max_burst, count_per_period, period): one unit every 2 s, 1 s, 30 s, 60 s, 2 s.
    let rates = [
        (15, 30, 60),
        (0, 60, 60),
        (5, 4, 120),
        (100, 60, 3600),
        (2, 60, 120),
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut compared = 0;
    for round in 0..3 {
        for _ in 0..200 {
            let (i, (burst, count, period)) = {
                let i = next(rates.len() as u64) as usize;
                (i, rates[i])
            };
            let quantity = match next(8) {
                0 => 0,
                1 => 2,
                2 => burst + 1,
                3 => burst + 2,
                4 => next(5),
                _ => 1,
            };
            let line = format!("CL.THROTTLE key{i} {burst} {count} {period} {quantity}");
            let (x, y) = (cl(&mut a, &line), cl(&mut b, &line));
            assert_eq!(x, y, "round {round}: {line}");
            compared += 1;
        }
        // Time runs on a little between rounds: the buckets drain alike on both.
        if round < 2 {
            sleep(Duration::from_millis(1100));
        }
    }
    assert_eq!(compared, 600);
}

/// Loaded after redis-cell, the module leaves CL.THROTTLE to it, says so in the log, and
/// serves every other command.
fn after_redis_cell_it_leaves_the_name_to_it(cell: &Path) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let dir = std::env::temp_dir().join(format!("rl-cell-first-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(["--logfile", "redis.log"])
        .arg("--loadmodule")
        .arg(cell)
        .arg("--loadmodule")
        .arg(common::module_path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = None;
    wait_until("the server", 20, || {
        c = client.get_connection().ok();
        c.is_some()
    });
    let mut c = c.unwrap();
    let modules = format!("{:?}", run(&mut c, &["MODULE", "LIST"]).unwrap());
    let token = cl(&mut c, "RL.TOKEN t 5 1000");
    // redis-cell answers: its key is a string.
    let throttle = cl(&mut c, "CL.THROTTLE x 15 30 60");
    let ty = text(&mut c, &["TYPE", "x"]);
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        modules.contains("ratelimit") && modules.contains("redis-cell"),
        "{modules}"
    );
    assert_eq!(token, [1, 5, 4, 0, 200]);
    assert_eq!(throttle, [0, 16, 15, -1, 2]);
    assert_eq!(ty, "string");
    assert!(
        log.contains("ratelimit: CL.THROTTLE is taken (by another module loaded before"),
        "{log}"
    );
}
