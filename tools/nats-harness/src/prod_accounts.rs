//! The shipped accounts and permissions (`nats/prod/accounts.conf`) and test passwords for every
//! user in it, so permission tests run a server with exactly what production gets.

use crate::{NatsServer, ServerError};
use std::path::Path;

/// `nats/prod/accounts.conf`, as shipped.
pub const ACCOUNTS_CONF: &str = include_str!("../../../nats/prod/accounts.conf");

/// The password variables `accounts.conf` reads, with test values (user → `<name>-pw`-style).
pub const TEST_PASSWORDS: [(&str, &str); 9] = [
    ("LH_SYS_PASSWORD", "sys-pw"),
    ("LH_COORDINATOR_PASSWORD", "coord-pw"),
    ("LH_DC_BKK_PASSWORD", "bkk-pw"),
    ("LH_DC_EUROPE_PASSWORD", "eu-pw"),
    ("LH_POD_PASSWORD", "pod-pw"),
    ("LH_INSPECT_PASSWORD", "inspect-pw"),
    ("LH_KEYS_PASSWORD", "keys-pw"),
    ("LH_KEYS_ADMIN_PASSWORD", "keys-admin-pw"),
    ("LH_LIMITS_ADMIN_PASSWORD", "limits-admin-pw"),
];

/// A server with the shipped accounts and [`TEST_PASSWORDS`].
pub fn start(binary: &Path) -> Result<NatsServer, ServerError> {
    let files = [("server.conf", "include ./accounts.conf\n"), ("accounts.conf", ACCOUNTS_CONF)];
    NatsServer::start_with_config(binary, &files, &TEST_PASSWORDS)
}
