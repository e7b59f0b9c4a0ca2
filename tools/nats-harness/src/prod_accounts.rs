//! The shipped accounts and permissions (`nats/prod/accounts.conf`), the hub's leaf-node users,
//! and test passwords for every user in them, so permission and topology tests run servers with
//! exactly what production gets.

use crate::{NatsServer, ServerError};
use std::path::Path;

/// `nats/prod/accounts.conf`, as shipped.
pub const ACCOUNTS_CONF: &str = include_str!("../../../nats/prod/accounts.conf");

/// `nats/prod/hub-leaf-users.conf`, as shipped: the DCs' leaf-node users, included in the
/// hub nodes' `leafnodes` block.
pub const HUB_LEAF_USERS_CONF: &str = include_str!("../../../nats/prod/hub-leaf-users.conf");

/// The password variables `accounts.conf` and `hub-leaf-users.conf` read, with test values
/// (user → `<name>-pw`-style).
pub const TEST_PASSWORDS: [(&str, &str); 11] = [
    ("LH_SYS_PASSWORD", "sys-pw"),
    ("LH_COORDINATOR_PASSWORD", "coord-pw"),
    ("LH_DC_BKK_PASSWORD", "bkk-pw"),
    ("LH_DC_EUROPE_PASSWORD", "eu-pw"),
    ("LH_POD_PASSWORD", "pod-pw"),
    ("LH_INSPECT_PASSWORD", "inspect-pw"),
    ("LH_KEYS_PASSWORD", "keys-pw"),
    ("LH_KEYS_ADMIN_PASSWORD", "keys-admin-pw"),
    ("LH_LIMITS_ADMIN_PASSWORD", "limits-admin-pw"),
    ("LH_LEAF_BKK_PASSWORD", "leaf-bkk-pw"),
    ("LH_LEAF_EUROPE_PASSWORD", "leaf-europe-pw"),
];

/// The leaf-node URL variables a DC node's file reads (`nats/prod/<dc>-<n>.conf`), pointing at
/// the shipped hub nodes' leaf ports with the test passwords: enough to check the files.
pub const TEST_LEAF_URLS: [(&str, &str); 6] = [
    ("LH_LEAF_BKK_URL_1", "nats-leaf://leaf-bkk:leaf-bkk-pw@127.0.0.1:17211"),
    ("LH_LEAF_BKK_URL_2", "nats-leaf://leaf-bkk:leaf-bkk-pw@127.0.0.1:17212"),
    ("LH_LEAF_BKK_URL_3", "nats-leaf://leaf-bkk:leaf-bkk-pw@127.0.0.1:17213"),
    ("LH_LEAF_EUROPE_URL_1", "nats-leaf://leaf-europe:leaf-europe-pw@127.0.0.1:17211"),
    ("LH_LEAF_EUROPE_URL_2", "nats-leaf://leaf-europe:leaf-europe-pw@127.0.0.1:17212"),
    ("LH_LEAF_EUROPE_URL_3", "nats-leaf://leaf-europe:leaf-europe-pw@127.0.0.1:17213"),
];

/// A server with the shipped accounts and [`TEST_PASSWORDS`].
pub fn start(binary: &Path) -> Result<NatsServer, ServerError> {
    let files = [("server.conf", "include ./accounts.conf\n"), ("accounts.conf", ACCOUNTS_CONF)];
    NatsServer::start_with_config(binary, &files, &TEST_PASSWORDS)
}
