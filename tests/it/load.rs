//! Loading the module: its settings on the `loadmodule` line, and the reasons a load fails,
//! written to the server's log.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{err, module_path, run, server, text, Server};
use rstest::rstest;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs `redis-server` with the module and `args` on its `loadmodule` line, expecting it to
/// refuse to start: the log it wrote.
fn refused_start(args: &[&str]) -> String {
    let dir =
        std::env::temp_dir().join(format!("rl-load-{}-{}", std::process::id(), args.join("_")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let loadmodule = std::iter::once(module_path().display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let conf = format!(
        "port {}\nbind 127.0.0.1\nlogfile redis.log\nsave \"\"\nloadmodule {loadmodule}\n",
        free_port()
    );
    std::fs::write(dir.join("redis.conf"), conf).unwrap();
    let mut child = Command::new("redis-server")
        .arg(dir.join("redis.conf"))
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.is_some_and(|s| !s.success()),
        "the server started with {args:?}: {log}"
    );
    log
}

#[test]
fn an_argument_that_is_no_setting_is_refused_with_its_reason() {
    let log = refused_start(&["bogus-arg", "1"]);
    assert!(
        log.contains("ratelimit: not loaded: 'bogus-arg' on the loadmodule line is no setting"),
        "{log}"
    );
    let log = refused_start(&["now-max-ahead-ms"]);
    assert!(log.contains("needs a value"), "{log}");
    let log = refused_start(&["now-max-ahead-ms", "-2"]);
    assert!(log.contains("must be an integer from -1"), "{log}");
    let log = refused_start(&["now-max-ahead-ms", "5", "now-max-ahead-ms", "6"]);
    assert!(log.contains("given twice"), "{log}");
}

#[test]
fn a_setting_on_the_loadmodule_line_is_taken() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("rl-load-ok-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new("redis-server")
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
        .arg("--loadmodule")
        .arg(module_path())
        .args(["ratelimit.now-max-ahead-ms", "5000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        if let Ok(mut c) = client.get_connection() {
            if let Ok(v) = redis::cmd("CONFIG")
                .arg("GET")
                .arg("ratelimit.now-max-ahead-ms")
                .query::<Vec<String>>(&mut c)
            {
                break v;
            }
        }
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(got, ["ratelimit.now-max-ahead-ms", "5000"]);
}

#[rstest]
fn a_second_load_says_why_it_fails(server: Server) {
    let mut c = server.conn();
    let path = module_path().display().to_string();
    let e = err(&mut c, &["MODULE", "LOAD", &path]);
    assert!(e.contains("Error loading the extension"), "{e}");
    let log = server.log();
    assert!(
        log.contains("ratelimit: a module named 'ratelimit' is loaded already (see MODULE LIST)"),
        "{log}"
    );
    // The loaded module works on.
    let list = format!("{:?}", run(&mut c, &["MODULE", "LIST"]).unwrap());
    assert!(list.contains("ratelimit"), "{list}");
    assert_eq!(text(&mut c, &["TYPE", "none"]), "none");
}
