//! The lease commands' grammar, and their effects: ids in hex that parse back.

use super::*;
use crate::core::args::words;
use crate::core::effect::{Line, Words};

#[test]
fn parses_acquire() {
    let req = Acquire::parse(&words("5 30000"), false).unwrap();
    assert_eq!(
        (req.params, req.cost, req.id, req.block),
        (
            Params {
                limit: 5,
                lease_ms: 30000
            },
            1,
            None,
            None
        )
    );
    // An id may hold a space: one word as a client sends it.
    let a: [&[u8]; 10] = [
        b"5", b"30000", b"id", b"job 1", b"COST", b"2", b"BLOCK", b"0", b"NOW", b"7",
    ];
    let req = Acquire::parse(&a, false).unwrap();
    assert_eq!(req.id.as_deref(), Some(&b"job 1"[..]));
    assert_eq!((req.cost, req.block, req.now), (2, Some(0), Some(Instant::from_ms(7))));
    assert_eq!(
        Acquire::parse(&words("5 30000 ID 6a6f62"), true)
            .unwrap()
            .id
            .as_deref(),
        Some(&b"job"[..])
    );
    let long = "x".repeat(513);
    for (bad, err) in [
        (&[&b"0"[..], b"1"][..], "limit"),
        (&[b"1", b"0"], "lease_ms"),
        (&[b"1", b"1", b"ID", b""], "1 to 512"),
        (&[b"1", b"1", b"ID", long.as_bytes()], "1 to 512"),
        (&[b"1", b"1", b"ID", b"a", b"ID", b"b"], "more than once"),
        (&[b"1", b"1", b"BLOCK"], "needs a value"),
        (&[b"1", b"1", b"BLOCK", b"-1"], "BLOCK"),
        (&[b"1", b"1", b"WAIT", b"1"], "unknown option"),
        (&[b"1"], "wrong number"),
    ] {
        let e = Acquire::parse(bad, false).unwrap_err().to_string();
        assert!(e.contains(err), "{bad:?}: {e}");
    }
    for bad in [&b"6"[..], b"6A", b"zz", b""] {
        assert!(Acquire::parse(&[b"1", b"1", b"ID", bad], true).is_err());
    }
}

#[test]
fn parses_release_and_extend() {
    let r = Release::parse(&[b"a b", b"NOW", b"5"], false).unwrap();
    assert_eq!((&*r.id, r.now), (&b"a b"[..], Some(Instant::from_ms(5))));
    let e = Extend::parse(&words("a 100"), false).unwrap();
    assert_eq!(e.lease_ms, 100);
    assert!(Extend::parse(&words("a"), false).is_err());
    assert!(Release::parse(&words("a 100"), false).is_err());
    assert!(Release::parse(&[], false).is_err());
}

/// The effect `C` writes for `call` (answered `reply`) at 5, and the words after the key
/// that an `RL.APPLY` of it parses.
fn effect<C: Command>(call: &C::Call<'_>, reply: &Reply) -> Vec<u8> {
    let mut line = Line::new(C::INFO.name);
    C::effect(call, reply, Instant::from_ms(5), &mut line);
    line.as_bytes().unwrap().to_vec()
}

fn parse_back<'a, C: Command>(line: &'a [u8]) -> C::Call<'a> {
    let words = Words::split(b"k", line).unwrap();
    assert_eq!(words.command(), C::INFO.name.as_bytes());
    C::parse(&words.as_slice()[2..], true).unwrap()
}

#[test]
fn effects_carry_ids_in_hex() {
    let id: &[u8] = b"a b\x00\xff";
    let release = Release::parse(&[id], false).unwrap();
    let line = effect::<Release>(&release, &Reply::Ok);
    assert_eq!(line, b"RL.RELEASE 61206200ff NOW 5");
    assert_eq!(from_hex(b"61206200ff").as_deref(), Some(id));
    let back = parse_back::<Release>(&line);
    assert_eq!((&*back.id, back.now), (id, Some(Instant::from_ms(5))));

    let extend = Extend::parse(&[id, b"100"], false).unwrap();
    let line = effect::<Extend>(&extend, &Reply::Ok);
    assert_eq!(line, b"RL.EXTEND 61206200ff 100 NOW 5");
    let back = parse_back::<Extend>(&line);
    assert_eq!((&*back.id, back.lease_ms, back.now), (id, 100, Some(Instant::from_ms(5))));

    // A grant writes the id the run answered (one the server made, or the client's).
    let acquire = Acquire::parse(&words("5 30000 COST 2"), false).unwrap();
    let decision = Leases::new(&acquire.params).peek(Instant::from_ms(5));
    let granted = Reply::Lease(decision, Some(id.to_vec()));
    let line = effect::<Acquire>(&acquire, &granted);
    assert_eq!(line, b"RL.ACQUIRE 5 30000 ID 61206200ff COST 2 NOW 5");
    let back = parse_back::<Acquire>(&line);
    assert_eq!(back.id.as_deref(), Some(id));
    assert_eq!(
        (back.params, back.cost, back.block, back.now),
        (acquire.params, 2, None, Some(Instant::from_ms(5)))
    );
    let named = Acquire::parse(&[b"5", b"30000", b"ID", id], false).unwrap();
    let line = effect::<Acquire>(&named, &Reply::Lease(decision, None));
    assert_eq!(line, b"RL.ACQUIRE 5 30000 ID 61206200ff NOW 5");
    assert_eq!(parse_back::<Acquire>(&line).id.as_deref(), Some(id));
}

/// A lease at the edges: limits from 1 to 10^9, leases from 1 ms to 31 days, an id of its
/// own or the server's ([`sample_id`]).
impl crate::core::sample::Sample for Leases {
    fn sample_words(p: [u8; 4], now: Instant) -> String {
        use crate::core::sample::{cost_word, pick, DAY31};
        let limit = pick(p[0], &[1, 10, 1_000_000_000]);
        let lease = pick(p[1], &[1, 1000, DAY31]);
        let id = match sample_id(p[3], now) {
            Some(id) => format!(" ID {id}"),
            None => String::new(),
        };
        format!("ACQUIRE {limit} {lease}{id}") + &cost_word(p[2], limit)
    }
}
