//! Where each shard is answered: the HTTP address of its owner, as this instance's watch of the
//! shards bucket last showed it (`GET /v1/shards`). A client that computes a key's shard
//! (`keys::shard_of`, FNV-1a) can send the request straight to the owner and save the forward;
//! any instance still answers any key, so a stale table costs a hop, never a wrong answer.

use serde::Serialize;
use std::sync::{Arc, RwLock};

/// The body of `GET /v1/shards`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShardRoutes {
    pub v: u32,
    pub shards: u32,
    /// Per shard, the owner's HTTP address (`host:port`), or null while it has none.
    pub owners: Vec<Option<String>>,
}

#[derive(Clone, Default)]
pub struct Routes(Arc<RwLock<Arc<ShardRoutes>>>);

impl Routes {
    pub fn set(&self, owners: Vec<Option<String>>) {
        let routes = ShardRoutes { v: leasehold_core::wire::SCHEMA_VERSION, shards: owners.len() as u32, owners };
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        if current.owners != routes.owners {
            *current = Arc::new(routes);
        }
    }

    pub fn get(&self) -> Arc<ShardRoutes> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
