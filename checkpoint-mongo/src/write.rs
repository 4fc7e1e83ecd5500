//! Writes: `put` and `put_writes`, in a transaction or as ordered idempotent writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mongodb::bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use mongodb::error::ErrorKind;
use mongodb::options::{
    InsertOneModel, ReplaceOneModel, UpdateManyModel, UpdateOneModel, WriteModel,
};
use mongodb::{ClientSession, Collection};

use checkpoint_core::writes::{replaces_existing, write_index};
use checkpoint_core::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, Error, PutMode, PutOptions,
    PutWritesOptions, Result, TypedValue,
};

use crate::chunk;
use crate::codec::{
    self, MAX_INLINE_WRITES_BYTES, PendingChunks, PreparedWrites, Stored, WriteEntry,
};
use crate::core::Inner;
use crate::delta;
use crate::error::{MongoError, only_duplicate_keys};
use crate::keys;
use crate::keys::IDENTIFIERS;
use crate::txn;

/// Everything a put writes, prepared before any I/O.
struct PreparedPut {
    thread_id: String,
    ns: String,
    id: String,
    parent: Option<String>,
    mode: PutMode,
    fence: Option<u64>,
    /// Value documents of the new versions, with the chunks of the large ones.
    values: Vec<(Document, Option<PendingChunks>)>,
    checkpoint: Document,
    /// `_id`s of every value the checkpoint names, and of the seeds of its delta channels
    /// (for the TTL refresh).
    named_values: Vec<String>,
    value_expiry: Option<DateTime>,
    /// The checkpoint's expiry, and the ancestors its delta channels need (whose expiry,
    /// and their pending writes', the put pushes out to it).
    expiry: Option<DateTime>,
    retained_ids: Vec<String>,
    /// Set after a duplicate value made a transaction fail: check which exist first.
    check_existing: AtomicBool,
}

pub(crate) async fn put(
    inner: &Arc<Inner>,
    config: &CheckpointConfig,
    mut checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    options: PutOptions,
) -> Result<CheckpointConfig> {
    IDENTIFIERS.check_put(config, &checkpoint, &new_versions)?;
    if options.mode == PutMode::CompareAndSet && !inner.capabilities().compare_and_set {
        return Err(Error::Unsupported {
            op: "put with PutMode::CompareAndSet (needs transactions)",
        });
    }
    if options.fence.is_some() && !inner.capabilities().leases {
        return Err(Error::Unsupported {
            op: "put with a fencing token (needs transactions)",
        });
    }
    let thread_id = config.thread_id.as_str();
    let ns = config.checkpoint_ns.as_str();

    let ttl = inner.config.ttl;
    let x = ttl.map(codec::expiry);
    let value_expiry = ttl.map(|t| codec::expiry(t + codec::VALUE_TTL_GRACE));
    let chunk_size = inner.config.chunk_size;
    let mut values_in = std::mem::take(&mut checkpoint.channel_values);
    let mut values = Vec::with_capacity(new_versions.len());
    // The channels this checkpoint stores a value for, with the values' keys.
    let mut stores = BTreeMap::new();
    for (channel, version) in &new_versions {
        let vk = keys::version_key(version);
        let id = keys::doc_id(&[thread_id, ns, channel, &vk]);
        let mut d = doc! {
            "_id": id.as_str(),
            "t": thread_id,
            "n": ns,
            "ch": channel.as_str(),
            "v": vk,
        };
        let chunks = match values_in.remove(channel) {
            Some(v) => {
                stores.insert(channel.clone(), id.clone());
                let owner = Some(id.as_str());
                codec::put_value(&mut d, &v, thread_id, owner, chunk_size, true, value_expiry)
            }
            None => None,
        };
        if let Some(x) = value_expiry {
            d.insert("x", x);
        }
        values.push((d, chunks));
    }
    // The key of the value each channel version the checkpoint names.
    let named: BTreeMap<String, String> = checkpoint
        .channel_versions
        .iter()
        .map(|(c, v)| {
            let key = keys::doc_id(&[thread_id, ns, c, &keys::version_key(v)]);
            (c.clone(), key)
        })
        .collect();
    // Under a TTL, what the checkpoint's delta channels are rebuilt from must live as long
    // as it does: the ancestors back to each channel's seed, their pending writes and the
    // seed's value.
    let retained = match ttl {
        Some(_) => Some(Arc::new(
            delta::retained_by(inner, config, &checkpoint, &metadata, &named, stores)
                .await
                .map_err(Error::from)?,
        )),
        None => None,
    };
    let (retained_ids, seeds) = retained
        .as_deref()
        .map(delta::Retained::ids_and_seeds)
        .unwrap_or_default();
    let mut named_values: Vec<String> = named.into_values().collect();
    named_values.extend(seeds);
    let doc = codec::checkpoint_doc(
        thread_id,
        ns,
        config.checkpoint_id.as_deref(),
        &checkpoint,
        &metadata,
        x,
    )?;
    let prepared = Arc::new(PreparedPut {
        thread_id: thread_id.to_owned(),
        ns: ns.to_owned(),
        id: checkpoint.id.clone(),
        parent: config.checkpoint_id.clone(),
        mode: options.mode,
        fence: options.fence,
        values,
        checkpoint: doc,
        named_values,
        value_expiry,
        expiry: x,
        retained_ids,
        check_existing: AtomicBool::new(false),
    });

    let result = if inner.transactions() {
        let ctx = Arc::clone(inner);
        txn::run(inner, move |s| {
            let ctx = Arc::clone(&ctx);
            let p = Arc::clone(&prepared);
            Box::pin(async move { put_in_transaction(&ctx, &p, s).await })
        })
        .await
    } else {
        put_ordered(inner, &prepared).await
    };
    result.map_err(Error::from)?;
    if let Some(retained) = retained {
        inner
            .retention
            .insert(thread_id, ns, &checkpoint.id, retained);
    }
    Ok(CheckpointConfig::new(thread_id)
        .with_ns(ns)
        .with_checkpoint_id(checkpoint.id))
}

/// Checks a fencing token inside a transaction: the conditional update both checks it and
/// makes a concurrent lease grant conflict with this transaction.
async fn check_fence(
    inner: &Inner,
    s: &mut ClientSession,
    thread_id: &str,
    fence: u64,
) -> Result<(), MongoError> {
    let token = i64::try_from(fence).unwrap_or(-1);
    let r = inner
        .leases
        .update_one(
            doc! { "_id": thread_id, "tok": token },
            doc! { "$inc": { "fw": 1_i64 } },
        )
        .session(&mut *s)
        .await?;
    if r.matched_count == 1 {
        return Ok(());
    }
    let current = match inner
        .leases
        .find_one(doc! { "_id": thread_id })
        .session(&mut *s)
        .await?
    {
        Some(d) => codec::number(&d, "tok", "lease")?,
        None => 0,
    };
    Err(Error::stale_lease(thread_id, fence, u64::try_from(current).unwrap_or(0)).into())
}

async fn put_in_transaction(
    inner: &Inner,
    p: &PreparedPut,
    s: &mut ClientSession,
) -> Result<(), MongoError> {
    if let Some(fence) = p.fence {
        check_fence(inner, s, &p.thread_id, fence).await?;
    }
    // Every put of this (thread, namespace) writes its head document, so concurrent puts
    // conflict and one retries: a compare-and-set reads a head no other put can change
    // before it commits.
    let (filter, update) = head_upsert(&p.thread_id, &p.ns, p.value_expiry, true);
    inner
        .heads
        .update_one(filter, update)
        .upsert(true)
        .session(&mut *s)
        .await
        .map_err(raced)?;
    if p.mode == PutMode::CompareAndSet {
        let head = inner
            .checkpoints
            .find_one(doc! { "t": p.thread_id.as_str(), "n": p.ns.as_str() })
            .sort(doc! { "c": -1 })
            .projection(doc! { "c": 1, "p": 1 })
            .session(&mut *s)
            .await?;
        let (head_id, head_parent) = match head {
            Some(mut d) => {
                let id = codec::take_string(&mut d, "c", "checkpoint document")?;
                let parent = match d.remove("p") {
                    Some(Bson::String(p)) => Some(p),
                    _ => None,
                };
                (Some(id), parent)
            }
            None => (None, None),
        };
        let retry_of_winner = head_id.as_deref() == Some(p.id.as_str()) && head_parent == p.parent;
        if head_id != p.parent && !retry_of_winner {
            return Err(Error::Conflict {
                thread_id: p.thread_id.clone(),
                checkpoint_ns: p.ns.clone(),
                expected: p.parent.clone(),
                found: head_id,
            }
            .into());
        }
    }
    let mut todo: Vec<&(Document, Option<PendingChunks>)> = p.values.iter().collect();
    if !todo.is_empty() && p.check_existing.load(Ordering::Relaxed) {
        let existing = existing_ids(inner, &p.thread_id, value_ids(&todo), Some(&mut *s)).await?;
        todo.retain(|(d, _)| !existing.contains(d.get_str("_id").unwrap_or_default()));
    }
    if inner.bulk_write.load(Ordering::Relaxed) {
        return match bulk(inner, put_models(inner, p, &todo, false), Some(&mut *s)).await {
            Ok(()) => Ok(()),
            // A value stored already (a repeated put) or a racing upsert of the checkpoint:
            // the transaction is aborted; run it again, skipping the values that exist.
            Err(BulkFailed::Driver(e)) if crate::error::is_duplicate_key(&e) => {
                p.check_existing.store(true, Ordering::Relaxed);
                Err(MongoError::Driver(e).retry_transaction())
            }
            Err(BulkFailed::Driver(e)) => Err(e.into()),
            // Nothing was sent; run the transaction again with one command per collection.
            Err(BulkFailed::Unsupported(e)) => Err(MongoError::Driver(e).retry_transaction()),
        };
    }
    if !todo.is_empty() {
        let chunk_docs: Vec<Document> = todo
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .flat_map(|c| c.docs.iter().cloned())
            .collect();
        if !chunk_docs.is_empty() {
            inner
                .chunks
                .insert_many(chunk_docs)
                .session(&mut *s)
                .await?;
        }
        let docs: Vec<Document> = todo.iter().map(|(d, _)| d.clone()).collect();
        match inner.values.insert_many(docs).session(&mut *s).await {
            Ok(_) => {}
            Err(e) if crate::error::is_duplicate_key(&e) => {
                // Some version is stored already (a repeated put): the transaction is
                // aborted; run it again, skipping what exists.
                p.check_existing.store(true, Ordering::Relaxed);
                return Err(MongoError::Driver(e).retry_transaction());
            }
            Err(e) => return Err(e.into()),
        }
    }
    for (coll, filter, x) in refreshes(inner, p) {
        coll.update_many(filter, doc! { "$max": { "x": x } })
            .session(&mut *s)
            .await?;
    }
    inner
        .checkpoints
        .replace_one(
            doc! {
                "_id": p.checkpoint.get("_id").cloned().unwrap_or(Bson::Null),
                "t": p.thread_id.as_str(),
            },
            &p.checkpoint,
        )
        .upsert(true)
        .session(&mut *s)
        .await
        .map_err(raced)?;
    Ok(())
}

/// The filter and update (a pipeline) that give `(thread, ns)` its head document, counting
/// the write in `w` when `bump` (a put in a transaction: its conflict point), and keep the
/// head's expiry `x` no earlier than that of any checkpoint of the namespace: a checkpoint
/// that expires at `x` pushes it out to `x` (a new head gets it), one that never expires
/// (`None`) removes it, and a head that exists without one keeps none. The heads list the
/// threads (see `read::list_threads`), so every write of a checkpoint document writes its
/// head first; with nothing to change the update is a no-op.
fn head_upsert(
    thread: &str,
    ns: &str,
    x: Option<DateTime>,
    bump: bool,
) -> (Document, Vec<Document>) {
    let filter = doc! { "_id": keys::doc_id(&[thread, ns]), "t": thread, "n": ns };
    let w = if bump {
        Bson::from(doc! { "$add": [{ "$ifNull": ["$w", 0_i64] }, 1_i64] })
    } else {
        Bson::from(doc! { "$ifNull": ["$w", 0_i64] })
    };
    let x = match x {
        None => Bson::from("$$REMOVE"),
        Some(x) => Bson::from(doc! { "$cond": [
            // An existing head (it has `w`) without an expiry.
            { "$and": [
                { "$ne": [{ "$type": "$w" }, "missing"] },
                { "$eq": [{ "$type": "$x" }, "missing"] },
            ] },
            "$$REMOVE",
            { "$max": ["$x", x] },
        ] }),
    };
    (filter, vec![doc! { "$set": { "w": w, "x": x } }])
}

/// Writes the head document of `(thread, ns)` for a checkpoint expiring at `x` (`None`:
/// never; see [`head_upsert`]), outside a transaction.
pub(crate) async fn ensure_head(
    inner: &Inner,
    thread: &str,
    ns: &str,
    x: Option<DateTime>,
) -> Result<(), MongoError> {
    let (filter, update) = head_upsert(thread, ns, x, false);
    // Two upserts racing on a missing head: one inserts it, the other may fail on the
    // `_id` and then finds it.
    for attempt in 0..2 {
        let upsert = inner
            .heads
            .update_one(filter.clone(), update.clone())
            .upsert(true)
            .await;
        match upsert {
            Ok(_) => return Ok(()),
            Err(e) if attempt == 0 && crate::error::is_duplicate_key(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Why a put's `bulkWrite` did not complete.
enum BulkFailed {
    /// The server predates the command (MongoDB 8.0) or does not know it; nothing was
    /// written.
    Unsupported(mongodb::error::Error),
    /// The command failed, or one of its writes did (the writes before it are done).
    Driver(mongodb::error::Error),
}

/// Sends a put's writes as one ordered client-level `bulkWrite` (one round trip instead of
/// one per collection), in the put's transaction or with the saver's write concern.
async fn bulk(
    inner: &Inner,
    models: Vec<WriteModel>,
    session: Option<&mut ClientSession>,
) -> Result<(), BulkFailed> {
    let action = inner.client.bulk_write(models).ordered(true);
    let sent = match session {
        Some(s) => action.session(s).await,
        None => {
            action
                .write_concern(inner.config.write_concern.clone())
                .await
        }
    };
    match sent {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(e.kind.as_ref(), ErrorKind::IncompatibleServer { .. })
                || crate::error::codes(&e).contains(&crate::error::COMMAND_NOT_FOUND) =>
        {
            inner.bulk_write.store(false, Ordering::Relaxed);
            tracing::info!(
                error = %e,
                "the server has no bulkWrite: puts write collection by collection"
            );
            Err(BulkFailed::Unsupported(e))
        }
        Err(e) => Err(BulkFailed::Driver(e)),
    }
}

/// A put's writes, in the order a reader needs them, for one client-level `bulkWrite`: the
/// namespace's head document when `head` (a put in a transaction writes it before, see
/// `put_in_transaction`), the chunks and documents of the values in `todo`, the TTL
/// refreshes (see [`refreshes`]), the checkpoint document last.
fn put_models(
    inner: &Inner,
    p: &PreparedPut,
    todo: &[&(Document, Option<PendingChunks>)],
    head: bool,
) -> Vec<WriteModel> {
    let insert = |coll: &mongodb::Collection<Document>, d: &Document| {
        WriteModel::from(
            InsertOneModel::builder()
                .namespace(coll.namespace())
                .document(d.clone())
                .build(),
        )
    };
    let mut models: Vec<WriteModel> = Vec::new();
    if head {
        // First: the refreshes below push older checkpoints' expiry past the head's.
        let (filter, update) = head_upsert(&p.thread_id, &p.ns, p.value_expiry, false);
        models.push(
            UpdateOneModel::builder()
                .namespace(inner.heads.namespace())
                .filter(filter)
                .update(update)
                .upsert(true)
                .build()
                .into(),
        );
    }
    models.extend(
        todo.iter()
            .filter_map(|(_, c)| c.as_ref())
            .flat_map(|c| c.docs.iter())
            .map(|d| insert(&inner.chunks, d)),
    );
    models.extend(todo.iter().map(|(d, _)| insert(&inner.values, d)));
    for (coll, filter, x) in refreshes(inner, p) {
        models.push(
            UpdateManyModel::builder()
                .namespace(coll.namespace())
                .filter(filter)
                .update(doc! { "$max": { "x": x } })
                .build()
                .into(),
        );
    }
    models.push(
        ReplaceOneModel::builder()
            .namespace(inner.checkpoints.namespace())
            .filter(doc! {
                "_id": p.checkpoint.get("_id").cloned().unwrap_or(Bson::Null),
                "t": p.thread_id.as_str(),
            })
            .replacement(p.checkpoint.clone())
            .upsert(true)
            .build()
            .into(),
    );
    models
}

/// What a put with a TTL pushes the expiry (`$max`) of, as `(collection, filter, expiry)`:
/// the documents of every value its checkpoint names and of its delta channels' seeds, with
/// their chunks (which name their value, see `codec::put_value`), so a value outlives every
/// checkpoint that loads it; and the ancestors its delta channels need, with their pending
/// writes and those writes' chunks, so they outlive it.
fn refreshes<'a>(
    inner: &'a Inner,
    p: &PreparedPut,
) -> Vec<(&'a Collection<Document>, Document, DateTime)> {
    let thread = p.thread_id.as_str();
    let ns = p.ns.as_str();
    let mut out = Vec::new();
    if let Some(x) = p.value_expiry {
        out.push((
            &inner.values,
            doc! { "_id": { "$in": p.named_values.clone() }, "t": thread },
            x,
        ));
        out.push((
            &inner.chunks,
            doc! { "t": thread, codec::CHUNK_OWNER: { "$in": p.named_values.clone() } },
            x,
        ));
    }
    if let (Some(x), false) = (p.expiry, p.retained_ids.is_empty()) {
        let ids = p.retained_ids.clone();
        let addresses: Vec<String> = ids.iter().map(|c| keys::doc_id(&[thread, ns, c])).collect();
        out.push((
            &inner.checkpoints,
            doc! { "t": thread, "n": ns, "c": { "$in": ids.clone() } },
            x,
        ));
        out.push((
            &inner.writes,
            doc! { "t": thread, "n": ns, "c": { "$in": ids } },
            x,
        ));
        out.push((
            &inner.chunks,
            doc! { "t": thread, codec::CHUNK_OWNER: { "$in": addresses } },
            x,
        ));
    }
    out
}

/// An upsert's error inside a put's transaction. Two upserts that both find no document
/// both insert, and the second fails with a duplicate key instead of a write conflict (the
/// server retries such upserts itself only in some cases): the transaction is then retried
/// like any transient one, and finds the document.
fn raced(e: mongodb::error::Error) -> MongoError {
    if crate::error::is_duplicate_key(&e) {
        MongoError::Driver(e).retry_transaction()
    } else {
        e.into()
    }
}

fn value_ids(values: &[&(Document, Option<PendingChunks>)]) -> Vec<String> {
    values
        .iter()
        .filter_map(|(d, _)| d.get_str("_id").ok().map(str::to_owned))
        .collect()
}

/// Which of these `_id`s exist in the values collection.
async fn existing_ids(
    inner: &Inner,
    thread_id: &str,
    ids: Vec<String>,
    session: Option<&mut ClientSession>,
) -> Result<BTreeSet<String>, MongoError> {
    let filter = doc! { "_id": { "$in": ids }, "t": thread_id };
    let mut out = BTreeSet::new();
    match session {
        Some(s) => {
            let mut cursor = inner
                .values
                .find(filter)
                .projection(doc! { "_id": 1 })
                .session(&mut *s)
                .await?;
            while let Some(d) = cursor.next(&mut *s).await.transpose()? {
                if let Ok(id) = d.get_str("_id") {
                    out.insert(id.to_owned());
                }
            }
        }
        None => {
            use futures::TryStreamExt;
            let mut cursor = inner
                .values
                .find(filter)
                .projection(doc! { "_id": 1 })
                .await?;
            while let Some(d) = cursor.try_next().await? {
                if let Ok(id) = d.get_str("_id") {
                    out.insert(id.to_owned());
                }
            }
        }
    }
    Ok(out)
}

/// Without transactions: values (and their chunks) first, each insert idempotent, the
/// checkpoint document last. A reader finds the checkpoint only once everything it names
/// is stored; a failure part-way leaves only values no checkpoint names yet, and repeating
/// the put completes it.
async fn put_ordered(inner: &Inner, p: &PreparedPut) -> Result<(), MongoError> {
    // One ordered `bulkWrite` keeps that order: the server stops at the first failing write,
    // so the checkpoint document is written only after every value. A value stored already
    // (a repeated or racing put) stops it too; the collection-by-collection writes below
    // then skip what exists. Values with chunks go that way from the start, since chunks
    // are written only for values not stored yet.
    if inner.bulk_write.load(Ordering::Relaxed) && p.values.iter().all(|(_, c)| c.is_none()) {
        let todo: Vec<&(Document, Option<PendingChunks>)> = p.values.iter().collect();
        match bulk(inner, put_models(inner, p, &todo, true), None).await {
            Ok(()) => return Ok(()),
            Err(BulkFailed::Driver(e)) if !only_duplicate_keys(&e) => return Err(e.into()),
            Err(_) => {}
        }
    }
    // The head first, as in the `bulkWrite`: before the refreshes, which push older
    // checkpoints' expiry past its own.
    ensure_head(inner, &p.thread_id, &p.ns, p.value_expiry).await?;
    if !p.values.is_empty() {
        let mut todo: Vec<&(Document, Option<PendingChunks>)> = p.values.iter().collect();
        // Chunks are written only for values not stored yet.
        if todo.iter().any(|(_, c)| c.is_some()) {
            let existing = existing_ids(inner, &p.thread_id, value_ids(&todo), None).await?;
            todo.retain(|(d, _)| !existing.contains(d.get_str("_id").unwrap_or_default()));
        }
        let chunk_docs: Vec<Document> = todo
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .flat_map(|c| c.docs.iter().cloned())
            .collect();
        if !chunk_docs.is_empty() {
            inner.chunks.insert_many(chunk_docs).ordered(false).await?;
        }
        if !todo.is_empty() {
            let docs: Vec<Document> = todo.iter().map(|(d, _)| d.clone()).collect();
            match inner.values.insert_many(docs).ordered(false).await {
                Ok(_) => {}
                // Stored concurrently by another writer: the first value stays.
                Err(e) if only_duplicate_keys(&e) => {
                    let mine: Vec<ObjectId> = todo
                        .iter()
                        .filter_map(|(_, c)| c.as_ref().map(|c| c.blob))
                        .collect();
                    if !mine.is_empty() {
                        // Chunks of a value that lost the race; keep those still referenced.
                        let referenced =
                            chunk::referenced_blobs(inner, &p.thread_id, &value_ids(&todo)).await?;
                        let orphans: Vec<ObjectId> = mine
                            .into_iter()
                            .filter(|b| !referenced.contains(b))
                            .collect();
                        chunk::delete_chunks(inner, &p.thread_id, orphans, None).await?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    for (coll, filter, x) in refreshes(inner, p) {
        coll.update_many(filter, doc! { "$max": { "x": x } })
            .await?;
    }
    inner
        .checkpoints
        .replace_one(
            doc! {
                "_id": p.checkpoint.get("_id").cloned().unwrap_or(Bson::Null),
                "t": p.thread_id.as_str(),
            },
            &p.checkpoint,
        )
        .upsert(true)
        .await?;
    Ok(())
}

pub(crate) async fn put_writes(
    inner: &Arc<Inner>,
    config: &CheckpointConfig,
    writes: Vec<(String, TypedValue)>,
    task_id: &str,
    options: PutWritesOptions,
) -> Result<()> {
    let Some(checkpoint_id) = IDENTIFIERS.check_put_writes(config, &writes, task_id, &options)?
    else {
        return Ok(());
    };
    if options.fence.is_some() && !inner.capabilities().leases {
        return Err(Error::Unsupported {
            op: "put_writes with a fencing token (needs transactions)",
        });
    }
    let thread_id = config.thread_id.as_str();
    let ns = config.checkpoint_ns.as_str();

    let replace = replaces_existing(&writes);
    let x = inner.config.ttl.map(codec::expiry);
    let chunk_size = inner.config.chunk_size;
    // Chunks name the checkpoint's pending-writes documents (their address), so a later put
    // whose delta channels need these writes refreshes the chunks' expiry with theirs.
    let address = keys::doc_id(&[thread_id, ns, checkpoint_id]);
    // One entry per index: a replacing call keeps the last write of an index, any other
    // call the first (as applying the writes one by one would).
    let mut entries: Vec<WriteEntry> = Vec::with_capacity(writes.len());
    let mut chunks = Vec::new();
    let mut inline_total = 0usize;
    for (position, (channel, value)) in writes.into_iter().enumerate() {
        let idx = write_index(&channel, position);
        let slot = entries.iter().position(|e| e.idx == idx);
        if slot.is_some() && !replace {
            continue;
        }
        let inline = inline_total + value.len() <= MAX_INLINE_WRITES_BYTES;
        let mut scratch = Document::new();
        let pending = codec::put_value(
            &mut scratch,
            &value,
            thread_id,
            Some(&address),
            chunk_size,
            inline,
            x,
        );
        let stored = match pending {
            Some(c) => {
                let s = Stored::Chunked {
                    type_tag: value.type_tag.clone(),
                    len: value.len(),
                    blob: c.blob,
                    count: c.docs.len() as u32,
                };
                chunks.push(c);
                s
            }
            None => {
                inline_total += value.len();
                Stored::Inline(value)
            }
        };
        let entry = WriteEntry {
            idx,
            channel,
            task_path: options.task_path.clone(),
            value: stored,
        };
        match slot {
            Some(i) => {
                if let Some(b) = entries[i].blob() {
                    chunks.retain(|c| c.blob != b);
                }
                entries[i] = entry;
            }
            None => entries.push(entry),
        }
    }
    let prepared = Arc::new(PreparedWrites {
        thread_id: thread_id.to_owned(),
        ns: ns.to_owned(),
        checkpoint_id: checkpoint_id.to_owned(),
        task_id: task_id.to_owned(),
        fence: options.fence,
        replace,
        entries,
        chunks,
        x,
    });
    let result = if prepared.fence.is_some() {
        let ctx = Arc::clone(inner);
        txn::run(inner, move |s| {
            let ctx = Arc::clone(&ctx);
            let p = Arc::clone(&prepared);
            Box::pin(async move { writes_in_transaction(&ctx, &p, s).await })
        })
        .await
    } else {
        writes_single_document(inner, &prepared).await
    };
    result.map_err(Error::from)
}

/// Inside a transaction (fenced calls): read the task's document, merge, write it back.
async fn writes_in_transaction(
    inner: &Inner,
    p: &PreparedWrites,
    s: &mut ClientSession,
) -> Result<(), MongoError> {
    if let Some(fence) = p.fence {
        check_fence(inner, s, &p.thread_id, fence).await?;
    }
    let chunk_docs: Vec<Document> = p
        .chunks
        .iter()
        .flat_map(|c| c.docs.iter().cloned())
        .collect();
    if !chunk_docs.is_empty() {
        inner
            .chunks
            .insert_many(chunk_docs)
            .session(&mut *s)
            .await?;
    }
    let existing = inner.writes.find_one(p.key()).session(&mut *s).await?;
    let unused = match existing {
        None => {
            inner
                .writes
                .insert_one(p.doc(1, &p.entries))
                .session(&mut *s)
                .await?;
            Vec::new()
        }
        Some(d) => {
            let row = codec::writes_row(d)?;
            let (merged, dropped) = p.merge(&row.entries)?;
            if let Some(merged) = merged {
                inner
                    .writes
                    .replace_one(p.key(), p.doc(row.revision + 1, &merged))
                    .session(&mut *s)
                    .await?;
            }
            dropped
        }
    };
    chunk::delete_chunks(inner, &p.thread_id, unused, Some(s)).await
}

/// Without a fence (both modes): all of the call's writes change one document at once, so
/// readers see all of them or none. New document: one insert. Existing document: merged
/// and replaced under its revision number, retried if a concurrent call changed it.
async fn writes_single_document(inner: &Inner, p: &PreparedWrites) -> Result<(), MongoError> {
    let chunk_docs: Vec<Document> = p
        .chunks
        .iter()
        .flat_map(|c| c.docs.iter().cloned())
        .collect();
    if !chunk_docs.is_empty() {
        inner.chunks.insert_many(chunk_docs).await?;
    }
    match inner.writes.insert_one(p.doc(1, &p.entries)).await {
        Ok(_) => return Ok(()),
        Err(e) if crate::error::is_duplicate_key(&e) => {}
        Err(e) => return Err(e.into()),
    }
    const ATTEMPTS: u32 = 64;
    for attempt in 1..=ATTEMPTS {
        let Some(d) = inner.writes.find_one(p.key()).await? else {
            // Deleted in between (delete_thread, prune): write it as new.
            match inner.writes.insert_one(p.doc(1, &p.entries)).await {
                Ok(_) => return Ok(()),
                Err(e) if crate::error::is_duplicate_key(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let row = codec::writes_row(d)?;
        let (merged, dropped) = p.merge(&row.entries)?;
        let Some(merged) = merged else {
            return chunk::delete_chunks(inner, &p.thread_id, dropped, None).await;
        };
        let mut filter = p.key();
        filter.insert("r", row.revision);
        let r = inner
            .writes
            .replace_one(filter, p.doc(row.revision + 1, &merged))
            .await?;
        if r.matched_count == 1 {
            return chunk::delete_chunks(inner, &p.thread_id, dropped, None).await;
        }
        txn::backoff(attempt).await;
    }
    Err(MongoError::Contention { attempts: ATTEMPTS })
}
