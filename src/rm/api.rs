//! The module API as the generic layers use it, each concern in a file of its own: arguments
//! ([`super::arg`]), answers ([`super::reply`]), command registration and dispatch
//! ([`super::dispatch`]), replication ([`super::replicate`]), ACL ([`super::acl`]), blocked
//! clients and timers ([`super::blocked`]), the server clock ([`super::server`]).

pub use super::acl::{add_acl_category, may_run, Acl};
pub use super::arg::{words_into, Arg, KeptString, OwnedString};
pub use super::blocked::{
    block_client, blocked_privdata, create_timer, select_db, selected_db, stop_timer, unblock,
    BlockedClient, TimerId,
};
pub use super::dispatch::{register, Count, Handler};
pub use super::replicate::{
    replicate_del, replicate_effect, replicate_effects, replicate_expire_at,
};
pub use super::reply::{
    allowed, info_field, reply, reply_all, reply_error, reply_hit, Answer, ALL_INLINE,
};
pub use super::server::{now, now_ms};
