//! The collections' stored layout and indexes: checking the layout, creating the indexes
//! (`MongoSaver::setup`) and dropping the collections.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use checkpoint_core::Result;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use mongodb::IndexModel;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::IndexOptions;

use crate::codec::CHUNK_OWNER;
use crate::core::Inner;
use crate::error::{MongoError, driver};

/// Records or checks the stored layout, then creates the indexes of every collection (see
/// `MongoSaver::setup`).
pub(crate) async fn setup(i: &Inner) -> Result<()> {
    mark_layout(i).await?;
    let unique = |name: &str, keys: Document| {
        IndexModel::builder()
            .keys(keys)
            .options(
                IndexOptions::builder()
                    .name(name.to_owned())
                    .unique(true)
                    .build(),
            )
            .build()
    };
    let plain = |name: &str, keys: Document| {
        IndexModel::builder()
            .keys(keys)
            .options(IndexOptions::builder().name(name.to_owned()).build())
            .build()
    };
    let ttl = |models: &mut Vec<IndexModel>| {
        if i.config.ttl.is_some() {
            models.push(
                IndexModel::builder()
                    .keys(doc! { "x": 1 })
                    .options(
                        IndexOptions::builder()
                            .name("ttl".to_owned())
                            .expire_after(Duration::ZERO)
                            .build(),
                    )
                    .build(),
            );
        }
    };
    let mut checkpoints = vec![
        unique("thread_ns_id", doc! { "t": 1, "n": 1, "c": -1 }),
        plain("thread_order", doc! { "t": 1, "s": -1 }),
        plain("global_order", doc! { "s": -1 }),
        plain("metadata_filter", doc! { "mk": 1 }),
    ];
    ttl(&mut checkpoints);
    let mut values = vec![unique(
        "thread_ns_channel_version",
        doc! { "t": 1, "n": 1, "ch": 1, "v": 1 },
    )];
    ttl(&mut values);
    let mut writes = vec![
        unique("thread_ns_id_task", doc! { "t": 1, "n": 1, "c": 1, "k": 1 }),
        plain("address", doc! { "a": 1 }),
    ];
    ttl(&mut writes);
    let mut chunks = vec![unique("thread_blob_seq", doc! { "t": 1, "b": 1, "i": 1 })];
    if i.config.ttl.is_some() {
        // A put's TTL refresh finds the chunks of the values it names by their owner.
        chunks.push(plain("thread_owner", doc! { "t": 1, CHUNK_OWNER: 1 }));
    }
    ttl(&mut chunks);
    let mut heads = vec![unique("thread_ns", doc! { "t": 1, "n": 1 })];
    ttl(&mut heads);
    for (coll, models) in [
        (&i.checkpoints, checkpoints),
        (&i.values, values),
        (&i.writes, writes),
        (&i.chunks, chunks),
        (&i.heads, heads),
    ] {
        coll.create_indexes(models).await.map_err(driver)?;
    }
    if i.config.ttl.is_some() {
        own_chunks(i).await?;
    }
    // Leases and the ledger are keyed by `_id` alone; create them so they exist before
    // the first transaction touches them (MongoDB before 4.4 cannot create collections
    // inside a transaction).
    for name in [&i.names.leases, &i.names.ledger] {
        let existing = i
            .database
            .list_collection_names()
            .filter(doc! { "name": name.as_str() })
            .await
            .map_err(driver)?;
        if existing.is_empty() {
            match i.database.create_collection(name.as_str()).await {
                Ok(()) => {}
                // Created concurrently by another process: fine.
                Err(e) if crate::error::codes(&e).contains(&48) => {}
                Err(e) => return Err(driver(e)),
            }
        }
    }
    Ok(())
}

/// The stored layout this build writes and reads (documents, fields, indexes). A version
/// that stores anything differently writes a greater number, so that builds before it
/// refuse the collections instead of misreading them.
///
/// * 1: the first.
/// * 2: every `(thread, namespace)` that holds a checkpoint has its head document (layout 1
///   wrote none for copied threads or without transactions), so the heads list the threads
///   (see `read::list_threads`).
const LAYOUT: i64 = 2;

/// The first layout whose head documents list every thread.
pub(crate) const LAYOUT_HEADS_LIST_THREADS: i64 = 2;

/// The `_id` of the layout document.
const LAYOUT_ID: &str = "layout";

/// The layout the collections are in (1 when no layout document exists: not set up yet, or
/// set up before the document existed); an error for a layout this build does not know.
async fn check_layout(i: &Inner) -> Result<i64> {
    let found = i
        .layout
        .find_one(doc! { "_id": LAYOUT_ID })
        .await
        .map_err(driver)?;
    let Some(found) = found else { return Ok(1) };
    match found.get("v") {
        Some(Bson::Int32(v)) if (1..=LAYOUT).contains(&i64::from(*v)) => Ok(i64::from(*v)),
        Some(Bson::Int64(v)) if (1..=LAYOUT).contains(v) => Ok(*v),
        v => Err(MongoError::LayoutTooNew {
            found: v.map_or_else(|| "(none)".to_owned(), ToString::to_string),
            known: LAYOUT,
        }
        .into()),
    }
}

/// Checks, once per saver and before its first operation, that the collections are in a
/// stored layout this build knows (as `setup` does), and returns it: a saver opened without
/// `setup` must not write next to a newer version's documents or misread them. A failed
/// check (a newer layout, or no answer) is made again by the next operation.
pub(crate) async fn ready(i: &Inner) -> Result<i64> {
    match i.layout_version.load(Ordering::Relaxed) {
        0 => {
            let found = check_layout(i).await?;
            // A `setup` that ran meanwhile recorded its own, newer, finding.
            Ok(i.layout_version
                .fetch_max(found, Ordering::Relaxed)
                .max(found))
        }
        known => Ok(known),
    }
}

/// `items` once [`ready`] passed; its error otherwise (and nothing of `items`).
pub(crate) fn after_ready<T: Send + 'static>(
    i: &Arc<Inner>,
    items: BoxStream<'static, Result<T>>,
) -> BoxStream<'static, Result<T>> {
    let i = Arc::clone(i);
    stream::once(async move { ready(&i).await.map(|_| items) })
        .try_flatten()
        .boxed()
}

/// The layout document's field recording that [`own_chunks`] completed.
const CHUNKS_OWNED: &str = "chunks_owned";

/// Gives the chunks of channel values that do not name their value (written before chunks
/// did) the value's `_id` and expiry, once per set of collections (recorded in the layout
/// document): a put's TTL refresh finds chunks by their owner, and such chunks otherwise
/// expire with their first write while checkpoints naming the value live on. One pass
/// over the chunked values (documents with `b`).
async fn own_chunks(i: &Inner) -> Result<()> {
    let done = i
        .layout
        .find_one(doc! { "_id": LAYOUT_ID, CHUNKS_OWNED: true })
        .await
        .map_err(driver)?;
    if done.is_some() {
        return Ok(());
    }
    let mut chunked = i
        .values
        .find(doc! { "b": { "$exists": true } })
        .projection(doc! { "_id": 1, "t": 1, "b": 1, "x": 1 })
        .await
        .map_err(driver)?;
    while let Some(value) = chunked.try_next().await.map_err(driver)? {
        let (Ok(id), Ok(thread), Ok(blob)) = (
            value.get_str("_id"),
            value.get_str("t"),
            value.get_object_id("b"),
        ) else {
            continue;
        };
        let mut update = doc! { "$set": { CHUNK_OWNER: id } };
        if let Ok(x) = value.get_datetime("x") {
            update.insert("$max", doc! { "x": *x });
        }
        i.chunks
            .update_many(
                doc! { "t": thread, "b": blob, CHUNK_OWNER: { "$exists": false } },
                update,
            )
            .await
            .map_err(driver)?;
    }
    i.layout
        .update_one(
            doc! { "_id": LAYOUT_ID },
            doc! { "$set": { CHUNKS_OWNED: true } },
        )
        .await
        .map_err(driver)?;
    Ok(())
}

/// Brings the collections to [`LAYOUT`]: checks the recorded layout, makes what the layouts
/// before it lack (the head documents of layout 2, see [`index_threads`]), then records
/// [`LAYOUT`]. Run by every `setup`; a no-op (one read) on collections already there.
///
/// Processes of a build that knows only layout 1 refuse the collections from their next
/// saver on, but a saver of theirs already open goes on writing without heads: upgrade
/// with them stopped.
async fn mark_layout(i: &Inner) -> Result<()> {
    if check_layout(i).await? < LAYOUT_HEADS_LIST_THREADS {
        index_threads(i).await?;
    }
    let mark = i
        .layout
        .update_one(
            doc! { "_id": LAYOUT_ID, "$or": [
                { "v": { "$exists": false } },
                { "v": { "$lt": LAYOUT } },
            ] },
            doc! { "$set": { "v": LAYOUT } },
        )
        .upsert(true)
        .await;
    match mark {
        Ok(_) => {}
        // Marked already (by this build, another process or a newer build, which the
        // check below refuses): the filter did not match and the upsert met the `_id`.
        Err(e) if crate::error::codes(&e).contains(&crate::error::DUPLICATE_KEY) => {}
        Err(e) => return Err(driver(e)),
    }
    let found = check_layout(i).await?;
    i.layout_version.store(found, Ordering::Relaxed);
    Ok(())
}

/// Writes the head document of every `(thread, namespace)` that holds checkpoints and has
/// none (layout 1 wrote none for copied threads or without transactions), or whose expiry
/// comes before that of one of its checkpoints: one grouping pass over the checkpoints,
/// joined with the heads on their `t` index; writes only what is missing.
async fn index_threads(i: &Inner) -> Result<()> {
    let mut missing = i
        .checkpoints
        .aggregate([
            doc! { "$group": {
                "_id": { "t": "$t", "n": "$n" },
                "x": { "$max": "$x" },
                // Whether some checkpoint never expires.
                "open": { "$max": { "$cond": [
                    { "$in": [{ "$type": "$x" }, ["missing", "null"]] }, 1, 0,
                ] } },
            } },
            // The thread's heads (the `t` index), then the namespace's among them.
            doc! { "$lookup": {
                "from": i.names.heads.as_str(),
                "localField": "_id.t",
                "foreignField": "t",
                "pipeline": [{ "$project": { "_id": 0, "n": 1, "x": 1 } }],
                "as": "h",
            } },
            doc! { "$set": { "h": {
                "$filter": { "input": "$h", "cond": { "$eq": ["$$this.n", "$_id.n"] } },
            } } },
            // No head; one that expires while a checkpoint never does; one that expires
            // before the latest checkpoint.
            doc! { "$match": { "$expr": { "$or": [
                { "$eq": [{ "$size": "$h" }, 0] },
                { "$and": [
                    { "$gt": [{ "$size": { "$ifNull": ["$h.x", []] } }, 0] },
                    { "$or": [
                        { "$eq": ["$open", 1] },
                        { "$lt": [{ "$max": "$h.x" }, "$x"] },
                    ] },
                ] },
            ] } } },
        ])
        .allow_disk_use(true)
        .await
        .map_err(driver)?;
    while let Some(group) = missing.try_next().await.map_err(driver)? {
        let key = group.get_document("_id").ok();
        let (Some(Ok(t)), Some(Ok(n))) = (key.map(|k| k.get_str("t")), key.map(|k| k.get_str("n")))
        else {
            return Err(MongoError::corrupt(
                "checkpoint document",
                format!("thread or namespace is not a string: {group}"),
            )
            .into());
        };
        let x = match group.get("open") {
            Some(Bson::Int32(0)) | Some(Bson::Int64(0)) => group.get_datetime("x").ok().copied(),
            _ => None,
        };
        crate::write::ensure_head(i, t, n, x).await?;
    }
    Ok(())
}

/// Drops every collection of this configuration.
pub(crate) async fn drop_collections(inner: &Inner) -> Result<()> {
    for name in inner.names.all() {
        inner
            .database
            .collection::<Document>(name)
            .drop()
            .await
            .map_err(driver)?;
    }
    Ok(())
}
