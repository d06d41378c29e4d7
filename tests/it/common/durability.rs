//! What tests/it/durability.rs, tests/it/durability_restarts.rs and
//! tests/it/durability_maxmemory.rs share: a generator for each client, limiter calls as
//! words, and INFO fields.

use redis::Connection;

use super::text;

/// A small xorshift generator: each client its own sequence, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A limiter call as words, with `COST cost` appended.
pub fn call_words(line: &str, cost: u64) -> Vec<String> {
    let mut words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    words.extend(["COST".to_owned(), cost.to_string()]);
    words
}

pub fn query(c: &mut Connection, words: &[String]) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd(&words[0]);
    for w in &words[1..] {
        cmd.arg(w);
    }
    cmd.query(c)
}

pub fn info_field(c: &mut Connection, section: &str, field: &str) -> String {
    let info = text(c, &["INFO", section]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .trim()
        .to_owned()
}

pub fn key_of(line: &str) -> &str {
    line.split_whitespace().nth(1).expect("a key")
}
