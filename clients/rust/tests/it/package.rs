//! The package's ties to the repository: its version and its copies of the Lua twins.

use crate::support::repo;

#[test]
fn its_version_is_the_modules() {
    let top = std::fs::read_to_string(repo().join("Cargo.toml")).expect("the top-level Cargo.toml");
    let version = top
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a version line in the top-level Cargo.toml");
    assert_eq!(env!("CARGO_PKG_VERSION"), version);
}

#[test]
fn its_lua_twins_are_byte_identical_to_clients_lua() {
    let canonical = repo().join("clients/lua");
    let embedded = [
        ("fixed.lua", redis_ratelimit_client::FIXED_LUA),
        ("slide.lua", redis_ratelimit_client::SLIDE_LUA),
        ("token.lua", redis_ratelimit_client::TOKEN_LUA),
    ];
    for (name, text) in embedded {
        let original = std::fs::read(canonical.join(name))
            .unwrap_or_else(|e| panic!("clients/lua/{name}: {e}"));
        assert!(
            original == text.as_bytes(),
            "clients/rust/lua/{name} differs from clients/lua/{name}: copy it again \
             (cp clients/lua/*.lua clients/rust/lua/)"
        );
    }
}
