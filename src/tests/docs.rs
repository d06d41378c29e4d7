//! The docs against the registry: every kind's commands have their section in
//! `docs/commands.md`, every limiter `RL.ALL` takes is in its section, every rate command
//! is in the README's table, and a kind that exists in test builds only is in none.

use crate::core::kind::Command;
use crate::core::sample::Sample;
use crate::engine::call::Storable;
use crate::engine::Visit;

const COMMANDS_MD: &str = include_str!("../../docs/commands.md");
const README: &str = include_str!("../../README.md");

/// Every command of the registry: its name, its keyword in `RL.ALL` (for the command that
/// makes its kind's keys), and whether its kind is in test builds only.
#[derive(Default)]
struct Names {
    test_only: bool,
    commands: Vec<(&'static str, Option<&'static str>, bool)>,
}

impl Visit for Names {
    fn kind<K, C>(&mut self)
    where
        K: Storable + Sample,
        C: Command<Kind = K>,
    {
        self.test_only = K::TEST_ONLY;
        let keyword = C::SPEC.map(|(keyword, _)| keyword);
        self.commands.push((C::INFO.name, keyword, K::TEST_ONLY));
    }

    fn command<C: Command>(&mut self)
    where
        C::Kind: Storable,
    {
        if !self.commands.iter().any(|(name, ..)| *name == C::INFO.name) {
            self.commands.push((C::INFO.name, None, self.test_only));
        }
    }
}

/// `RL.ALL`'s section of `docs/commands.md`.
fn all_section() -> &'static str {
    let start = COMMANDS_MD.find("### RL.ALL ").unwrap_or_default();
    let rest = &COMMANDS_MD[start..];
    let end = rest[4..].find("\n## ").map_or(rest.len(), |e| e + 4);
    &rest[..end]
}

#[test]
fn the_docs_name_every_kind_and_command() {
    let mut names = Names::default();
    crate::visit(&mut names);
    assert!(names.commands.len() >= 9);
    for (name, keyword, test_only) in names.commands {
        let heading = format!("\n### {name} key");
        let in_readme = README.contains(&format!("`{name}`"));
        let spec = keyword.map(|k| format!("`{k} "));
        let in_all = spec.as_ref().map(|s| all_section().contains(s.as_str()));
        if test_only {
            assert!(!COMMANDS_MD.contains(name) && !in_readme, "{name}");
            assert_ne!(in_all, Some(true), "{name}");
            continue;
        }
        assert!(
            COMMANDS_MD.contains(&heading),
            "docs/commands.md: no `{heading}`"
        );
        assert!(in_readme, "README.md does not name {name}");
        assert_ne!(
            in_all,
            Some(false),
            "RL.ALL's section does not list {spec:?}"
        );
    }
}
