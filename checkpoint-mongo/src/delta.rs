//! `delta_channel_history` in a handful of queries whatever the depth of the walk: the
//! namespace's checkpoints are read newest first in pages of [`PAGE`] (id, parent and
//! version map only), the walk up the parent links runs here, one query per stretch of the
//! walk tells which of the versions named on the way are stored values (and, when they are
//! few, as for a delta channel, returns them, seeds included), and one more fetches the
//! pending writes of the checkpoints walked. More run only for chunked values, and for a
//! stretch naming [`PREFETCH`] or more stored values (a second probe for their keys, then a
//! query for the seeds not among the first documents).
//!
//! Under a TTL a put also keeps alive what its delta channels are rebuilt from
//! ([`retained_by`]): the same walk, or, for a parent a recent put of this saver made, what
//! that put remembered.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::TryStreamExt;
use mongodb::bson::{Document, doc, oid::ObjectId};

use checkpoint_core::{
    ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    DeltaChannelHistory, PendingWrite, Result, TypedValue,
};

use crate::chunk;
use crate::codec::{self, Stored};
use crate::core::Inner;
use crate::error::MongoError;
use crate::keys;

/// Checkpoints one page of the walk reads.
const PAGE: i64 = 256;

/// The probe reads at most this many stored values of the open channels along a stretch
/// whole; when fewer exist, they are all there is and the seeds among them need no query of
/// their own. A delta channel is stored once per snapshot (every 100 updates by default), so
/// a page of [`PAGE`] checkpoints names a handful; a channel stored at most steps names
/// more, and then a second probe lists the keys of the rest. The price is reading up to
/// `PREFETCH - 1` values older than a seed that the history does not need.
const PREFETCH: usize = 8;

/// One checkpoint on the walk.
struct Node {
    id: String,
    parent: Option<String>,
    versions: ChannelVersions,
}

pub(crate) async fn delta_channel_history(
    inner: &Inner,
    config: &CheckpointConfig,
    channels: &[String],
) -> Result<BTreeMap<String, DeltaChannelHistory>> {
    let thread = config.require_thread()?;
    let mut out: BTreeMap<String, DeltaChannelHistory> = checkpoint_core::delta::empty(channels);
    if !out.is_empty() {
        walk(inner, thread, config, &mut out).await?;
    }
    Ok(out)
}

async fn walk(
    inner: &Inner,
    thread: &str,
    config: &CheckpointConfig,
    out: &mut BTreeMap<String, DeltaChannelHistory>,
) -> Result<(), MongoError> {
    let ns = config.checkpoint_ns.as_str();
    let page = Page::read(inner, thread, ns, config.checkpoint_id.as_deref()).await?;
    let Some(target) = page.newest() else {
        return Ok(());
    };
    if config
        .checkpoint_id
        .as_ref()
        .is_some_and(|id| id != &target.id)
    {
        return Ok(()); // no such checkpoint
    }
    let (child, cursor) = (target.id.clone(), target.parent.clone());
    let open = out.keys().cloned().collect();
    let Located {
        walked,
        seeds,
        mut fetched,
        one_page,
        page,
    } = locate(inner, thread, ns, page, child, cursor, open).await?;
    // Without forks in the stretch walked (the page, which holds every checkpoint of the
    // namespace down from the target, has none between the walked ones but them), its writes
    // are one range of ids: on the MongoDB-wire test server that query took 1.3 ms where
    // the lookup of 19 addresses took 1.8-2.0 ms.
    let range = match (walked.last(), walked.first()) {
        (Some((oldest, _)), Some((newest, _)))
            if one_page && page.count_between(oldest, newest) == walked.len() =>
        {
            Some((oldest.as_str(), newest.as_str()))
        }
        _ => None,
    };
    let writes = writes_of(inner, thread, ns, &walked, range).await?;
    // Seeds the probes returned need no query of their own (chunks aside).
    let mut known: Vec<(String, Stored)> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for (_, key) in &seeds {
        match fetched.remove(key) {
            Some(doc) => known.push((key.clone(), doc)),
            None => missing.push(key.clone()),
        }
    }
    let mut seed_values = values_of(inner, thread, missing.into_iter()).await?;
    seed_values.extend(resolve_all(inner, thread, known).await?);
    for (checkpoint, _) in walked.iter().rev() {
        for w in writes.get(checkpoint).into_iter().flatten() {
            if let Some(h) = out.get_mut(&w.channel) {
                h.writes.push(w.clone());
            }
        }
    }
    for (channel, key) in seeds {
        if let (Some(h), Some(v)) = (out.get_mut(&channel), seed_values.get(&key)) {
            h.seed = Some(v.clone());
        }
    }
    Ok(())
}

/// Where a walk went.
struct Located {
    /// Per checkpoint walked, newest first: its id and the channels still open there (the
    /// checkpoint storing a channel is walked with the channel open).
    walked: Vec<(String, BTreeSet<String>)>,
    /// `(channel, value key)` of each seed found.
    seeds: Vec<(String, String)>,
    /// Value documents the probes returned whole, by key.
    fetched: HashMap<String, Stored>,
    /// Whether the walk stayed on its first page, which `page` then is.
    one_page: bool,
    page: Page,
}

/// Walks up the parent links from `cursor` (the parent of `child`; the walk reads on from
/// `page`, and more pages as needed), until every channel of `open` met a checkpoint
/// storing it or the walk reached the root.
async fn locate(
    inner: &Inner,
    thread: &str,
    ns: &str,
    mut page: Page,
    mut child: String,
    mut cursor: Option<String>,
    mut open: BTreeSet<String>,
) -> Result<Located, MongoError> {
    let mut one_page = true;
    let mut walked: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut seeds: Vec<(String, String)> = Vec::new();
    let mut fetched: HashMap<String, Stored> = HashMap::new();
    while let Some(from) = cursor.clone() {
        if open.is_empty() {
            break;
        }
        let stretch = page.stretch(&from, &child);
        if stretch.is_empty() {
            // The parent is beyond this page (then read the next one) or not stored.
            if !page.ends_before(&from) {
                break;
            }
            page = Page::read(inner, thread, ns, Some(&from)).await?;
            one_page = false;
            if page.newest().is_none_or(|n| n.id != from) {
                break;
            }
            continue;
        }
        // One query tells which versions the open channels name along the stretch are
        // stored values.
        let stored = stored_versions(inner, thread, ns, &stretch, &open).await?;
        let stored: HashSet<String> = stored
            .into_iter()
            .map(|(key, doc)| {
                if let Some(doc) = doc {
                    fetched.insert(key.clone(), doc);
                }
                key
            })
            .collect();
        for node in &stretch {
            if open.is_empty() {
                break;
            }
            walked.push((node.id.clone(), open.clone()));
            let closing: Vec<(String, String)> = open
                .iter()
                .filter_map(|c| {
                    let key = value_key(thread, ns, c, node.versions.get(c)?);
                    stored.contains(&key).then(|| (c.clone(), key))
                })
                .collect();
            for (channel, key) in closing {
                open.remove(&channel);
                seeds.push((channel, key));
            }
            child = node.id.clone();
            cursor = node.parent.clone();
        }
    }
    Ok(Located {
        walked,
        seeds,
        fetched,
        one_page,
        page,
    })
}

/// What one checkpoint's delta channels keep alive under a TTL: per channel it needs
/// history for, its ancestors up to the nearest one storing the channel (newest first)
/// and that value's key (none when the walk reaches the root).
#[derive(Debug)]
pub(crate) struct Retained {
    /// Channels this checkpoint stores a value for (written by its put, or named at the
    /// version its parent stores), with the value's key: a child's walk for them stops here.
    pub(crate) stores: BTreeMap<String, String>,
    /// Per channel needing history: the ancestors it needs, and its seed's key.
    pub(crate) chains: BTreeMap<String, (Option<Arc<Link>>, Option<String>)>,
}

/// A list of checkpoint ids, newest first, sharing its tail with the lists of the
/// checkpoints below (a child's chain is its parent plus the parent's chain).
#[derive(Debug)]
pub(crate) struct Link {
    id: String,
    next: Option<Arc<Link>>,
}

impl Drop for Link {
    // Iteratively: a chain as long as a thread without snapshots would overflow the stack
    // dropped recursively.
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(link) = next {
            next = match Arc::try_unwrap(link) {
                Ok(mut only) => only.next.take(),
                Err(_) => None, // shared: the other owner drops the rest
            };
        }
    }
}

impl Retained {
    /// The ids of every checkpoint some chain names, and the keys of the seeds.
    pub(crate) fn ids_and_seeds(&self) -> (Vec<String>, Vec<String>) {
        let mut ids = BTreeSet::new();
        let mut seeds = BTreeSet::new();
        for (chain, seed) in self.chains.values() {
            let mut at = chain.as_deref();
            while let Some(link) = at {
                ids.insert(link.id.clone());
                at = link.next.as_deref();
            }
            seeds.extend(seed.iter().cloned());
        }
        (ids.into_iter().collect(), seeds.into_iter().collect())
    }
}

/// Remembers what recent checkpoints keep alive, so a put on top of one derives its own
/// chains without reading (a run puts each step on the one before, in one process).
pub(crate) struct RetentionMemo {
    entries: Mutex<MemoEntries>,
}

#[derive(Default)]
struct MemoEntries {
    map: HashMap<MemoKey, Arc<Retained>>,
    /// Keys, oldest first.
    order: VecDeque<MemoKey>,
}

/// `(thread, namespace, checkpoint id)`.
type MemoKey = (String, String, String);

/// Checkpoints the memo remembers (the oldest are forgotten first).
const MEMO_ENTRIES: usize = 4096;

impl RetentionMemo {
    pub(crate) fn new() -> Self {
        Self {
            entries: Mutex::new(MemoEntries::default()),
        }
    }

    fn get(&self, key: &MemoKey) -> Option<Arc<Retained>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.map.get(key).cloned()
    }

    /// Forgets every checkpoint of `thread`.
    pub(crate) fn forget_thread(&self, thread: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let MemoEntries { map, order } = &mut *entries;
        map.retain(|(t, _, _), _| t != thread);
        order.retain(|(t, _, _)| t != thread);
    }

    pub(crate) fn insert(&self, thread: &str, ns: &str, id: &str, retained: Arc<Retained>) {
        let key = (thread.to_owned(), ns.to_owned(), id.to_owned());
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let MemoEntries { map, order } = &mut *entries;
        if map.insert(key.clone(), retained).is_none() {
            order.push_back(key);
        }
        while order.len() > MEMO_ENTRIES {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

/// What a new checkpoint keeps alive under a TTL, put with `config` (its thread, namespace
/// and parent) and `metadata` (`named`: the key of the value each channel version it names):
/// `stores`, the channels whose values this put writes (with their keys), plus those it
/// names at the same version as a parent the memo remembers storing them; and, for the
/// channels it needs history for, chains derived from what the memo remembers of `parent`,
/// or, for the channels it cannot tell, found by a walk from `parent` (as
/// `delta_channel_history` walks).
pub(crate) async fn retained_by(
    inner: &Inner,
    config: &CheckpointConfig,
    checkpoint: &Checkpoint,
    metadata: &CheckpointMetadata,
    named: &BTreeMap<String, String>,
    mut stores: BTreeMap<String, String>,
) -> Result<Retained, MongoError> {
    let (thread, ns) = (config.thread_id.as_str(), config.checkpoint_ns.as_str());
    let parent = config.checkpoint_id.as_deref();
    let known = parent.and_then(|p| {
        inner
            .retention
            .get(&(thread.to_owned(), ns.to_owned(), p.to_owned()))
    });
    if let Some(p) = known.as_deref() {
        for (channel, key) in &p.stores {
            if named.get(channel) == Some(key) {
                stores.entry(channel.clone()).or_insert_with(|| key.clone());
            }
        }
    }
    let needs = checkpoint_core::delta::channels_needing_history(
        metadata,
        &checkpoint.channel_versions,
        |c| stores.contains_key(c),
    );
    let mut out = Retained {
        stores,
        chains: BTreeMap::new(),
    };
    let Some(parent) = parent else {
        return Ok(out); // a root needs nothing
    };
    let link = |next: Option<Arc<Link>>| {
        Some(Arc::new(Link {
            id: parent.to_owned(),
            next,
        }))
    };
    let mut unknown = BTreeSet::new();
    for channel in needs {
        match known.as_deref() {
            Some(p) if p.stores.contains_key(&channel) => {
                let seed = p.stores.get(&channel).cloned();
                out.chains.insert(channel, (link(None), seed));
            }
            Some(p) if p.chains.contains_key(&channel) => {
                let (chain, seed) = &p.chains[&channel];
                out.chains
                    .insert(channel, (link(chain.clone()), seed.clone()));
            }
            _ => {
                unknown.insert(channel);
            }
        }
    }
    if unknown.is_empty() {
        return Ok(out);
    }
    let page = Page::read(inner, thread, ns, Some(parent)).await?;
    if page.newest().is_none_or(|n| n.id != parent) {
        return Ok(out); // the parent is not stored: there is nothing to keep
    }
    let located = locate(
        inner,
        thread,
        ns,
        page,
        checkpoint.id.clone(),
        Some(parent.to_owned()),
        unknown.clone(),
    )
    .await?;
    for channel in unknown {
        let seed = located
            .seeds
            .iter()
            .find(|(c, _)| c == &channel)
            .map(|(_, key)| key.clone());
        if seed.is_some() && named.get(&channel) == seed.as_ref() {
            // The value found is the one this checkpoint names: it stores it too.
            out.stores.insert(channel, seed.unwrap_or_default());
            continue;
        }
        // Oldest first, so each link points at the one below.
        let mut chain: Option<Arc<Link>> = None;
        for (id, open) in located.walked.iter().rev() {
            if open.contains(&channel) {
                chain = Some(Arc::new(Link {
                    id: id.clone(),
                    next: chain,
                }));
            }
        }
        out.chains.insert(channel, (chain, seed));
    }
    Ok(out)
}

/// Up to [`PAGE`] checkpoints of a namespace, newest first from some id down.
struct Page {
    nodes: HashMap<String, Node>,
    newest: Option<String>,
    oldest: Option<String>,
    full: bool,
}

impl Page {
    /// The namespace's checkpoints from `from` (included; `None`: the latest) down: ids,
    /// parents and version maps.
    async fn read(
        inner: &Inner,
        thread: &str,
        ns: &str,
        from: Option<&str>,
    ) -> Result<Self, MongoError> {
        let mut filter = doc! { "t": thread, "n": ns };
        if let Some(from) = from {
            filter.insert("c", doc! { "$lte": from });
        }
        let docs: Vec<Document> = inner
            .checkpoints
            .find(filter)
            .sort(doc! { "c": -1 })
            .limit(PAGE)
            .projection(doc! { "t": 1, "n": 1, "c": 1, "s": 1, "p": 1, "cp": 1, "md": 1 })
            .await?
            .try_collect()
            .await?;
        let full = i64::try_from(docs.len()).unwrap_or(i64::MAX) >= PAGE;
        let mut nodes = HashMap::with_capacity(docs.len());
        for d in docs {
            let row = codec::checkpoint_row(d)?;
            nodes.insert(
                row.id.clone(),
                Node {
                    id: row.id,
                    parent: row.parent,
                    versions: row.checkpoint.channel_versions,
                },
            );
        }
        Ok(Self {
            newest: nodes.keys().max().cloned(),
            oldest: nodes.keys().min().cloned(),
            nodes,
            full,
        })
    }

    /// How many checkpoints of this page have ids between `oldest` and `newest` (included).
    fn count_between(&self, oldest: &str, newest: &str) -> usize {
        self.nodes
            .keys()
            .filter(|id| oldest <= id.as_str() && id.as_str() <= newest)
            .count()
    }

    fn newest(&self) -> Option<&Node> {
        self.nodes.get(self.newest.as_ref()?)
    }

    /// Whether `id` may be stored below what this page holds.
    fn ends_before(&self, id: &str) -> bool {
        self.full && self.oldest.as_deref().is_some_and(|o| id < o)
    }

    /// The chain from `from` up the parent links, as far as this page holds it; ids must
    /// decrease (below `child` first), so the walk ends even on damaged documents.
    fn stretch(&self, from: &str, child: &str) -> Vec<&Node> {
        let mut out: Vec<&Node> = Vec::new();
        let mut at = Some(from);
        let mut below = child;
        while let Some(id) = at {
            let Some(node) = self.nodes.get(id) else {
                break;
            };
            if node.id.as_str() >= below {
                break;
            }
            out.push(node);
            below = &node.id;
            at = node.parent.as_deref();
        }
        out
    }
}

fn value_key(thread: &str, ns: &str, channel: &str, version: &ChannelVersion) -> String {
    keys::doc_id(&[thread, ns, channel, &keys::version_key(version)])
}

/// Which of the versions the open channels name along `stretch` are stored values (not
/// removed): their value keys, each with its document when there are fewer than
/// [`PREFETCH`] (otherwise keys only, from a second query).
async fn stored_versions(
    inner: &Inner,
    thread: &str,
    ns: &str,
    stretch: &[&Node],
    open: &BTreeSet<String>,
) -> Result<HashMap<String, Option<Stored>>, MongoError> {
    let keys: BTreeSet<String> = stretch
        .iter()
        .flat_map(|n| {
            open.iter()
                .filter_map(|c| n.versions.get(c).map(|v| value_key(thread, ns, c, v)))
        })
        .collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let filter = doc! {
        "_id": { "$in": keys.into_iter().collect::<Vec<_>>() },
        "t": thread,
        "ty": { "$exists": true },
    };
    let docs: Vec<Document> = inner
        .values
        .find(filter.clone())
        .projection(VALUE_FIELDS.clone())
        .limit(i64::try_from(PREFETCH).unwrap_or(i64::MAX))
        .await?
        .try_collect()
        .await?;
    if docs.len() < PREFETCH {
        return docs
            .into_iter()
            .map(|mut d| {
                let id = codec::take_string(&mut d, "_id", "value document")?;
                Ok((id, Some(codec::get_value(&mut d, "value document")?)))
            })
            .collect();
    }
    // As many or more: the documents read are kept, the other keys listed.
    let mut out = docs
        .into_iter()
        .map(|mut d| {
            let id = codec::take_string(&mut d, "_id", "value document")?;
            Ok((id, Some(codec::get_value(&mut d, "value document")?)))
        })
        .collect::<Result<HashMap<_, _>, MongoError>>()?;
    let docs: Vec<Document> = inner
        .values
        .find(filter)
        .projection(doc! { "_id": 1 })
        .await?
        .try_collect()
        .await?;
    for mut d in docs {
        out.entry(codec::take_string(&mut d, "_id", "value document")?)
            .or_insert(None);
    }
    Ok(out)
}

/// The fields of a value document a read needs.
static VALUE_FIELDS: std::sync::LazyLock<Document> =
    std::sync::LazyLock::new(|| doc! { "_id": 1, "ty": 1, "d": 1, "len": 1, "b": 1, "nc": 1 });

/// The pending writes of the channels open at each walked checkpoint, per checkpoint id,
/// in the contract's order. `range`: the walked checkpoints are every checkpoint of the
/// namespace between these ids (both included), so the writes are read as one range of the
/// writes' `(t, n, c)` index instead of a lookup per checkpoint.
pub(crate) async fn writes_of(
    inner: &Inner,
    thread: &str,
    ns: &str,
    walked: &[(String, BTreeSet<String>)],
    range: Option<(&str, &str)>,
) -> Result<HashMap<String, Vec<PendingWrite>>, MongoError> {
    let mut out: HashMap<String, Vec<PendingWrite>> = HashMap::new();
    if walked.is_empty() {
        return Ok(out);
    }
    let open_at: HashMap<String, (&String, &BTreeSet<String>)> = walked
        .iter()
        .map(|(id, open)| (keys::doc_id(&[thread, ns, id]), (id, open)))
        .collect();
    // Either way, a document of a checkpoint not walked (none, with a range) is skipped below.
    let filter = match range {
        // `c < newest + "\0"` is `c <= newest` for binary string order. It is spelled so
        // because the MongoDB-wire test server (SecantusDB 0.7.0b3) answers `$lte` on `c`
        // over this ascending `(t, n, c, k)` index as if it were `$lt` (the descending
        // `(t, n, c)` index of checkpoints, which the pages use, answers it correctly).
        Some((oldest, newest)) => doc! {
            "t": thread,
            "n": ns,
            "c": { "$gte": oldest, "$lt": format!("{newest}\0") },
        },
        None => doc! { "a": { "$in": open_at.keys().cloned().collect::<Vec<_>>() }, "t": thread },
    };
    let docs: Vec<Document> = inner
        .writes
        .find(filter)
        .projection(doc! { "a": 1, "k": 1, "r": 1, "w": 1 })
        .await?
        .try_collect()
        .await?;
    let mut rows = Vec::with_capacity(docs.len());
    let mut blobs: BTreeSet<(String, ObjectId)> = BTreeSet::new();
    for mut d in docs {
        let address = codec::take_string(&mut d, "a", "pending writes document")?;
        let Some((id, open)) = open_at.get(&address) else {
            continue;
        };
        let mut row = codec::writes_row(d)?;
        row.entries.retain(|e| open.contains(&e.channel));
        for e in &row.entries {
            if let Some(b) = e.blob() {
                blobs.insert((thread.to_owned(), b));
            }
        }
        rows.push(((*id).clone(), row));
    }
    let chunks = chunk::fetch_chunks(inner, &blobs).await?;
    for (id, row) in rows {
        for e in row.entries {
            let value = resolve(&chunks, thread, &e.value)?
                .ok_or_else(|| MongoError::corrupt("pending write", "no value"))?;
            out.entry(id.clone()).or_default().push(PendingWrite {
                task_id: row.task_id.clone(),
                channel: e.channel,
                value,
                idx: e.idx,
                task_path: e.task_path,
            });
        }
    }
    for writes in out.values_mut() {
        writes.sort_by(|a, b| {
            (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx))
        });
    }
    Ok(out)
}

/// The values stored under `keys`, chunked ones joined.
async fn values_of(
    inner: &Inner,
    thread: &str,
    keys: impl Iterator<Item = String>,
) -> Result<HashMap<String, TypedValue>, MongoError> {
    let keys: Vec<String> = keys.collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let docs: Vec<Document> = inner
        .values
        .find(doc! { "_id": { "$in": keys }, "t": thread })
        .projection(VALUE_FIELDS.clone())
        .await?
        .try_collect()
        .await?;
    let stored = docs
        .into_iter()
        .map(|mut d| {
            let id = codec::take_string(&mut d, "_id", "value document")?;
            Ok((id, codec::get_value(&mut d, "value document")?))
        })
        .collect::<Result<Vec<_>, MongoError>>()?;
    resolve_all(inner, thread, stored).await
}

/// Stored values by key, chunked ones joined (one query for all their chunks, none when no
/// value is chunked); removed ones left out.
async fn resolve_all(
    inner: &Inner,
    thread: &str,
    stored: Vec<(String, Stored)>,
) -> Result<HashMap<String, TypedValue>, MongoError> {
    let blobs: BTreeSet<(String, ObjectId)> = stored
        .iter()
        .filter_map(|(_, v)| match v {
            Stored::Chunked { blob, .. } => Some((thread.to_owned(), *blob)),
            _ => None,
        })
        .collect();
    let chunks = chunk::fetch_chunks(inner, &blobs).await?;
    let mut out = HashMap::with_capacity(stored.len());
    for (id, value) in stored {
        if let Some(v) = resolve(&chunks, thread, &value)? {
            out.insert(id, v);
        }
    }
    Ok(out)
}

/// A stored value, its chunks joined (`None`: removed).
pub(crate) fn resolve(
    chunks: &HashMap<(String, ObjectId), Vec<Vec<u8>>>,
    thread: &str,
    stored: &Stored,
) -> Result<Option<TypedValue>, MongoError> {
    match stored {
        Stored::Removed => Ok(None),
        Stored::Inline(v) => Ok(Some(v.clone())),
        Stored::Chunked {
            type_tag,
            len,
            blob,
            count,
        } => {
            let parts = chunks
                .get(&(thread.to_owned(), *blob))
                .map(Vec::as_slice)
                .unwrap_or_default();
            chunk::join_chunks(type_tag.clone(), *len, *count, parts).map(Some)
        }
    }
}
