//! ACL: which users may run the RL.* commands, on whatever redis-server is on PATH.
//!
//! What a server gives module commands depends on its version: nothing before 7.2 (users are
//! granted `+rl.slide` by name), the standard categories (`@write`, `@read`, `@fast`,
//! `@slow`) from 7.2, and the module's own `@ratelimit` from Redis 7.4 and Valkey 8.0. The
//! tests read the server's version and assert what that version should give.

use crate::common::{err, run, text, Server};
use redis::Connection;
use rstest::rstest;

/// What the server on PATH is.
struct Version {
    valkey: bool,
    /// `valkey_version` on Valkey (whose `redis_version` stays 7.2.4), else `redis_version`.
    number: (u32, u32),
    /// `redis_version`: the Redis module API the server implements.
    redis: (u32, u32),
}

impl Version {
    fn of(c: &mut Connection) -> Version {
        let info = text(c, &["INFO", "server"]);
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let parse = |v: &str| {
            let mut parts = v
                .split('.')
                .map(|p| p.parse::<u32>().expect("version number"));
            (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
        };
        let redis = parse(&field("redis_version").expect("redis_version"));
        let valkey = field("server_name").is_some_and(|n| n == "valkey");
        let number = match field("valkey_version") {
            Some(v) if valkey => parse(&v),
            _ => redis,
        };
        Version {
            valkey,
            number,
            redis,
        }
    }

    /// `RedisModule_SetCommandACLCategories`: Redis 7.2, and every Valkey.
    fn has_categories(&self) -> bool {
        self.redis >= (7, 2)
    }

    /// `RedisModule_AddACLCategory`: Redis 7.4, Valkey 8.0.
    fn has_own_category(&self) -> bool {
        if self.valkey {
            self.number >= (8, 0)
        } else {
            self.number >= (7, 4)
        }
    }
}

/// A connection authenticated as `user`, created with `rules` (passwordless).
fn user(s: &Server, admin: &mut Connection, user: &str, rules: &[&str]) -> Connection {
    let mut words = vec!["ACL", "SETUSER", user, "reset", "on", "nopass", "~*"];
    words.extend_from_slice(rules);
    run(admin, &words).expect("ACL SETUSER");
    let mut c = s.conn();
    run(&mut c, &["AUTH", user, "any"]).expect("AUTH");
    c
}

/// Whether the user may run the command: allowed, or refused by something other than ACL.
fn may(c: &mut Connection, words: &[&str]) -> bool {
    match run(c, words) {
        Ok(_) => true,
        Err(e) => e.code() != Some("NOPERM"),
    }
}

const SLIDE: &[&str] = &["RL.SLIDE", "k", "10", "60000"];
const PEEK: &[&str] = &["RL.PEEK", "k"];

/// One call of every command an application runs.
const ALL: [&[&str]; 9] = [
    SLIDE,
    &["RL.TOKEN", "t", "10", "60000"],
    &["RL.LEAKY", "l", "10", "60000"],
    &["RL.FIXED", "f", "10", "60000"],
    &["RL.SUBWIN", "s", "10", "60000", "1000"],
    PEEK,
    &["RL.REFUND", "k"],
    &["RL.CHARGE", "k", "COST", "1"],
    &[
        "RL.ALL", "2", "{a}1", "{a}2", "TOKEN", "10", "60000", "FIXED", "5", "1000",
    ],
];

/// The internal commands (what replication and the AOF carry), which no rule an
/// application user is given lets it run; their payload and effect are refused, but not by
/// ACL, for a user who may run them.
const INTERNAL: [&[&str]; 2] = [
    &["RL.RESTORE", "r", "not-a-payload"],
    &["RL.APPLY", "a", "not-an-effect"],
];

/// The standard categories of each command (`ACL CAT` leaves module commands out; `COMMAND
/// INFO` shows them).
const CATEGORIES: [(&str, &[&str]); 11] = [
    ("RL.SLIDE", &["@write", "@fast"]),
    ("RL.TOKEN", &["@write", "@fast"]),
    ("RL.LEAKY", &["@write", "@fast"]),
    ("RL.FIXED", &["@write", "@fast"]),
    ("RL.SUBWIN", &["@write", "@slow"]),
    ("RL.PEEK", &["@read", "@slow"]),
    ("RL.REFUND", &["@write", "@slow"]),
    ("RL.CHARGE", &["@write", "@slow"]),
    ("RL.ALL", &["@write", "@slow"]),
    // Internal: in neither @write nor @ratelimit.
    ("RL.RESTORE", &["@admin", "@dangerous", "@slow"]),
    ("RL.APPLY", &["@admin", "@dangerous", "@slow"]),
];

/// The ACL categories `COMMAND INFO` gives a command, sorted.
fn categories(c: &mut Connection, name: &str) -> Vec<String> {
    let info: Vec<Vec<redis::Value>> =
        redis::from_redis_value(&run(c, &["COMMAND", "INFO", name]).expect("COMMAND INFO"))
            .unwrap();
    let mut v: Vec<String> = redis::from_redis_value(&info[0][6]).unwrap();
    v.sort();
    v
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    v.sort();
    v
}

#[rstest]
fn write_and_read_categories_where_the_server_has_them() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    let v = Version::of(&mut admin);
    let mut rw = user(&s, &mut admin, "rw", &["+@write", "+@read"]);
    let mut ro = user(&s, &mut admin, "ro", &["+@read", "-@write"]);
    if !v.has_categories() {
        // 7.0: module commands are in no category, so neither user may run them.
        assert!(!may(&mut rw, SLIDE) && !may(&mut rw, PEEK));
        assert!(!may(&mut ro, PEEK));
        for (name, _) in CATEGORIES {
            assert!(categories(&mut admin, name).is_empty(), "{name}");
        }
        assert!(!s.log().contains("refused ACL categories"), "{}", s.log());
        return;
    }
    for words in ALL {
        assert!(may(&mut rw, words), "+@write +@read may run {words:?}");
    }
    for words in INTERNAL {
        assert!(!may(&mut rw, words), "+@write +@read may not run {words:?}");
    }
    assert!(may(&mut ro, PEEK));
    assert!(
        err(&mut ro, SLIDE).starts_with("NOPERM"),
        "-@write may not run RL.SLIDE"
    );
    let own = v.has_own_category();
    for (name, expected) in CATEGORIES {
        let mut expected = expected.to_vec();
        if own && !INTERNAL.iter().any(|w| w[0] == name) {
            expected.push("@ratelimit");
        }
        assert_eq!(categories(&mut admin, name), sorted(&expected), "{name}");
    }
    // A -@slow user keeps the O(1) and O(log N) commands.
    let mut quick = user(&s, &mut admin, "quick", &["+@all", "-@slow"]);
    assert!(may(&mut quick, SLIDE) && !may(&mut quick, PEEK));
    // The module names only categories that exist: the server refused none of its lists.
    assert!(!s.log().contains("refused ACL categories"), "{}", s.log());
}

#[rstest]
fn ratelimit_category_where_the_server_can_add_it() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    let v = Version::of(&mut admin);
    let all: Vec<String> =
        redis::from_redis_value(&run(&mut admin, &["ACL", "CAT"]).expect("ACL CAT")).unwrap();
    let exists = all.iter().any(|c| c == "ratelimit");
    assert_eq!(
        exists,
        v.has_own_category(),
        "@ratelimit exists on {:?} {:?}: {exists}",
        v.number,
        v.valkey
    );
    if !exists {
        return;
    }
    let mut rl = user(&s, &mut admin, "rl", &["+@ratelimit"]);
    for words in ALL {
        assert!(may(&mut rl, words), "+@ratelimit may run {words:?}");
    }
    for words in INTERNAL {
        assert!(!may(&mut rl, words), "+@ratelimit may not run {words:?}");
    }
    assert!(err(&mut rl, &["SET", "x", "1"]).starts_with("NOPERM"));
    let mut others = user(&s, &mut admin, "others", &["+@all", "-@ratelimit"]);
    assert!(err(&mut others, SLIDE).starts_with("NOPERM"));
    assert!(may(&mut others, &["SET", "x", "1"]));
}

/// The internal commands refuse every application user, on every version: by ACL where
/// module commands have categories, by the module itself where they have none (7.0). An
/// administrator (a user allowed CONFIG SET) runs them.
#[rstest]
fn internal_commands_are_for_administrators() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    let rules: [&[&str]; 3] = [
        &["+@all", "-@dangerous"],
        &["+@write", "+@read"],
        &["+rl.slide", "+rl.token", "+rl.all", "+rl.peek"],
    ];
    for (i, rules) in rules.iter().enumerate() {
        let mut app = user(&s, &mut admin, &format!("app{i}"), rules);
        for words in INTERNAL {
            let e = err(&mut app, words);
            assert!(e.starts_with("NOPERM"), "{rules:?} ran {words:?}: {e}");
        }
    }
    // Named one by one, they are refused all the same, but for a user allowed CONFIG SET.
    let mut named = user(&s, &mut admin, "named", &["+rl.apply", "+rl.restore"]);
    for words in INTERNAL {
        let e = err(&mut named, words);
        assert!(e.contains("by hand for a user allowed CONFIG SET"), "{e}");
    }
    let mut operator = user(
        &s,
        &mut admin,
        "operator",
        &["+rl.apply", "+rl.restore", "+config|set"],
    );
    for words in INTERNAL {
        assert!(may(&mut operator, words), "{words:?}");
    }
    for words in INTERNAL {
        assert!(may(&mut admin, words), "{words:?}");
    }
}

#[rstest]
fn grant_by_name_on_every_version() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    let mut c = user(&s, &mut admin, "named", &["+rl.slide"]);
    assert!(may(&mut c, SLIDE));
    assert!(err(&mut c, PEEK).starts_with("NOPERM"));
}
