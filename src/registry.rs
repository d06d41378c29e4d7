//! The registry's mechanism: from a list of kinds, one line each (in `lib.rs`), it makes
//! everything the generic layers need to serve them, so that nothing else names a kind.
//!
//! A line is `module::State, form, commands;`, with attributes if any (`#[cfg(test)]`: a
//! kind that exists in test builds only, as `probe` does):
//! - `module` is the kind's unit under `src/kinds/` (the line declares it), `State` the
//!   state its keys hold (its `core::kind::Kind`);
//! - `form` is how a key keeps it (`boxed`, `compact` or `block`, its `Kind::FORM`,
//!   checked at compile time), which chooses its storage hooks (`rm::storage`);
//! - `commands` is `rate` for a rate limiter (its one command is made from its `Rate`), or
//!   the list of its commands' types in its module (`[Acquire, Release, Extend]`).
//!
//! A kind's index in the registry is its place in the list: it is kept in compact values'
//! parameter sets (in memory only, never on disk: the encoding names a kind by its
//! `Kind::CODE`). Kinds that keep a box take the storage's own pointer tags as
//! `rm::storage::places` gives them (by form and size, then the list's order).
//!
//! The list makes, at the crate's root:
//! - `pub mod kinds { pub mod module; ... }`;
//! - for each kind, its `rm::storage::Stored` (index, place) and storage hooks;
//! - `install()`: the kinds' storage operations and the engine's catalog (each kind's
//!   generic operations and every command), installed at load before anything runs;
//! - `register(ctx, own)`: every command registered, the kinds' and the generic ones;
//! - in test builds, `visit(v)`: every kind and command handed to a test that runs over
//!   them all (`engine::Visit`), so that no test keeps a list of kinds.

/// The one mechanism behind the list of kinds (see the module's docs).
macro_rules! kinds {
    ($($(#[$attr:meta])* $module:ident :: $state:ident, $form:ident, $commands:tt;)+) => {
        /// Every kind of limiter: one unit each, which knows no Redis API.
        #[forbid(unsafe_code)]
        pub mod kinds {
            $($(#[$attr])* pub mod $module;)+
        }

        /// The kinds in the registry's order, each as its place, storage and commands.
        mod registered {
            use super::kinds;
            use $crate::core::kind::{Form, Kind};
            use $crate::engine::{rate::RateCommand, Catalog, CommandEntry, KindEntry};
            use $crate::rm::storage::{self, Ops, Place, Stored};

            const CODES: &[u8] = &[$($(#[$attr])* <kinds::$module::$state as Kind>::CODE),+];
            const N: usize = CODES.len();
            const FORMS: [(Form, usize); N] = [$($(#[$attr])* (
                <kinds::$module::$state as Kind>::FORM,
                std::mem::size_of::<kinds::$module::$state>(),
            )),+];
            const PLACES: [Place; N] = storage::places(FORMS);

            /// A kind's index: its place in the list (its code is unique: checked below).
            const fn index_of(code: u8) -> u8 {
                let mut i = 0;
                while i < N {
                    if CODES[i] == code {
                        return i as u8;
                    }
                    i += 1;
                }
                panic!("a kind that is not in the list")
            }

            const _: () = {
                let mut i = 0;
                while i < N {
                    assert!(index_of(CODES[i]) as usize == i, "two kinds share a code");
                    i += 1;
                }
            };

            /// Every command's effect code (`Command::EFFECT_CODE`, 0 for a textual
            /// effect), the generic commands' with the kinds': a replica applies an effect
            /// by its code, so no two commands may share one.
            const EFFECT_CODES: &[&[u8]] = &[
                &[
                    $crate::engine::generic::REFUND_CODE,
                    $crate::engine::generic::CHARGE_CODE,
                ],
                $($(#[$attr])* $crate::registry::effect_codes!($module, $state, $commands),)+
            ];

            const _: () = assert!(
                $crate::registry::distinct_codes(EFFECT_CODES),
                "two commands share an effect code"
            );

            $(
                $(#[$attr])*
                impl Stored for kinds::$module::$state {
                    const INDEX: u8 = index_of(<Self as Kind>::CODE);
                    const PLACE: Place = PLACES[Self::INDEX as usize];
                }
                $(#[$attr])*
                $crate::registry::hooks!($form, kinds::$module::$state);
            )+

            static OPS: [Ops; N] = [$($(#[$attr])* storage::ops::<kinds::$module::$state>()),+];
            static IN_FAMILY: [(u8, $crate::core::kind::InFamily); N] =
                [$($(#[$attr])* storage::in_family::<kinds::$module::$state>()),+];
            static KINDS: [KindEntry; N] = [
                $($(#[$attr])* KindEntry::of::<kinds::$module::$state>()),+
            ];
            static COMMANDS: [&[CommandEntry]; N] = [$(
                $(#[$attr])* $crate::registry::commands!($module, $state, $commands)
            ),+];
            static CATALOG: Catalog = Catalog {
                kinds: &KINDS,
                commands: &COMMANDS,
            };

            /// Installs the kinds: their storage operations, and the engine's catalog.
            pub fn install() {
                storage::install(&OPS, storage::tag_kinds(PLACES));
                $crate::core::kind::install_in_family(&IN_FAMILY);
                $crate::engine::install(&CATALOG);
            }

            /// Hands every kind and every command to `v`, in the list's order (tests that
            /// run over the kinds: see `engine::Visit`).
            #[cfg(test)]
            pub fn visit<V: $crate::engine::Visit>(v: &mut V) {
                $($(#[$attr])* $crate::registry::visit!(v, $module, $state, $commands);)+
            }
        }

        pub use registered::install;
        #[cfg(test)]
        pub use registered::visit;
    };
}

/// A kind's storage hooks, from its form (checked against its `Kind::FORM`).
macro_rules! hooks {
    (boxed, $state:ty) => {
        const _: () = assert!(matches!(<$state as Kind>::FORM, Form::Boxed));
        $crate::boxed_hooks!($state);
    };
    (compact, $state:ty) => {
        const _: () = assert!(matches!(<$state as Kind>::FORM, Form::Compact));
        $crate::compact_hooks!($state);
    };
    (block, $state:ty) => {
        const _: () = assert!(matches!(<$state as Kind>::FORM, Form::Block));
        $crate::block_hooks!($state);
    };
}

/// A kind's commands' effect codes, as a list for [`kinds`]' array (see
/// [`distinct_codes`]).
macro_rules! effect_codes {
    ($module:ident, $state:ident, rate) => {
        &[<kinds::$module::$state as $crate::core::kind::Rate>::EFFECT_CODE]
    };
    ($module:ident, $state:ident, [$($command:ident),+]) => {
        &[$(<kinds::$module::$command as $crate::core::kind::Command>::EFFECT_CODE),+]
    };
}

/// Whether the effect codes other than 0 (a textual effect) are all different, over every
/// group of them.
pub const fn distinct_codes(groups: &[&[u8]]) -> bool {
    let mut seen = [false; 256];
    let mut g = 0;
    while g < groups.len() {
        let codes = groups[g];
        let mut i = 0;
        while i < codes.len() {
            let code = codes[i] as usize;
            if code != 0 && seen[code] {
                return false;
            }
            seen[code] = true;
            i += 1;
        }
        g += 1;
    }
    true
}

/// A kind's command entries: its rate command, or its list of commands.
macro_rules! commands {
    ($module:ident, $state:ident, rate) => {
        &[CommandEntry::of::<RateCommand<kinds::$module::$state>>()]
    };
    ($module:ident, $state:ident, [$($command:ident),+]) => {
        &[$(CommandEntry::of::<kinds::$module::$command>()),+]
    };
}

/// A kind handed to a test's visitor: with the command that makes its keys (its rate
/// command, or the first of its list), then each of its commands.
#[cfg(test)]
macro_rules! visit {
    ($v:ident, $module:ident, $state:ident, rate) => {{
        $v.kind::<kinds::$module::$state, RateCommand<kinds::$module::$state>>();
        $v.command::<RateCommand<kinds::$module::$state>>();
    }};
    ($v:ident, $module:ident, $state:ident, [$first:ident $(, $rest:ident)*]) => {{
        $v.kind::<kinds::$module::$state, kinds::$module::$first>();
        $v.command::<kinds::$module::$first>();
        $($v.command::<kinds::$module::$rest>();)*
    }};
}

#[cfg(test)]
pub(crate) use visit;
pub(crate) use {commands, effect_codes, hooks, kinds};

#[cfg(test)]
mod tests {
    use super::distinct_codes;

    #[test]
    fn effect_codes_are_checked_for_duplicates() {
        assert!(distinct_codes(&[&[6, 7], &[1], &[2, 0, 0], &[]]));
        assert!(!distinct_codes(&[&[6, 7], &[1], &[7]]));
        assert!(!distinct_codes(&[&[3, 3]]));
    }
}
