//! Reads: `get_tuple`, and `list` as a lazy keyset-paginated stream.
//!
//! A page costs a bounded number of queries whatever its size: one aggregation for the
//! checkpoint documents with their pending writes joined in, one `find` for the values they
//! name (concurrent `find`s for very large pages), and one more only when some value is
//! chunked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::stream::{BoxStream, TryStreamExt};
use mongodb::bson::{Bson, Document, doc, oid::ObjectId};

use checkpoint_core::backend::{Page, legacy, paged};
use checkpoint_core::writes::TASKS;
use checkpoint_core::{
    CheckpointConfig, CheckpointTuple, Error, ListOptions, PendingWrite, Result,
};

use crate::chunk;
use crate::codec::{self, CheckpointRow, Stored, WritesRow};
use crate::core::Inner;
use crate::delta;
use crate::error::MongoError;
use crate::keys;

/// Large enough that a page's values and writes come back in one reply unless they exceed
/// the 16 MiB reply limit.
const BATCH: u32 = 100_000;
/// Keys per values query: a page naming more values fetches them with several concurrent
/// queries (a page of 10 W1 checkpoints names 21 values, a whole W1 history 41).
pub(crate) const VALUE_BATCH: usize = 48;

pub(crate) async fn get_tuple(
    inner: &Inner,
    config: &CheckpointConfig,
) -> Result<Option<CheckpointTuple>> {
    let thread_id = config.require_thread()?;
    let ns = config.checkpoint_ns.as_str();
    let head = match &config.checkpoint_id {
        Some(id) => vec![doc! { "$match": {
            "_id": keys::doc_id(&[thread_id, ns, id]),
            "t": thread_id,
        } }],
        None => vec![
            doc! { "$match": { "t": thread_id, "n": ns } },
            doc! { "$sort": { "c": -1 } },
            doc! { "$limit": 1 },
        ],
    };
    let mut tuples = async {
        let page = fetch_page(inner, head, 1, Some(thread_id)).await?;
        let mut tuples = load_tuples(inner, page).await?;
        legacy_sends(inner, &mut tuples).await?;
        Ok::<_, MongoError>(tuples)
    }
    .await
    .map_err(Error::from)?;
    Ok(tuples.pop())
}

/// Runs a pipeline selecting checkpoint documents (at most `limit`) with their pending
/// writes joined in (`$lookup` on the writes' address index, one output document per
/// writes document so that no output document grows with the number of tasks).
pub(crate) async fn fetch_page(
    inner: &Inner,
    mut pipeline: Vec<Document>,
    limit: usize,
    thread_id: Option<&str>,
) -> Result<Vec<(CheckpointRow, Vec<WritesRow>)>, MongoError> {
    let mut lookup = doc! {
        "from": inner.names.writes.as_str(),
        "localField": "_id",
        "foreignField": "a",
        "as": "pw",
    };
    // With the thread known, the join also names it, so on a sharded cluster it is routed
    // to the one shard holding the thread's writes.
    if let Some(t) = thread_id {
        lookup.insert("pipeline", vec![doc! { "$match": { "t": t } }]);
    }
    pipeline.push(doc! { "$lookup": lookup });
    pipeline.push(doc! { "$unwind": { "path": "$pw", "preserveNullAndEmptyArrays": true } });
    pipeline.push(doc! { "$project": {
        "mk": 0, "x": 0, "pw._id": 0, "pw.t": 0, "pw.n": 0, "pw.c": 0, "pw.x": 0,
    } });
    let mut cursor = inner
        .checkpoints
        .aggregate(pipeline)
        .batch_size(u32::try_from(limit.saturating_mul(4).max(16)).unwrap_or(u32::MAX))
        .await?;
    let mut out: Vec<(CheckpointRow, Vec<WritesRow>)> = Vec::new();
    let mut last_id: Option<Bson> = None;
    while let Some(mut d) = cursor.try_next().await? {
        let id = d.get("_id").cloned();
        let writes = match d.remove("pw") {
            Some(Bson::Document(w)) => Some(codec::writes_row(w)?),
            None | Some(Bson::Null) => None,
            Some(other) => {
                return Err(MongoError::corrupt(
                    "joined pending writes",
                    format!("{other:?} is not a document"),
                ));
            }
        };
        if id.is_some() && id == last_id {
            if let (Some(w), Some(last)) = (writes, out.last_mut()) {
                last.1.push(w);
            }
            continue;
        }
        last_id = id;
        out.push((codec::checkpoint_row(d)?, writes.into_iter().collect()));
    }
    Ok(out)
}

/// Assembles complete tuples for checkpoint rows and their joined pending writes: one query
/// fetches every value they name (each value once, however many checkpoints name it; split
/// into concurrent queries of at most [`VALUE_BATCH`] keys for very large pages), and one
/// more runs only when some of those values are chunked.
pub(crate) async fn load_tuples(
    inner: &Inner,
    page: Vec<(CheckpointRow, Vec<WritesRow>)>,
) -> Result<Vec<CheckpointTuple>, MongoError> {
    if page.is_empty() {
        return Ok(Vec::new());
    }
    let mut writes: HashMap<String, Vec<WritesRow>> = HashMap::new();
    let mut rows = Vec::with_capacity(page.len());
    for (row, w) in page {
        writes.insert(row.address(), w);
        rows.push(row);
    }
    let mut value_keys: BTreeSet<String> = BTreeSet::new();
    for row in &rows {
        for (channel, version) in &row.checkpoint.channel_versions {
            value_keys.insert(keys::doc_id(&[
                &row.thread_id,
                &row.ns,
                channel,
                &keys::version_key(version),
            ]));
        }
    }
    let mut values: HashMap<String, Stored> = HashMap::new();
    let keys: Vec<String> = value_keys.into_iter().collect();
    // The threads of the page route the query to their shards.
    let threads: Vec<String> = rows
        .iter()
        .map(|r| r.thread_id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let threads = &threads;
    let batches = futures::future::try_join_all(keys.chunks(VALUE_BATCH).map(|batch| async move {
        let docs: Vec<Document> = inner
            .values
            .find(doc! { "_id": { "$in": batch.to_vec() }, "t": { "$in": threads.clone() } })
            .projection(doc! { "_id": 1, "ty": 1, "d": 1, "len": 1, "b": 1, "nc": 1 })
            .batch_size(BATCH)
            .await?
            .try_collect()
            .await?;
        Ok::<_, MongoError>(docs)
    }))
    .await?;
    for mut d in batches.into_iter().flatten() {
        let id = codec::take_string(&mut d, "_id", "value document")?;
        values.insert(id, codec::get_value(&mut d, "value document")?);
    }

    // Chunked values (of channels or of writes), fetched together.
    let mut blobs: BTreeSet<(String, ObjectId)> = BTreeSet::new();
    for row in &rows {
        for (channel, version) in &row.checkpoint.channel_versions {
            let key = keys::doc_id(&[
                &row.thread_id,
                &row.ns,
                channel,
                &keys::version_key(version),
            ]);
            if let Some(Stored::Chunked { blob, .. }) = values.get(&key) {
                blobs.insert((row.thread_id.clone(), *blob));
            }
        }
    }
    for row in &rows {
        for w in writes.get(&row.address()).into_iter().flatten() {
            for e in &w.entries {
                if let Some(b) = e.blob() {
                    blobs.insert((row.thread_id.clone(), b));
                }
            }
        }
    }
    let chunks = chunk::fetch_chunks(inner, &blobs).await?;
    let resolve = |thread_id: &str, stored: &Stored| delta::resolve(&chunks, thread_id, stored);
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let address = row.address();
        let CheckpointRow {
            thread_id,
            ns,
            id,
            parent,
            mut checkpoint,
            metadata,
            ..
        } = row;
        for (channel, version) in &checkpoint.channel_versions {
            let key = keys::doc_id(&[&thread_id, &ns, channel, &keys::version_key(version)]);
            // A version whose value document is missing loads without a value, as the
            // contract's "removed" does (it can only be missing after a TTL expiry).
            if let Some(stored) = values.get(&key)
                && let Some(v) = resolve(&thread_id, stored)?
            {
                checkpoint.channel_values.insert(channel.clone(), v);
            }
        }
        let mut pending = Vec::new();
        for w in writes.remove(&address).unwrap_or_default() {
            for e in w.entries {
                let value = resolve(&thread_id, &e.value)?
                    .ok_or_else(|| MongoError::corrupt("pending write", "no value"))?;
                pending.push(PendingWrite {
                    task_id: w.task_id.clone(),
                    channel: e.channel,
                    value,
                    idx: e.idx,
                    task_path: e.task_path,
                });
            }
        }
        pending.sort_by(|a, b| {
            (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx))
        });
        let address_of = |id: &str| {
            CheckpointConfig::new(thread_id.clone())
                .with_ns(ns.clone())
                .with_checkpoint_id(id)
        };
        out.push(CheckpointTuple {
            config: address_of(&id),
            parent_config: parent.as_deref().map(address_of),
            checkpoint,
            metadata,
            pending_writes: pending,
        });
    }
    Ok(out)
}

/// Where a list stream continues: strictly below this key of its sort order.
struct ListState {
    inner: Arc<Inner>,
    options: ListOptions,
    stages: Vec<Vec<String>>,
    below: Option<String>,
}

/// The most thread ids per `list_threads` page (the first pages are smaller; see
/// [`paged_keys`](checkpoint_core::backend::paged_keys)).
const THREAD_PAGE: usize = 1000;

/// `list_threads`: keyset pages of thread ids, read from the head documents (one per
/// `(thread, namespace)` that was written, in the order of their `thread_ns` index), each
/// thread checked for a checkpoint with one index lookup; no checkpoint is read. On
/// collections of layout 1, which wrote no head for some threads (see `schema::LAYOUT`),
/// the distinct `t` of the checkpoint documents instead, which costs a pass over the
/// checkpoints after `after`.
pub(crate) fn list_threads(
    inner: Arc<Inner>,
    after: Option<&str>,
) -> BoxStream<'static, Result<String>> {
    let after = after.map(str::to_owned);
    checkpoint_core::backend::paged_keys(THREAD_PAGE, after, move |after, want| {
        let inner = Arc::clone(&inner);
        async move {
            let layout = inner
                .layout_version
                .load(std::sync::atomic::Ordering::Relaxed);
            let ids = if layout >= crate::schema::LAYOUT_HEADS_LIST_THREADS {
                threads_from_heads(&inner, after.unwrap_or_default(), want).await
            } else {
                threads_from_checkpoints(&inner, after.unwrap_or_default(), want).await
            };
            Ok(ids?)
        }
    })
}

/// The first `want` threads after `after` that hold a checkpoint, from the head documents.
/// A head may outlive its namespace's checkpoints (all deleted by `delete_for_runs`, expired,
/// or a put that failed after writing it), so each thread is checked with an index lookup
/// of one of its checkpoints, and the next `want` heads are read until `want` threads are
/// found or none remain.
async fn threads_from_heads(
    inner: &Inner,
    mut after: String,
    want: usize,
) -> Result<Vec<String>, MongoError> {
    let ask = i64::try_from(want).unwrap_or(i64::MAX);
    let mut ids = Vec::new();
    while ids.len() < want {
        let mut cursor = inner
            .heads
            .aggregate([
                doc! { "$match": { "t": { "$gt": after.as_str() } } },
                doc! { "$sort": { "t": 1, "n": 1 } },
                doc! { "$limit": ask },
                doc! { "$group": { "_id": "$t", "heads": { "$sum": 1 } } },
                doc! { "$sort": { "_id": 1 } },
                doc! { "$lookup": {
                    "from": inner.names.checkpoints.as_str(),
                    "localField": "_id",
                    "foreignField": "t",
                    "pipeline": [{ "$limit": 1 }, { "$project": { "_id": 1 } }],
                    "as": "c",
                } },
                doc! { "$project": { "heads": 1, "live": { "$gt": [{ "$size": "$c" }, 0] } } },
            ])
            .await?;
        let mut heads = 0_i64;
        while let Some(d) = cursor.try_next().await? {
            let thread = thread_id(&d, "head document")?;
            heads += match d.get("heads") {
                Some(Bson::Int32(n)) => i64::from(*n),
                Some(Bson::Int64(n)) => *n,
                other => {
                    return Err(MongoError::corrupt(
                        "head document",
                        format!("a thread's count of heads is {other:?}"),
                    ));
                }
            };
            if d.get_bool("live").unwrap_or(false) {
                ids.push(thread.clone());
            }
            after = thread;
        }
        if heads < ask {
            break;
        }
    }
    // The rest is read again after the last id returned.
    ids.truncate(want);
    Ok(ids)
}

/// The first `want` distinct `t` after `after` of the checkpoint documents (the
/// `thread_order` index), grouped on the server.
async fn threads_from_checkpoints(
    inner: &Inner,
    after: String,
    want: usize,
) -> Result<Vec<String>, MongoError> {
    let want = i64::try_from(want).unwrap_or(i64::MAX);
    let mut cursor = inner
        .checkpoints
        .aggregate([
            doc! { "$match": { "t": { "$gt": after } } },
            doc! { "$group": { "_id": "$t" } },
            doc! { "$sort": { "_id": 1 } },
            doc! { "$limit": want },
        ])
        .await?;
    let mut ids = Vec::new();
    while let Some(d) = cursor.try_next().await? {
        ids.push(thread_id(&d, "checkpoint document")?);
    }
    Ok(ids)
}

/// The thread id a listing's group document holds as its `_id`.
fn thread_id(group: &Document, what: &'static str) -> Result<String, MongoError> {
    match group.get("_id") {
        Some(Bson::String(t)) => Ok(t.clone()),
        other => Err(MongoError::corrupt(
            what,
            format!("field t is {other:?}, not a string"),
        )),
    }
}

/// `list`: pages of `list_page_size` checkpoints (fewer when a limit remains), each page
/// loaded completely with [`load_tuples`], in the contract's order.
pub(crate) fn list(
    inner: Arc<Inner>,
    options: ListOptions,
) -> BoxStream<'static, Result<CheckpointTuple>> {
    let page_size = inner.config.list_page_size;
    let state = ListState {
        inner,
        stages: keys::filter_stages(&options.filter),
        below: None,
        options: options.clone(),
    };
    paged(options.limit, page_size, state, |mut st, want| async move {
        let page = next_page(&mut st, want).await?;
        Ok((st, page))
    })
}

async fn next_page(st: &mut ListState, page: usize) -> Result<Page, MongoError> {
    let o = &st.options;
    // Within one namespace the id orders; otherwise the sort key (id, thread, namespace).
    let by_id = o.thread_id.is_some() && o.checkpoint_ns.is_some();
    let field = if by_id { "c" } else { "s" };
    let mut upper = st.below.clone();
    if let Some(b) = &o.before {
        let b = if by_id { b.clone() } else { keys::id_bound(b) };
        upper = Some(match upper {
            Some(u) if u <= b => u,
            _ => b,
        });
    }

    let mut first = Document::new();
    if let Some(t) = &o.thread_id {
        first.insert("t", t.as_str());
    }
    if let Some(n) = &o.checkpoint_ns {
        first.insert("n", n.as_str());
    }
    let mut id_cond = Document::new();
    if let Some(id) = &o.checkpoint_id {
        id_cond.insert("$eq", id.as_str());
    }
    let mut stages = st.stages.iter();
    // Without a thread, the metadata filter's first lookup is what an index serves.
    if o.thread_id.is_none()
        && let Some(entries) = stages.next()
    {
        first.insert("mk", doc! { "$in": entries.clone() });
    }
    if let Some(u) = upper {
        if by_id {
            id_cond.insert("$lt", u);
        } else {
            first.insert("s", doc! { "$lt": u });
        }
    }
    if !id_cond.is_empty() {
        first.insert("c", id_cond);
    }
    let mut pipeline = vec![doc! { "$match": first }];
    for entries in stages {
        pipeline.push(doc! { "$match": { "mk": { "$in": entries.clone() } } });
    }
    pipeline.push(doc! { "$sort": { field: -1 } });
    pipeline.push(doc! { "$limit": page as i64 });
    let fetched = fetch_page(&st.inner, pipeline, page, o.thread_id.as_deref()).await?;
    let full = fetched.len() >= page;
    let mut rows = Vec::with_capacity(fetched.len());
    let mut last = None;
    for (row, writes) in fetched {
        last = Some(if by_id {
            row.id.clone()
        } else {
            row.sort.clone()
        });
        // The index lookups of the filter over-approximate (hashes, integers beyond
        // 2^53); the exact check decides.
        if o.admits(&row.thread_id, &row.ns, &row.id, &row.metadata) {
            rows.push((row, writes));
        }
    }
    st.below = last.filter(|_| full);
    let mut tuples = load_tuples(&st.inner, rows).await?;
    legacy_sends(&st.inner, &mut tuples).await?;
    Ok(Page::new(tuples, st.below.is_none()))
}

/// Checkpoints of a LangGraph format before 4 read with their parent's sends (see
/// `checkpoint_core::backend::legacy`): one query per such checkpoint, none otherwise.
async fn legacy_sends(inner: &Inner, tuples: &mut [CheckpointTuple]) -> Result<(), MongoError> {
    for tuple in tuples {
        let Some(parent) = legacy::sends_parent(tuple).cloned() else {
            continue;
        };
        let id = parent.checkpoint_id.clone().unwrap_or_default();
        let tasks = BTreeSet::from([TASKS.to_owned()]);
        let mut writes = delta::writes_of(
            inner,
            &parent.thread_id,
            &parent.checkpoint_ns,
            &[(id.clone(), tasks)],
            None,
        )
        .await?;
        legacy::apply_parent_sends(tuple, &writes.remove(&id).unwrap_or_default());
    }
    Ok(())
}

/// Values named by the checkpoints of `rows`, as `(channel, version key)` pairs.
pub(crate) fn live_values(rows: &[CheckpointRow]) -> BTreeSet<(String, String)> {
    rows.iter()
        .flat_map(|r| {
            r.checkpoint
                .channel_versions
                .iter()
                .map(|(c, v)| (c.clone(), keys::version_key(v)))
        })
        .collect()
}

/// Groups rows by `(thread, namespace)`.
pub(crate) fn by_namespace(
    rows: Vec<CheckpointRow>,
) -> BTreeMap<(String, String), Vec<CheckpointRow>> {
    let mut out: BTreeMap<(String, String), Vec<CheckpointRow>> = BTreeMap::new();
    for r in rows {
        out.entry((r.thread_id.clone(), r.ns.clone()))
            .or_default()
            .push(r);
    }
    out
}

/// Reads a whole query of checkpoint rows (for maintenance operations).
pub(crate) async fn rows(
    inner: &Inner,
    filter: Document,
) -> Result<Vec<CheckpointRow>, MongoError> {
    let docs: Vec<Document> = inner
        .checkpoints
        .find(filter)
        .projection(doc! { "mk": 0, "x": 0 })
        .await?
        .try_collect()
        .await?;
    docs.into_iter().map(codec::checkpoint_row).collect()
}
