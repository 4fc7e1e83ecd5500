//! Writes: `put` and `put_writes`, each one `INSERT` of one row into a view whose trigger
//! does all of it (see the `schema` module): one statement, so one atomic step and one call
//! to the database.

use checkpoint_core::writes::{replaces_existing, write_index};
use checkpoint_core::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, Error, PutMode, PutOptions,
    PutWritesOptions, Result, TypedValue,
};
use serde_json::{Value, json};

use crate::codec::{checkpoint_column, metadata_column};
use crate::coord;
use crate::core::{Inner, warm};
use crate::error::{CONFLICT, STALE_FENCE, classify, raised};
use crate::keys::{IDENTIFIERS, entry, version_key};
use crate::sql;

/// Values packed for a trigger: a JSON index of `[fields..., offset (1-based), length]` and
/// the bytes they point into, concatenated.
#[derive(Default)]
struct Packed {
    index: Vec<Value>,
    bytes: Vec<u8>,
}

impl Packed {
    /// Adds an entry: `fields`, then where `bytes` lies in the concatenation.
    fn push(&mut self, mut fields: Vec<Value>, bytes: &[u8]) {
        fields.push(json!(self.bytes.len() + 1));
        fields.push(json!(bytes.len()));
        self.bytes.extend_from_slice(bytes);
        self.index.push(Value::Array(fields));
    }

    fn index_json(&self) -> String {
        Value::Array(self.index.clone()).to_string()
    }
}

fn fence_token(fence: Option<u64>) -> Option<i64> {
    fence.map(|t| i64::try_from(t).unwrap_or(i64::MAX))
}

pub(crate) async fn put(
    inner: &Inner,
    config: &CheckpointConfig,
    mut checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    options: PutOptions,
) -> Result<CheckpointConfig> {
    IDENTIFIERS.check_put(config, &checkpoint, &new_versions)?;
    let thread = config.thread_id.as_str();
    let ns = config.checkpoint_ns.as_str();
    let parent = config.checkpoint_id.as_deref();
    let values = std::mem::take(&mut checkpoint.channel_values);
    let column = checkpoint_column(&checkpoint)?;
    let metadata_json = metadata_column(&metadata)?;
    let mut packed = Packed::default();
    for (channel, version) in &new_versions {
        let key = version_key(version);
        match values.get(channel) {
            Some(v) => packed.push(
                vec![json!(channel), json!(key), json!(v.type_tag.as_str())],
                &v.bytes,
            ),
            None => packed.push(vec![json!(channel), json!(key), Value::Null], &[]),
        }
    }
    let entries: Vec<String> = metadata.0.iter().map(|(k, v)| entry(k, v)).collect();
    let entries = Value::from(entries).to_string();

    let result = {
        let _turn = inner.write_turn().await;
        warm!(inner.writer, |conn| sqlx::query(sql::PUT)
            .bind(thread)
            .bind(ns)
            .bind(&checkpoint.id)
            .bind(parent)
            .bind(options.mode == PutMode::CompareAndSet)
            .bind(fence_token(options.fence))
            .bind(column)
            .bind(metadata_json)
            .bind(entries)
            .bind(packed.index_json())
            .bind(packed.bytes)
            .bind(inner.default_ttl_ms)
            .execute(conn))
    };
    match result {
        Ok(_) => {
            inner.wrote();
            Ok(CheckpointConfig::new(thread)
                .with_ns(ns)
                .with_checkpoint_id(checkpoint.id))
        }
        Err(e) => Err(refused(inner, config, options.fence, e).await),
    }
}

/// The error of a write the triggers refused (a lost compare-and-set, a stale fence), with
/// what the contract reports alongside (the head found, the current token); any other
/// driver error, classified.
async fn refused(
    inner: &Inner,
    config: &CheckpointConfig,
    fence: Option<u64>,
    e: sqlx::Error,
) -> Error {
    let refusal = match raised(&e) {
        Some(CONFLICT) => conflict(inner, config).await,
        Some(STALE_FENCE) => coord::stale_fence(inner, &config.thread_id, fence.unwrap_or(0)).await,
        _ => return classify(e),
    };
    refusal.unwrap_or_else(|e| e)
}

/// The conflict a compare-and-set put on `config` lost, with the head it found.
async fn conflict(inner: &Inner, config: &CheckpointConfig) -> Result<Error> {
    let found = warm!(inner.reader, |conn| sql::head(
        conn,
        &config.thread_id,
        &config.checkpoint_ns
    ))
    .map_err(classify)?;
    Ok(Error::Conflict {
        thread_id: config.thread_id.clone(),
        checkpoint_ns: config.checkpoint_ns.clone(),
        expected: config.checkpoint_id.clone(),
        found,
    })
}

pub(crate) async fn put_writes(
    inner: &Inner,
    config: &CheckpointConfig,
    writes: Vec<(String, TypedValue)>,
    task_id: &str,
    options: PutWritesOptions,
) -> Result<()> {
    let Some(checkpoint_id) = IDENTIFIERS.check_put_writes(config, &writes, task_id, &options)?
    else {
        return Ok(());
    };
    let replace = replaces_existing(&writes);
    let mut packed = Packed::default();
    for (position, (channel, value)) in writes.iter().enumerate() {
        packed.push(
            vec![
                json!(write_index(channel, position)),
                json!(channel),
                json!(value.type_tag.as_str()),
            ],
            &value.bytes,
        );
    }
    let result = {
        let _turn = inner.write_turn().await;
        warm!(inner.writer, |conn| sqlx::query(sql::PUT_WRITES)
            .bind(&config.thread_id)
            .bind(&config.checkpoint_ns)
            .bind(checkpoint_id)
            .bind(task_id)
            .bind(&options.task_path)
            .bind(replace)
            .bind(fence_token(options.fence))
            .bind(packed.index_json())
            .bind(packed.bytes)
            .bind(inner.default_ttl_ms)
            .execute(conn))
    };
    match result {
        Ok(_) => {
            inner.wrote();
            Ok(())
        }
        Err(e) => Err(refused(inner, config, options.fence, e).await),
    }
}
