//! Maintenance: `delete_thread`, `copy_thread`, `prune` and `delete_for_runs`, and the
//! integrity scan.
//!
//! With transactions, each thread (or namespace) is changed in one transaction that also
//! writes the namespace's head document, so it serializes with concurrent puts. Without,
//! deletions go checkpoints first, then pending writes, values and chunks, and copies go
//! the other way round: a reader never sees a checkpoint whose values are missing, and an
//! interrupted call can simply be repeated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::TryStreamExt;
use mongodb::bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use mongodb::{ClientSession, Collection};

use checkpoint_core::{Error, PruneStrategy, Result, delta};

use crate::chunk;
use crate::codec::{self, WriteEntry};
use crate::core::Inner;
use crate::error::{MongoError, only_duplicate_keys};
use crate::keys;
use crate::keys::IDENTIFIERS;
use crate::read;
use crate::txn;

/// Documents per insert batch when copying.
const COPY_BATCH: usize = 256;

/// All documents of a query (with the session, inside a transaction).
pub(crate) async fn find_docs(
    coll: &Collection<Document>,
    filter: Document,
    projection: Document,
    session: Option<&mut ClientSession>,
) -> Result<Vec<Document>, MongoError> {
    match session {
        Some(s) => {
            let mut cursor = coll
                .find(filter)
                .projection(projection)
                .session(&mut *s)
                .await?;
            let mut out = Vec::new();
            while let Some(d) = cursor.next(&mut *s).await.transpose()? {
                out.push(d);
            }
            Ok(out)
        }
        None => Ok(coll
            .find(filter)
            .projection(projection)
            .await?
            .try_collect()
            .await?),
    }
}

async fn delete_docs(
    coll: &Collection<Document>,
    filter: Document,
    session: Option<&mut ClientSession>,
) -> Result<(), MongoError> {
    match session {
        Some(s) => coll.delete_many(filter).session(s).await?,
        None => coll.delete_many(filter).await?,
    };
    Ok(())
}

/// Writes the head documents of the namespaces a transaction changes (see `write::put`).
async fn touch_heads(
    inner: &Inner,
    thread_id: &str,
    namespaces: impl IntoIterator<Item = &String>,
    session: Option<&mut ClientSession>,
) -> Result<(), MongoError> {
    let Some(s) = session else { return Ok(()) };
    let ids: Vec<String> = namespaces
        .into_iter()
        .map(|n| keys::doc_id(&[thread_id, n]))
        .collect();
    inner
        .heads
        .update_many(
            doc! { "_id": { "$in": ids }, "t": thread_id },
            doc! { "$inc": { "w": 1_i64 } },
        )
        .session(s)
        .await?;
    Ok(())
}

pub(crate) async fn delete_thread(inner: &Arc<Inner>, thread_id: &str) -> Result<()> {
    // The empty thread id can hold nothing.
    if thread_id.is_empty() {
        return Ok(());
    }
    let result = if inner.transactions() {
        let ctx = Arc::clone(inner);
        let t = thread_id.to_owned();
        txn::run(inner, move |s| {
            let ctx = Arc::clone(&ctx);
            let t = t.clone();
            Box::pin(async move { delete_thread_docs(&ctx, &t, Some(s)).await })
        })
        .await
    } else {
        delete_thread_docs(inner, thread_id, None).await
    };
    // A thread put again under the same ids must not inherit what the deleted one kept.
    inner.retention.forget_thread(thread_id);
    result.map_err(Error::from)
}

async fn delete_thread_docs(
    inner: &Inner,
    thread_id: &str,
    mut session: Option<&mut ClientSession>,
) -> Result<(), MongoError> {
    for coll in [
        &inner.checkpoints,
        &inner.writes,
        &inner.values,
        &inner.chunks,
        &inner.heads,
    ] {
        delete_docs(coll, doc! { "t": thread_id }, session.as_deref_mut()).await?;
    }
    Ok(())
}

/// Deletes checkpoints `doomed` of one namespace, except those a checkpoint that stays needs
/// for its delta channels (see `checkpoint_core::delta::needed_ancestors`), then the
/// pending writes of every id that does not remain (writes recorded for checkpoints that
/// were never put go too, as in the reference), the values no remaining checkpoint names,
/// and the chunks of both.
async fn collect_namespace(
    inner: &Inner,
    thread_id: &str,
    ns: &str,
    doomed: &[String],
    mut session: Option<&mut ClientSession>,
) -> Result<(), MongoError> {
    if doomed.is_empty() {
        return Ok(());
    }
    let rows: Vec<codec::CheckpointRow> = find_docs(
        &inner.checkpoints,
        doc! { "t": thread_id, "n": ns },
        doc! { "mk": 0, "x": 0 },
        session.as_deref_mut(),
    )
    .await?
    .into_iter()
    .map(codec::checkpoint_row)
    .collect::<Result<_, _>>()?;
    let values = find_docs(
        &inner.values,
        doc! { "t": thread_id, "n": ns },
        doc! { "ch": 1, "v": 1, "b": 1, "ty": 1 },
        session.as_deref_mut(),
    )
    .await?;
    let stored: BTreeSet<(String, String)> = values
        .iter()
        .filter(|v| v.contains_key("ty"))
        .map(|v| {
            (
                v.get_str("ch").unwrap_or_default().to_owned(),
                v.get_str("v").unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let doomed: BTreeSet<&str> = doomed.iter().map(String::as_str).collect();
    let needed = needed_by_staying(&rows, &doomed, &stored);
    let doomed: Vec<&str> = doomed
        .into_iter()
        .filter(|id| !needed.contains(*id))
        .collect();
    if doomed.is_empty() {
        return Ok(());
    }
    let doomed_ids: Vec<String> = doomed
        .iter()
        .map(|c| keys::doc_id(&[thread_id, ns, c]))
        .collect();
    delete_docs(
        &inner.checkpoints,
        doc! { "_id": { "$in": doomed_ids }, "t": thread_id },
        session.as_deref_mut(),
    )
    .await?;
    let remaining: Vec<codec::CheckpointRow> = rows
        .into_iter()
        .filter(|r| !doomed.contains(&r.id.as_str()))
        .collect();
    if remaining.is_empty()
        && let Some(s) = session.as_deref_mut()
    {
        // The namespace holds no checkpoint now, so its head goes too, in the transaction
        // that read the namespace whole (a put racing it conflicts on the head): thread
        // listings then meet no leftover head. Without a transaction a put may have added
        // a checkpoint since the read; the head stays, and listings skip it while empty.
        inner
            .heads
            .delete_one(doc! { "_id": keys::doc_id(&[thread_id, ns]), "t": thread_id })
            .session(s)
            .await?;
    }
    let remaining_ids: BTreeSet<&str> = remaining.iter().map(|r| r.id.as_str()).collect();
    let live = read::live_values(&remaining);
    let mut blobs: Vec<ObjectId> = Vec::new();

    let writes = find_docs(
        &inner.writes,
        doc! { "t": thread_id, "n": ns },
        doc! { "c": 1, "w.b": 1 },
        session.as_deref_mut(),
    )
    .await?;
    let mut dead_writes = Vec::new();
    for w in writes {
        let c = w.get_str("c").unwrap_or_default();
        if !remaining_ids.contains(c) {
            blobs.extend(entry_blobs(&w));
            dead_writes.push(w.get("_id").cloned().unwrap_or(Bson::Null));
        }
    }
    if !dead_writes.is_empty() {
        delete_docs(
            &inner.writes,
            doc! { "_id": { "$in": dead_writes }, "t": thread_id },
            session.as_deref_mut(),
        )
        .await?;
    }

    let mut dead_values = Vec::new();
    for v in values {
        let key = (
            v.get_str("ch").unwrap_or_default().to_owned(),
            v.get_str("v").unwrap_or_default().to_owned(),
        );
        if !live.contains(&key) {
            if let Ok(b) = v.get_object_id("b") {
                blobs.push(b);
            }
            dead_values.push(v.get("_id").cloned().unwrap_or(Bson::Null));
        }
    }
    if !dead_values.is_empty() {
        delete_docs(
            &inner.values,
            doc! { "_id": { "$in": dead_values }, "t": thread_id },
            session.as_deref_mut(),
        )
        .await?;
    }
    chunk::delete_chunks(inner, thread_id, blobs, session).await
}

/// The checkpoints of `rows` (one namespace) that those not in `doomed` need for their delta
/// channels; `stored` holds the `(channel, version key)` pairs that are stored values.
fn needed_by_staying(
    rows: &[codec::CheckpointRow],
    doomed: &BTreeSet<&str>,
    stored: &BTreeSet<(String, String)>,
) -> BTreeSet<String> {
    let by_id: HashMap<&str, &codec::CheckpointRow> =
        rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let stores = |id: &str, channel: &str| {
        by_id
            .get(id)
            .and_then(|r| r.checkpoint.channel_versions.get(channel))
            .is_some_and(|v| stored.contains(&(channel.to_owned(), keys::version_key(v))))
    };
    delta::needed_ancestors(
        rows.iter()
            .filter(|r| !doomed.contains(r.id.as_str()))
            .map(|r| r.id.clone()),
        |id| by_id.get(id).and_then(|r| r.parent.clone()),
        |id| {
            by_id
                .get(id)
                .map(|r| {
                    delta::channels_needing_history(
                        &r.metadata,
                        &r.checkpoint.channel_versions,
                        |c| stores(id, c),
                    )
                })
                .unwrap_or_default()
        },
        stores,
    )
}

fn entry_blobs(writes_doc: &Document) -> Vec<ObjectId> {
    writes_doc
        .get_array("w")
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e.as_document()?.get_object_id("b").ok())
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) async fn prune(
    inner: &Arc<Inner>,
    thread_ids: &[String],
    strategy: PruneStrategy,
) -> Result<()> {
    let keep = match strategy {
        PruneStrategy::KeepLatest => 1,
        PruneStrategy::KeepLast(n) => n,
        PruneStrategy::DeleteAll => 0,
        _ => {
            return Err(Error::Unsupported {
                op: "prune with a strategy this saver does not know",
            });
        }
    };
    for thread_id in thread_ids {
        if thread_id.is_empty() {
            continue;
        }
        if keep == 0 {
            // Nothing remains: everything of the thread goes, as with delete_thread.
            delete_thread(inner, thread_id).await?;
            continue;
        }
        let result = if inner.transactions() {
            let ctx = Arc::clone(inner);
            let t = thread_id.clone();
            txn::run(inner, move |s| {
                let ctx = Arc::clone(&ctx);
                let t = t.clone();
                Box::pin(async move { prune_thread(&ctx, &t, keep, Some(s)).await })
            })
            .await
        } else {
            prune_thread(inner, thread_id, keep, None).await
        };
        result.map_err(Error::from)?;
    }
    Ok(())
}

async fn prune_thread(
    inner: &Inner,
    thread_id: &str,
    keep: usize,
    mut session: Option<&mut ClientSession>,
) -> Result<(), MongoError> {
    let docs = find_docs(
        &inner.checkpoints,
        doc! { "t": thread_id },
        doc! { "n": 1, "c": 1 },
        session.as_deref_mut(),
    )
    .await?;
    let mut by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for mut d in docs {
        let n = codec::take_string(&mut d, "n", "checkpoint document")?;
        let c = codec::take_string(&mut d, "c", "checkpoint document")?;
        by_ns.entry(n).or_default().push(c);
    }
    by_ns.retain(|_, ids| ids.len() > keep);
    touch_heads(inner, thread_id, by_ns.keys(), session.as_deref_mut()).await?;
    for (ns, mut ids) in by_ns {
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let doomed = ids.split_off(keep);
        collect_namespace(inner, thread_id, &ns, &doomed, session.as_deref_mut()).await?;
    }
    Ok(())
}

pub(crate) async fn delete_for_runs(inner: &Arc<Inner>, run_ids: &[String]) -> Result<()> {
    if run_ids.is_empty() {
        return Ok(());
    }
    let runs: BTreeSet<&str> = run_ids.iter().map(String::as_str).collect();
    let mut entries = BTreeSet::new();
    for run in &runs {
        let mut filter = serde_json::Map::new();
        filter.insert("run_id".to_owned(), serde_json::Value::from(*run));
        for stage in keys::filter_stages(&filter) {
            entries.extend(stage);
        }
    }
    let candidates = read::rows(
        inner,
        doc! { "mk": { "$in": entries.into_iter().collect::<Vec<_>>() } },
    )
    .await
    .map_err(Error::from)?;
    let doomed: Vec<codec::CheckpointRow> = candidates
        .into_iter()
        .filter(|r| r.metadata.run_id().is_some_and(|id| runs.contains(id)))
        .collect();
    for ((thread_id, ns), rows) in read::by_namespace(doomed) {
        let ids: Vec<String> = rows.into_iter().map(|r| r.id).collect();
        let result = if inner.transactions() {
            let ctx = Arc::clone(inner);
            let (t, n, ids) = (thread_id.clone(), ns.clone(), ids.clone());
            txn::run(inner, move |s| {
                let ctx = Arc::clone(&ctx);
                let (t, n, ids) = (t.clone(), n.clone(), ids.clone());
                Box::pin(async move {
                    touch_heads(&ctx, &t, [&n], Some(&mut *s)).await?;
                    collect_namespace(&ctx, &t, &n, &ids, Some(s)).await
                })
            })
            .await
        } else {
            collect_namespace(inner, &thread_id, &ns, &ids, None).await
        };
        result.map_err(Error::from)?;
    }
    Ok(())
}

pub(crate) async fn copy_thread(inner: &Arc<Inner>, source: &str, target: &str) -> Result<()> {
    if target.is_empty() {
        return Err(Error::invalid("copy_thread target has an empty thread id"));
    }
    IDENTIFIERS.check("copy_thread target", target)?;
    if source.is_empty() || source == target {
        return Ok(());
    }
    copy_docs(inner, source, target).await.map_err(Error::from)
}

/// Inserts documents, keeping any that exist already.
async fn insert_keeping_existing(
    coll: &Collection<Document>,
    docs: &mut Vec<Document>,
) -> Result<(), MongoError> {
    if docs.is_empty() {
        return Ok(());
    }
    match coll.insert_many(std::mem::take(docs)).ordered(false).await {
        Ok(_) => Ok(()),
        Err(e) if only_duplicate_keys(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn copy_docs(inner: &Inner, source: &str, target: &str) -> Result<(), MongoError> {
    // Chunks first, then values, writes and checkpoints last: a checkpoint of the target
    // appears only once everything it loads is there.
    let mut batch = Vec::new();
    let mut cursor = inner
        .chunks
        .find(doc! { "t": source })
        .batch_size(16)
        .await?;
    while let Some(mut d) = cursor.try_next().await? {
        d.remove("_id");
        d.insert("t", target);
        // A value's chunk names the target's copy of the value.
        if let Some(owner) = d
            .get_str(codec::CHUNK_OWNER)
            .ok()
            .and_then(|o| keys::with_thread(o, target))
        {
            d.insert(codec::CHUNK_OWNER, owner);
        }
        batch.push(d);
        if batch.len() >= 16 {
            insert_keeping_existing(&inner.chunks, &mut batch).await?;
        }
    }
    insert_keeping_existing(&inner.chunks, &mut batch).await?;

    let mut cursor = inner.values.find(doc! { "t": source }).await?;
    while let Some(mut d) = cursor.try_next().await? {
        let n = codec::take_string(&mut d, "n", "value document")?;
        let ch = codec::take_string(&mut d, "ch", "value document")?;
        let v = codec::take_string(&mut d, "v", "value document")?;
        d.insert("_id", keys::doc_id(&[target, &n, &ch, &v]));
        d.insert("t", target);
        d.insert("n", n);
        d.insert("ch", ch);
        d.insert("v", v);
        batch.push(d);
        if batch.len() >= COPY_BATCH {
            insert_keeping_existing(&inner.values, &mut batch).await?;
        }
    }
    insert_keeping_existing(&inner.values, &mut batch).await?;

    let mut cursor = inner.writes.find(doc! { "t": source }).await?;
    while let Some(mut d) = cursor.try_next().await? {
        let n = codec::take_string(&mut d, "n", "pending writes document")?;
        let c = codec::take_string(&mut d, "c", "pending writes document")?;
        let k = codec::take_string(&mut d, "k", "pending writes document")?;
        d.remove("_id");
        d.insert("t", target);
        d.insert("a", keys::doc_id(&[target, &n, &c]));
        d.insert("n", n);
        d.insert("c", c);
        d.insert("k", k);
        copy_writes_doc(inner, d).await?;
    }

    let mut cursor = inner.checkpoints.find(doc! { "t": source }).await?;
    while let Some(mut d) = cursor.try_next().await? {
        let n = codec::take_string(&mut d, "n", "checkpoint document")?;
        let c = codec::take_string(&mut d, "c", "checkpoint document")?;
        d.insert("_id", keys::doc_id(&[target, &n, &c]));
        d.insert("t", target);
        d.insert("s", keys::sort_key(&c, target, &n));
        d.insert("n", n);
        d.insert("c", c);
        batch.push(d);
        if batch.len() >= COPY_BATCH {
            insert_checkpoints(inner, target, &mut batch).await?;
        }
    }
    insert_checkpoints(inner, target, &mut batch).await
}

/// Inserts checkpoint documents of `thread`, keeping any that exist already, between two
/// writes of the head documents of their namespaces (expiring no earlier than they do, and
/// never when one of them never does): the heads list the threads (see
/// `read::list_threads`). The first keeps a checkpoint from ever lacking its head if the
/// copy stops; the second restores a head that a `delete_for_runs` finding the namespace
/// empty in between removed.
async fn insert_checkpoints(
    inner: &Inner,
    thread: &str,
    docs: &mut Vec<Document>,
) -> Result<(), MongoError> {
    let mut heads: BTreeMap<&str, Option<DateTime>> = BTreeMap::new();
    for d in docs.iter() {
        let x = d.get_datetime("x").ok().copied();
        heads
            .entry(d.get_str("n").unwrap_or_default())
            .and_modify(|latest| {
                *latest = match (*latest, x) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                }
            })
            .or_insert(x);
    }
    let heads: Vec<(String, Option<DateTime>)> =
        heads.into_iter().map(|(n, x)| (n.to_owned(), x)).collect();
    for (ns, x) in &heads {
        crate::write::ensure_head(inner, thread, ns, *x).await?;
    }
    insert_keeping_existing(&inner.checkpoints, docs).await?;
    for (ns, x) in &heads {
        crate::write::ensure_head(inner, thread, ns, *x).await?;
    }
    Ok(())
}

/// Copies one pending-writes document into the target: as is when the target has none for
/// that checkpoint and task, else only the entries whose index the target lacks.
async fn copy_writes_doc(inner: &Inner, doc: Document) -> Result<(), MongoError> {
    match inner.writes.insert_one(doc.clone()).await {
        Ok(_) => return Ok(()),
        Err(e) if crate::error::is_duplicate_key(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let key = doc! {
        "t": doc.get("t").cloned().unwrap_or(Bson::Null),
        "n": doc.get("n").cloned().unwrap_or(Bson::Null),
        "c": doc.get("c").cloned().unwrap_or(Bson::Null),
        "k": doc.get("k").cloned().unwrap_or(Bson::Null),
    };
    let incoming = codec::writes_row(doc.clone())?;
    const ATTEMPTS: u32 = 64;
    for attempt in 1..=ATTEMPTS {
        let Some(existing) = inner.writes.find_one(key.clone()).await? else {
            match inner.writes.insert_one(doc.clone()).await {
                Ok(_) => return Ok(()),
                Err(e) if crate::error::is_duplicate_key(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let row = codec::writes_row(existing.clone())?;
        let missing: Vec<&WriteEntry> = incoming
            .entries
            .iter()
            .filter(|e| !row.entries.iter().any(|x| x.idx == e.idx))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut entries: Vec<Bson> = row
            .entries
            .iter()
            .map(|e| Bson::Document(e.to_doc()))
            .collect();
        entries.extend(missing.iter().map(|e| Bson::Document(e.to_doc())));
        let mut merged = existing;
        merged.remove("_id");
        merged.insert("w", entries);
        merged.insert("r", row.revision + 1);
        let mut filter = key.clone();
        filter.insert("r", row.revision);
        let r = inner.writes.replace_one(filter, merged).await?;
        if r.matched_count == 1 {
            return Ok(());
        }
        txn::backoff(attempt).await;
    }
    Err(MongoError::Contention { attempts: ATTEMPTS })
}

/// The integrity scan of one thread (see [`IntegrityScan`](checkpoint_core::IntegrityScan)):
/// four indexed finds, none of which reads a value's bytes.
pub(crate) async fn scan_thread(
    inner: &Inner,
    thread_id: &str,
) -> Result<Vec<checkpoint_core::StorageIssue>> {
    use checkpoint_core::StorageIssue;
    let by_thread = doc! { "t": thread_id };
    // Four independent reads, sent at once; none reads a value's or a write's bytes.
    let (rows, values, chunks, writes) = futures::try_join!(
        find_docs(
            &inner.checkpoints,
            by_thread.clone(),
            doc! { "t": 1, "n": 1, "c": 1, "s": 1, "p": 1, "cp": 1, "md": 1 },
            None,
        ),
        find_docs(
            &inner.values,
            by_thread.clone(),
            doc! { "n": 1, "ch": 1, "v": 1, "b": 1, "nc": 1 },
            None,
        ),
        find_docs(&inner.chunks, by_thread.clone(), doc! { "b": 1 }, None),
        find_docs(
            &inner.writes,
            by_thread.clone(),
            doc! { "n": 1, "c": 1, "w.i": 1 },
            None,
        ),
    )?;

    let mut chunk_counts: HashMap<ObjectId, i64> = HashMap::new();
    for c in &chunks {
        if let Ok(b) = c.get_object_id("b") {
            *chunk_counts.entry(b).or_default() += 1;
        }
    }
    // (ns, channel, version key) -> whether the value is complete.
    let mut stored: HashMap<(String, String, String), bool> = HashMap::new();
    for mut v in values {
        const WHAT: &str = "value document";
        let ns = codec::take_string(&mut v, "n", WHAT)?;
        let channel = codec::take_string(&mut v, "ch", WHAT)?;
        let version = codec::take_string(&mut v, "v", WHAT)?;
        let complete = match (v.get_object_id("b"), v.get("nc")) {
            (Ok(b), Some(_)) => {
                let parts = codec::number(&v, "nc", WHAT)?;
                chunk_counts.get(&b).copied().unwrap_or(0) >= parts
            }
            _ => true,
        };
        stored.insert((ns, channel, version), complete);
    }
    let mut checkpoints: BTreeSet<(String, String)> = BTreeSet::new();
    let mut missing = Vec::new();
    for d in rows {
        let row = codec::checkpoint_row(d)?;
        for (channel, version) in &row.checkpoint.channel_versions {
            let key = (row.ns.clone(), channel.clone(), keys::version_key(version));
            if !stored.get(&key).copied().unwrap_or(false) {
                missing.push((
                    row.ns.clone(),
                    row.id.clone(),
                    channel.clone(),
                    version.to_string(),
                ));
            }
        }
        checkpoints.insert((row.ns, row.id));
    }
    let mut orphans: BTreeMap<(String, String), u64> = BTreeMap::new();
    for mut w in writes {
        const WHAT: &str = "pending writes document";
        let ns = codec::take_string(&mut w, "n", WHAT)?;
        let id = codec::take_string(&mut w, "c", WHAT)?;
        if !checkpoints.contains(&(ns.clone(), id.clone())) {
            let n = w.get_array("w").map_or(0, |a| a.len() as u64);
            *orphans.entry((ns, id)).or_default() += n;
        }
    }
    Ok(StorageIssue::collect(
        missing,
        orphans.into_iter().map(|((ns, id), n)| (ns, id, n)),
    ))
}
