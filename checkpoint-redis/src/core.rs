//! The state every module shares: the connection, the key layout and the settings, with
//! the few calls every module makes (thread keys, global index upkeep, thread scripts).
//! Modules depend on this one, never on `saver.rs`.

use std::fmt;

use checkpoint_core::Result;
use redis::Value;

use crate::chunk::ChunkMemo;
use crate::codec::{array, bulk, text};
use crate::conn::Link;
use crate::error::protocol;
use crate::keys::Layout;
use crate::scripts::Call;
use crate::scripts::{Args, GetArgs, GindexArgs, IndexOp};

/// Shared state of a saver and its clones.
pub(crate) struct Inner {
    pub(crate) link: Link,
    /// The server's `maxmemory-policy` when it evicts keys that have a TTL and the saver
    /// gives none by default: `set_thread_ttl` then refuses to give a thread one.
    pub(crate) ttl_evictable: Option<String>,
    pub(crate) layout: Layout,
    pub(crate) default_ttl_ms: u64,
    pub(crate) refresh_on_read: bool,
    /// Where it connects, password redacted.
    pub(crate) target: String,
    /// Chunk ids of the last list value put per thread and channel.
    pub(crate) chunk_memo: ChunkMemo,
    /// Whether the global index has an entry for every thread (stored layout 2, or brought
    /// up to it when the saver was built); `list_threads` scans the key space otherwise.
    pub(crate) thread_index: bool,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSaver")
            .field("target", &self.target)
            .field("key_prefix", &self.layout.prefix())
            .field("link", &self.link)
            .field("default_ttl_ms", &self.default_ttl_ms)
            .field("refresh_on_read", &self.refresh_on_read)
            .finish()
    }
}

impl Inner {
    /// The keys of `thread_id`, plus the global index key when the script maintains the
    /// global index inline (`with_global` on a single node).
    pub(crate) fn thread_keys(&self, thread_id: &str, with_global: bool) -> Vec<String> {
        let mut keys = self.layout.thread_keys(thread_id);
        if with_global && !self.link.is_cluster() {
            keys.extend(self.layout.global_keys());
        }
        keys
    }

    /// Runs a thread script and returns its reply as an array.
    pub(crate) async fn eval_thread(
        &self,
        args: impl Args,
        thread_id: &str,
        with_global: bool,
    ) -> Result<Vec<Value>> {
        let call = args.call(self.thread_keys(thread_id, with_global));
        array(self.link.eval(&call).await?)
    }

    /// Runs a global index update (on a Cluster, around the thread scripts; see the crate
    /// README, "Cluster").
    pub(crate) async fn gindex(&self, ops: Vec<IndexOp>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let call = GindexArgs { ops }.call(self.layout.global_keys());
        self.link.eval(&call).await?;
        Ok(())
    }

    /// After a thread script on a Cluster: removes the global references it returned (best
    /// effort: a failure leaves harmless entries that reads skip and repair).
    pub(crate) async fn remove_global(&self, reply: Option<&Value>) {
        if !self.link.is_cluster() {
            return;
        }
        let Some(Value::Array(refs)) = reply else {
            return;
        };
        let mut ops: Vec<IndexOp> = refs
            .iter()
            .filter_map(bulk)
            .map(|gref| IndexOp::Remove {
                gref: gref.to_vec(),
            })
            .collect();
        while !ops.is_empty() {
            let rest = ops.split_off(ops.len().min(1000));
            if let Err(e) = self.gindex(ops).await {
                tracing::warn!(error = %e, "could not remove global index entries; reads will skip them");
            }
            ops = rest;
        }
    }

    /// A `get.lua` call for one checkpoint (`id`) or the namespace's latest.
    pub(crate) fn get_call(
        &self,
        thread_id: &str,
        ns: &str,
        id: Option<&str>,
        meta_only: bool,
    ) -> Call<'static> {
        GetArgs {
            ttl_ms: self.default_ttl_ms,
            refresh: self.refresh_on_read,
            ns,
            id,
            meta_only,
        }
        .call(self.thread_keys(thread_id, false))
    }
}

/// The status word a script's reply starts with (`OK`, `CONFLICT`, `FENCE`, ...).
pub(crate) fn reply_status(reply: &[Value]) -> Result<&str> {
    text(reply.first().ok_or_else(|| protocol("empty reply"))?)
}
