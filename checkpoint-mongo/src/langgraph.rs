//! Reading databases written by Python's `langgraph-checkpoint-mongodb` ([`LangGraphMongoSource`]).
//!
//! LangGraph's MongoDB layout is two collections (by default `checkpoints` and
//! `checkpoint_writes`): one document per checkpoint (`thread_id`, `checkpoint_ns`,
//! `checkpoint_id`, `parent_checkpoint_id`, and the whole checkpoint, channel values
//! included, as the `type`/`checkpoint` pair of `serde.dumps_typed`; `metadata` a document
//! whose every leaf is its own `[type, bytes]` pair) and one document per pending write
//! (`task_id`, `task_path`, `idx`, `channel`, `type`, `value`). A source reads them as
//! [`CheckpointTuple`]s: each channel value holds exactly the bytes LangGraph wrote for it,
//! so a checkpoint imported into a saver reads back in Python as LangGraph wrote it.
//! [`ReadOnly`](checkpoint_core::backend::ReadOnly)`<LangGraphMongoSource>` is the database
//! as a [`Saver`](checkpoint_core::Saver) whose writes are rejected.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use futures::stream::BoxStream;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::ClientOptions;
use mongodb::{Client, Collection, Database};

use checkpoint_core::backend::langgraph::{decode_checkpoint, typed_json};
use checkpoint_core::backend::legacy::{apply_parent_sends, sends_parent};
use checkpoint_core::backend::{Page, ReadSource, paged};
use checkpoint_core::{
    Bytes, CheckpointConfig, CheckpointMetadata, CheckpointTuple, Error, IntegrityScan,
    ListOptions, PendingWrite, Result, StorageIssue, TypedValue, ValueType, async_trait,
};

use crate::error::driver;

/// How many checkpoints one page of [`LangGraphMongoSource::list`] reads.
const PAGE: usize = 64;

/// A database written by LangGraph's `MongoDBSaver`, read without writing anything.
///
/// ```no_run
/// # async fn demo() -> checkpoint_core::Result<()> {
/// use futures::TryStreamExt;
/// use checkpoint_core::ListOptions;
/// use checkpoint_mongo::langgraph::LangGraphMongoSource;
///
/// let source = LangGraphMongoSource::connect("mongodb://127.0.0.1:27017", "checkpointing_db").await?;
/// let history: Vec<_> = source.list(ListOptions::thread("t1")).try_collect().await?;
/// println!("{} checkpoints", history.len());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LangGraphMongoSource {
    checkpoints: Collection<Document>,
    writes: Collection<Document>,
}

impl LangGraphMongoSource {
    /// Connects to the deployment at `uri` and reads LangGraph's default collections
    /// (`checkpoints`, `checkpoint_writes`) of `database`. See
    /// [`with_collections`](Self::with_collections).
    pub async fn connect(uri: &str, database: &str) -> Result<Self> {
        let options = ClientOptions::parse(uri).await.map_err(driver)?;
        let client = Client::with_options(options).map_err(driver)?;
        Self::with_collections(
            client.database(database),
            "checkpoints",
            "checkpoint_writes",
        )
        .await
    }

    /// Reads the collections named as `MongoDBSaver`'s `checkpoint_collection_name` and
    /// `writes_collection_name`. The checkpoint collection must exist and, if it holds a
    /// document, that document must have LangGraph's fields (this crate's own
    /// [`MongoSaver`](crate::MongoSaver) layout uses the same collection names with other
    /// fields); anything else is [`Error::InvalidInput`].
    pub async fn with_collections(
        database: Database,
        checkpoints: &str,
        writes: &str,
    ) -> Result<Self> {
        let names = database.list_collection_names().await.map_err(driver)?;
        if !names.iter().any(|n| n == checkpoints) {
            return Err(Error::invalid(format!(
                "not a LangGraph MongoDB database: database {:?} has no collection {checkpoints:?}",
                database.name()
            )));
        }
        let source = Self {
            checkpoints: database.collection(checkpoints),
            writes: database.collection(writes),
        };
        if let Some(doc) = source
            .checkpoints
            .find_one(doc! {})
            .projection(doc! {"thread_id": 1, "checkpoint_id": 1, "type": 1})
            .await
            .map_err(driver)?
            && !(doc.contains_key("thread_id")
                && doc.contains_key("checkpoint_id")
                && doc.contains_key("type"))
        {
            return Err(Error::invalid(format!(
                "not a LangGraph MongoDB database: the documents of {checkpoints:?} lack \
                 LangGraph's fields (thread_id, checkpoint_id, type, checkpoint)"
            )));
        }
        Ok(source)
    }

    /// One checkpoint (`checkpoint_id`), or the namespace's latest.
    pub async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        config.require_thread()?;
        let mut options = ListOptions::from_config(config);
        options.limit = Some(1);
        let mut page = self.page(&options, None, 1).await?;
        Ok(page.pop())
    }

    /// Checkpoints newest first, as [`Saver::list`](checkpoint_core::Saver::list) orders
    /// them, with every condition of `options` (metadata filters are checked on the decoded
    /// metadata).
    pub fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        let source = self.clone();
        let limit = options.limit;
        paged(
            limit,
            PAGE,
            (source, options, None),
            |(source, options, cursor): (Self, ListOptions, Option<Cursor>), want| async move {
                let tuples = source.page(&options, cursor.as_ref(), want).await?;
                let fetched = tuples.len();
                // The stored row's id (what the query orders by), not the id inside the
                // serialized checkpoint, should the two ever differ.
                let next = tuples.last().map(|t| {
                    (
                        t.config.checkpoint_id.clone().unwrap_or_default(),
                        t.config.thread_id.clone(),
                        t.config.checkpoint_ns.clone(),
                    )
                });
                let admitted = tuples
                    .into_iter()
                    .filter(|t| {
                        options.admits(
                            &t.config.thread_id,
                            &t.config.checkpoint_ns,
                            t.config.checkpoint_id.as_deref().unwrap_or_default(),
                            &t.metadata,
                        )
                    })
                    .collect();
                Ok(((source, options, next), Page::new(admitted, fetched < want)))
            },
        )
    }

    /// One page of checkpoints after `cursor`, with their pending writes.
    async fn page(
        &self,
        options: &ListOptions,
        cursor: Option<&Cursor>,
        want: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        let mut conditions = Vec::new();
        if let Some(t) = &options.thread_id {
            conditions.push(doc! {"thread_id": t});
        }
        if let Some(ns) = &options.checkpoint_ns {
            conditions.push(doc! {"checkpoint_ns": ns});
        }
        if let Some(id) = &options.checkpoint_id {
            conditions.push(doc! {"checkpoint_id": id});
        }
        if let Some(before) = &options.before {
            conditions.push(doc! {"checkpoint_id": {"$lt": before}});
        }
        if let Some((id, thread, ns)) = cursor {
            conditions.push(doc! {"$or": [
                {"checkpoint_id": {"$lt": id}},
                {"checkpoint_id": id, "thread_id": {"$lt": thread}},
                {"checkpoint_id": id, "thread_id": thread, "checkpoint_ns": {"$lt": ns}},
            ]});
        }
        let filter = if conditions.is_empty() {
            doc! {}
        } else {
            doc! {"$and": conditions}
        };
        let docs: Vec<Document> = self
            .checkpoints
            .find(filter)
            .sort(doc! {"checkpoint_id": -1, "thread_id": -1, "checkpoint_ns": -1})
            .limit(i64::try_from(want).unwrap_or(i64::MAX))
            .await
            .map_err(driver)?
            .try_collect()
            .await
            .map_err(driver)?;
        let mut out = Vec::with_capacity(docs.len());
        for d in &docs {
            out.push(decode_checkpoint_doc(d)?);
        }
        let mut writes = self.writes_of(&out).await?;
        for tuple in &mut out {
            tuple.pending_writes = writes.remove(&address(&tuple.config)).unwrap_or_default();
        }
        for tuple in &mut out {
            if let Some(parent) = sends_parent(tuple).cloned() {
                let parent_writes = self
                    .writes_of_configs(std::slice::from_ref(&parent))
                    .await?
                    .remove(&address(&parent))
                    .unwrap_or_default();
                apply_parent_sends(tuple, &parent_writes);
            }
        }
        Ok(out)
    }

    /// The pending writes of every tuple, by address, in the contract's order.
    async fn writes_of(
        &self,
        tuples: &[CheckpointTuple],
    ) -> Result<BTreeMap<Address, Vec<PendingWrite>>> {
        let configs: Vec<CheckpointConfig> = tuples.iter().map(|t| t.config.clone()).collect();
        self.writes_of_configs(&configs).await
    }

    /// The pending writes of the checkpoints at `configs` (one query), by address.
    async fn writes_of_configs(
        &self,
        configs: &[CheckpointConfig],
    ) -> Result<BTreeMap<Address, Vec<PendingWrite>>> {
        if configs.is_empty() {
            return Ok(BTreeMap::new());
        }
        let any: Vec<Document> = configs
            .iter()
            .map(|c| {
                doc! {
                    "thread_id": &c.thread_id,
                    "checkpoint_ns": &c.checkpoint_ns,
                    "checkpoint_id": c.checkpoint_id.as_deref().unwrap_or_default(),
                }
            })
            .collect();
        let mut cursor = self.writes.find(doc! {"$or": any}).await.map_err(driver)?;
        let mut out: BTreeMap<Address, Vec<PendingWrite>> = BTreeMap::new();
        while let Some(d) = cursor.try_next().await.map_err(driver)? {
            let (at, write) = decode_write_doc(&d)?;
            out.entry(at).or_default().push(write);
        }
        for writes in out.values_mut() {
            writes.sort_by(|a, b| {
                (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx))
            });
        }
        Ok(out)
    }
}

#[async_trait]
impl ReadSource for LangGraphMongoSource {
    const NAME: &'static str = "LangGraphMongoSource";

    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        LangGraphMongoSource::get_tuple(self, config).await
    }

    fn list(&self, options: ListOptions) -> BoxStream<'static, Result<CheckpointTuple>> {
        LangGraphMongoSource::list(self, options)
    }

    fn list_threads(&self) -> BoxStream<'static, Result<String>> {
        self.thread_ids(None)
    }

    fn list_threads_after(&self, after: &str) -> BoxStream<'static, Result<String>> {
        self.thread_ids(Some(after.to_owned()))
    }
}

impl LangGraphMongoSource {
    /// The thread ids in BSON's string order (bytes), after `after`.
    fn thread_ids(&self, after: Option<String>) -> BoxStream<'static, Result<String>> {
        let checkpoints = self.checkpoints.clone();
        let mut first_page = true;
        checkpoint_core::backend::paged_keys(1000, after, move |after, want| {
            let checkpoints = checkpoints.clone();
            let first = std::mem::take(&mut first_page);
            async move {
                // LangGraph stores a thread id as its caller gave it; one that is not a
                // string could not be addressed (nor compared with the string cursor
                // below, so it would silently be left out): say so before listing.
                if first
                    && let Some(doc) = checkpoints
                        .find_one(doc! {"thread_id": {"$not": {"$type": "string"}}})
                        .projection(doc! {"thread_id": 1})
                        .await
                        .map_err(driver)?
                {
                    return Err(Error::invalid(format!(
                        "a LangGraph checkpoint has a thread_id that is not a string ({:?}); \
                         only string thread ids can be read",
                        doc.get("thread_id").map(Bson::element_type)
                    )));
                }
                let pipeline = [
                    doc! {"$match": {"thread_id": {"$gt": after.unwrap_or_default()}}},
                    doc! {"$group": {"_id": "$thread_id"}},
                    doc! {"$sort": {"_id": 1}},
                    doc! {"$limit": i64::try_from(want).unwrap_or(i64::MAX)},
                ];
                let docs: Vec<Document> = checkpoints
                    .aggregate(pipeline)
                    .await
                    .map_err(driver)?
                    .try_collect()
                    .await
                    .map_err(driver)?;
                docs.iter()
                    .map(|d| match d.get("_id") {
                        Some(Bson::String(s)) => Ok(s.clone()),
                        _ => Err(corrupt("a thread_id that is not a string")),
                    })
                    .collect()
            }
        })
    }
}

/// LangGraph's documents keep each checkpoint whole, values included, so no value can go
/// missing from under a checkpoint; what the scan can find is pending writes of
/// checkpoints the database does not hold.
#[async_trait]
impl IntegrityScan for LangGraphMongoSource {
    async fn scan_thread(&self, thread_id: &str) -> Result<Vec<StorageIssue>> {
        let (stored, written) = futures::try_join!(
            counts_by_checkpoint(&self.checkpoints, thread_id),
            counts_by_checkpoint(&self.writes, thread_id)
        )
        .map_err(driver)?;
        let key = |d: &Document| -> Result<(String, String, u64)> {
            let id = d.get_document("_id").map_err(|_| corrupt("a group key"))?;
            let text = |k: &str| match id.get(k) {
                Some(Bson::String(s)) => Ok(s.clone()),
                _ => Err(corrupt(
                    "a checkpoint_ns or checkpoint_id that is not a string",
                )),
            };
            let count = match d.get("count") {
                Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or_default(),
                Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or_default(),
                _ => 0,
            };
            Ok((text("n")?, text("c")?, count))
        };
        let stored: std::collections::BTreeSet<(String, String)> = stored
            .iter()
            .map(|d| key(d).map(|(n, c, _)| (n, c)))
            .collect::<Result<_>>()?;
        let mut orphans = Vec::new();
        for d in &written {
            let (n, c, count) = key(d)?;
            if !stored.contains(&(n.clone(), c.clone())) {
                orphans.push((n, c, count));
            }
        }
        orphans.sort();
        Ok(StorageIssue::collect([], orphans))
    }
}

/// How many documents of `thread_id` each checkpoint address has in `coll`
/// (`{_id: {n, c}, count}`).
async fn counts_by_checkpoint(
    coll: &Collection<Document>,
    thread_id: &str,
) -> mongodb::error::Result<Vec<Document>> {
    coll.aggregate([
        doc! {"$match": {"thread_id": thread_id}},
        doc! {"$group": {
            "_id": {"n": "$checkpoint_ns", "c": "$checkpoint_id"},
            "count": {"$sum": 1},
        }},
    ])
    .await?
    .try_collect()
    .await
}

/// Where a page continues: `(id, thread, namespace)` of the last checkpoint read.
type Cursor = (String, String, String);

/// A checkpoint's address: `(thread, namespace, id)`.
type Address = (String, String, String);

fn address(config: &CheckpointConfig) -> Address {
    (
        config.thread_id.clone(),
        config.checkpoint_ns.clone(),
        config.checkpoint_id.clone().unwrap_or_default(),
    )
}

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::Serialization {
        reason: format!("LangGraph MongoDB document: {what}"),
        source: None,
    }
}

fn text_field(d: &Document, key: &str) -> Result<String> {
    match d.get(key) {
        Some(Bson::String(s)) => Ok(s.clone()),
        Some(other) => Err(corrupt(format!(
            "{key} is a {:?}, not a string",
            other.element_type()
        ))),
        None => Err(corrupt(format!("no {key}"))),
    }
}

/// The bytes of a binary (or, from other writers, string) field; absent or `null` is empty.
fn bytes_field(d: &Document, key: &str) -> Result<Vec<u8>> {
    match d.get(key) {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        Some(Bson::String(s)) => Ok(s.clone().into_bytes()),
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(other) => Err(corrupt(format!(
            "{key} is a {:?}, not bytes",
            other.element_type()
        ))),
    }
}

/// A checkpoint document as a tuple (without its pending writes).
fn decode_checkpoint_doc(d: &Document) -> Result<CheckpointTuple> {
    let thread = text_field(d, "thread_id")?;
    let ns = text_field(d, "checkpoint_ns")?;
    let id = text_field(d, "checkpoint_id")?;
    let parent = match d.get("parent_checkpoint_id") {
        Some(Bson::String(p)) if !p.is_empty() => Some(p.clone()),
        None | Some(Bson::Null) | Some(Bson::String(_)) => None,
        Some(_) => return Err(corrupt("parent_checkpoint_id is not a string")),
    };
    let ty = text_field(d, "type")?;
    let body = bytes_field(d, "checkpoint")?;
    let checkpoint = decode_checkpoint(&id, Some(&ty), &body)?;
    if checkpoint.id != id {
        return Err(corrupt(format!(
            "checkpoint {id:?} holds a checkpoint with id {:?}",
            checkpoint.id
        )));
    }
    let metadata = match d.get("metadata") {
        None | Some(Bson::Null) => CheckpointMetadata::new(),
        Some(Bson::Document(m)) => CheckpointMetadata::from(metadata_object(
            &format!("LangGraph checkpoint {id:?}: metadata"),
            m,
        )?),
        Some(_) => {
            return Err(corrupt(format!(
                "checkpoint {id:?}: metadata is not a document"
            )));
        }
    };
    let address = |checkpoint_id: String| {
        CheckpointConfig::new(thread.clone())
            .with_ns(ns.clone())
            .with_checkpoint_id(checkpoint_id)
    };
    Ok(CheckpointTuple {
        config: address(id),
        checkpoint,
        metadata,
        parent_config: parent.map(address),
        pending_writes: Vec::new(),
    })
}

/// Metadata as LangGraph's `dumps_metadata` stores it, back as JSON: documents stay objects
/// (their keys in stored order), each `[type, bytes]` leaf is decoded with
/// [`typed_json`]; plain BSON scalars (written by other tools) are taken as they are.
fn metadata_object(what: &str, d: &Document) -> Result<serde_json::Map<String, serde_json::Value>> {
    d.iter()
        .map(|(k, v)| Ok((k.clone(), metadata_json(&format!("{what}.{k}"), v)?)))
        .collect()
}

fn metadata_json(what: &str, v: &Bson) -> Result<serde_json::Value> {
    Ok(match v {
        Bson::Document(d) => serde_json::Value::Object(metadata_object(what, d)?),
        Bson::Array(pair) => match pair.as_slice() {
            [Bson::String(ty), Bson::Binary(b)] => typed_json(what, ty, &b.bytes)?,
            [Bson::String(ty), Bson::String(s)] => typed_json(what, ty, s.as_bytes())?,
            _ => {
                return Err(corrupt(format!(
                    "{what}: an array that is not a [type, bytes] pair"
                )));
            }
        },
        Bson::Null => serde_json::Value::Null,
        Bson::Boolean(b) => serde_json::Value::Bool(*b),
        Bson::String(s) => serde_json::Value::String(s.clone()),
        Bson::Int32(i) => serde_json::Value::from(*i),
        Bson::Int64(i) => serde_json::Value::from(*i),
        Bson::Double(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| corrupt(format!("{what}: a non-finite number")))?,
        other => {
            return Err(corrupt(format!(
                "{what}: a BSON {:?} has no JSON form",
                other.element_type()
            )));
        }
    })
}

/// A pending-write document: its checkpoint's address and the write.
fn decode_write_doc(d: &Document) -> Result<(Address, PendingWrite)> {
    let at = (
        text_field(d, "thread_id")?,
        text_field(d, "checkpoint_ns")?,
        text_field(d, "checkpoint_id")?,
    );
    let idx = match d.get("idx") {
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        _ => {
            return Err(corrupt(format!(
                "a write of checkpoint {:?} has no integer idx",
                at.2
            )));
        }
    };
    let ty = match d.get("type") {
        Some(Bson::String(t)) => t.clone(),
        None | Some(Bson::Null) => "null".to_owned(),
        Some(_) => return Err(corrupt("a write's type is not a string")),
    };
    let task_path = match d.get("task_path") {
        Some(Bson::String(p)) => p.clone(),
        _ => String::new(),
    };
    let write = PendingWrite {
        task_id: text_field(d, "task_id")?,
        channel: text_field(d, "channel")?,
        value: TypedValue::new(
            ValueType::from(ty.as_str()),
            Bytes::from(bytes_field(d, "value")?),
        ),
        idx,
        task_path,
    };
    Ok((at, write))
}

/// Decodes `doc` as a LangGraph checkpoint and as a pending write (the fuzz target's entry).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_document(doc: &Document) {
    let _ = decode_checkpoint_doc(doc);
    let _ = decode_write_doc(doc);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{Binary, spec::BinarySubtype};
    use serde_json::json;

    fn bin(bytes: &[u8]) -> Bson {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: bytes.to_vec(),
        })
    }

    #[test]
    fn metadata_leaves_decode_as_json_and_python_objects_are_errors() {
        // {"source": "loop", "step": 3, "parents": {}, "tags": ["a"], "none": None}
        let stored = doc! {
            "source": [Bson::String("msgpack".into()), bin(&[0xa4, b'l', b'o', b'o', b'p'])],
            "step": [Bson::String("msgpack".into()), bin(&[0x03])],
            "parents": {},
            "tags": [Bson::String("msgpack".into()), bin(&[0x91, 0xa1, b'a'])],
            "none": [Bson::String("null".into()), bin(&[])],
        };
        let v = metadata_json("m", &Bson::Document(stored)).unwrap();
        assert_eq!(
            v,
            json!({"source": "loop", "step": 3, "parents": {}, "tags": ["a"], "none": null})
        );
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["source", "step", "parents", "tags", "none"]);

        // A datetime (MessagePack extension) has no exact JSON form: a typed error.
        let ext = doc! {"when": [Bson::String("msgpack".into()), bin(&[0xd6, 0x05, 0, 0, 0, 1])]};
        let err = metadata_json("m", &Bson::Document(ext)).unwrap_err();
        assert!(matches!(err, Error::Serialization { .. }), "{err:?}");
        assert!(err.to_string().contains("m.when"), "{err}");
        for bad in [
            doc! {"x": [1, 2]},
            doc! {"x": [Bson::String("pickle".into()), bin(&[0x80])]},
            doc! {"x": [Bson::String("msgpack".into()), bin(&[0xc1])]},
        ] {
            assert!(metadata_json("m", &Bson::Document(bad)).is_err());
        }
    }

    #[test]
    fn documents_missing_fields_are_typed_errors() {
        let good = doc! {
            "thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1",
            "parent_checkpoint_id": Bson::Null, "type": "msgpack",
            "checkpoint": bin(&[0x81, 0xa2, b'i', b'd', 0xa1, b'1']),
            "metadata": {},
        };
        let t = decode_checkpoint_doc(&good).unwrap();
        assert_eq!(t.config.checkpoint_id.as_deref(), Some("1"));
        assert!(t.parent_config.is_none());
        for key in ["thread_id", "checkpoint_id", "type", "checkpoint"] {
            let mut bad = good.clone();
            bad.remove(key);
            assert!(decode_checkpoint_doc(&bad).is_err(), "{key}");
        }
        let mut bad = good.clone();
        bad.insert("checkpoint", bin(&[0x81, 0xa2]));
        assert!(decode_checkpoint_doc(&bad).is_err());
        let write = doc! {
            "thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1", "task_id": "k",
            "task_path": "", "idx": -3, "channel": "__interrupt__", "type": "msgpack",
            "value": bin(&[0x90]),
        };
        let (at, w) = decode_write_doc(&write).unwrap();
        assert_eq!(at, ("t".into(), "".into(), "1".into()));
        assert_eq!(w.idx, -3);
        let mut bad = write.clone();
        bad.insert("idx", "zero");
        assert!(decode_write_doc(&bad).is_err());
    }
}
