//! Picks the [`Store`] for the configured servers: the one place that knows every backend. Above
//! `store.rs` and `quorum/`; the commands, `exec` (and its renewal thread) and the waiting
//! loop's signal thread open their store here.
//!
//! Layer 10 of the list in `lib.rs`.

use anyhow::Result;

use crate::client::Redis;
use crate::config::{Config, Servers};
use crate::quorum::Nodes;
use crate::store::Store;

/// Connects to the configured servers (a quorum connects to each node when first used).
pub fn open(config: &Config) -> Result<Box<dyn Store>> {
    Ok(match &config.servers {
        Servers::Quorum(_) => Box::new(Nodes::new(config)),
        _ => Box::new(Redis::connect(config)?),
    })
}
