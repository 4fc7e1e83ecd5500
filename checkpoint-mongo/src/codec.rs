//! The stored documents: building them from the core types and reading them back.
//!
//! Field names are short because they repeat in every document (see the crate README for
//! the full layout). Every identifier is stored as a plain string value and every JSON
//! structure (checkpoint, metadata) as an opaque JSON string, so no caller data ever becomes
//! a field name, an operator or a field path.

use std::time::{Duration, SystemTime};

use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, DateTime, Document, doc, oid::ObjectId};

use checkpoint_core::{Checkpoint, CheckpointMetadata, Error, Result, TypedValue, ValueType};

use crate::error::MongoError;
use crate::keys;

/// Largest checkpoint document (without values) or metadata accepted.
pub(crate) const MAX_CHECKPOINT_BYTES: usize = 8 * 1024 * 1024;
/// Inline bytes one pending-writes document may hold; larger values go to chunks.
pub(crate) const MAX_INLINE_WRITES_BYTES: usize = 4 * 1024 * 1024;
/// Largest ledger outcome accepted.
pub(crate) const MAX_OUTCOME_BYTES: usize = 8 * 1024 * 1024;
/// How long a stored value outlives the last checkpoint that named it when a TTL is set, so
/// that the TTL monitor (which runs every 60 s and deletes in no particular order) never
/// removes a value before the checkpoints that load it.
pub(crate) const VALUE_TTL_GRACE: Duration = Duration::from_secs(15 * 60);

/// The field of a chunk that names what owns it: a channel value's document (`_id`) or a
/// pending-writes document (its address `a`), whose expiry a put refreshes with theirs.
pub(crate) const CHUNK_OWNER: &str = "o";

/// `now + ttl` as a BSON date, for the TTL index field `x`.
pub(crate) fn expiry(ttl: Duration) -> DateTime {
    DateTime::from_system_time(SystemTime::now() + ttl)
}

fn binary(bytes: &[u8]) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: bytes.to_vec(),
    })
}

/// A value as stored: inline bytes, or a reference to chunks.
#[derive(Clone, Debug)]
pub(crate) enum Stored {
    /// The channel was removed at this version (values only).
    Removed,
    /// The bytes are in the document.
    Inline(TypedValue),
    /// The bytes are in `chunks` documents `(t, b, 0..n)`.
    Chunked {
        /// The type tag.
        type_tag: ValueType,
        /// Total length.
        len: usize,
        /// Chunk group id.
        blob: ObjectId,
        /// Number of chunks.
        count: u32,
    },
}

/// Chunk documents still to be written for a value stored as [`Stored::Chunked`].
#[derive(Clone, Debug)]
pub(crate) struct PendingChunks {
    /// The chunk group id.
    pub(crate) blob: ObjectId,
    /// The documents.
    pub(crate) docs: Vec<Document>,
}

/// Writes `value` into `doc` (`ty` plus `d`, or `ty`, `len`, `b`, `nc`), splitting it into
/// chunks owned by `thread_id` when it is larger than `chunk_size` or when `inline` is false.
/// The chunks name `owner` (field `o`: the value document's `_id`, or the pending-writes
/// document's address), so a put that refreshes the owner's expiry refreshes theirs.
pub(crate) fn put_value(
    doc: &mut Document,
    value: &TypedValue,
    thread_id: &str,
    owner: Option<&str>,
    chunk_size: usize,
    inline: bool,
    x: Option<DateTime>,
) -> Option<PendingChunks> {
    doc.insert("ty", value.type_tag.as_str());
    if inline && value.len() <= chunk_size {
        doc.insert("d", binary(&value.bytes));
        return None;
    }
    let blob = ObjectId::new();
    let mut docs = Vec::new();
    for (i, part) in value.bytes.chunks(chunk_size).enumerate() {
        let mut c = doc! { "t": thread_id, "b": blob, "i": i as i32, "d": binary(part) };
        if let Some(owner) = owner {
            c.insert(CHUNK_OWNER, owner);
        }
        if let Some(x) = x {
            c.insert("x", x);
        }
        docs.push(c);
    }
    doc.insert("len", value.len() as i64);
    doc.insert("b", blob);
    doc.insert("nc", docs.len() as i32);
    Some(PendingChunks { blob, docs })
}

/// Reads the value fields written by [`put_value`] (`ty` absent: removed).
pub(crate) fn get_value(doc: &mut Document, what: &'static str) -> Result<Stored, MongoError> {
    let type_tag = match doc.remove("ty") {
        None => return Ok(Stored::Removed),
        Some(Bson::String(s)) => ValueType::from(s.as_str()),
        Some(other) => {
            return Err(MongoError::corrupt(
                what,
                format!("field ty is {other:?}, not a string"),
            ));
        }
    };
    match doc.remove("d") {
        Some(Bson::Binary(b)) => return Ok(Stored::Inline(TypedValue::new(type_tag, b.bytes))),
        Some(other) => {
            return Err(MongoError::corrupt(
                what,
                format!("field d is {other:?}, not binary"),
            ));
        }
        None => {}
    }
    let len = number(doc, "len", what)?;
    let count = number(doc, "nc", what)?;
    let blob = match doc.get("b") {
        Some(Bson::ObjectId(b)) => *b,
        _ => return Err(MongoError::corrupt(what, "neither d nor b is present")),
    };
    Ok(Stored::Chunked {
        type_tag,
        len: usize::try_from(len).map_err(|_| MongoError::corrupt(what, "negative len"))?,
        blob,
        count: u32::try_from(count).map_err(|_| MongoError::corrupt(what, "bad nc"))?,
    })
}

/// An integer field (int32 or int64).
pub(crate) fn number(doc: &Document, field: &str, what: &'static str) -> Result<i64, MongoError> {
    match doc.get(field) {
        Some(Bson::Int32(n)) => Ok(i64::from(*n)),
        Some(Bson::Int64(n)) => Ok(*n),
        Some(Bson::Double(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        other => Err(MongoError::corrupt(
            what,
            format!("field {field} is {other:?}, not an integer"),
        )),
    }
}

/// A string field, taken out of the document.
pub(crate) fn take_string(
    doc: &mut Document,
    field: &str,
    what: &'static str,
) -> Result<String, MongoError> {
    match doc.remove(field) {
        Some(Bson::String(s)) => Ok(s),
        other => Err(MongoError::corrupt(
            what,
            format!("field {field} is {other:?}, not a string"),
        )),
    }
}

/// Everything the checkpoint document holds, decoded.
#[derive(Debug)]
pub(crate) struct CheckpointRow {
    pub(crate) thread_id: String,
    pub(crate) ns: String,
    pub(crate) id: String,
    pub(crate) parent: Option<String>,
    /// The sort key (`s`).
    pub(crate) sort: String,
    /// The checkpoint without values.
    pub(crate) checkpoint: Checkpoint,
    pub(crate) metadata: CheckpointMetadata,
}

impl CheckpointRow {
    /// `_id` of this checkpoint, which is also the `a` (address) of its pending writes.
    pub(crate) fn address(&self) -> String {
        keys::doc_id(&[&self.thread_id, &self.ns, &self.id])
    }
}

/// The checkpoint document:
/// `{_id, t, n, c, s, p?, cp (checkpoint JSON without values), md (metadata JSON), mk, x?}`.
pub(crate) fn checkpoint_doc(
    thread_id: &str,
    ns: &str,
    parent: Option<&str>,
    checkpoint: &Checkpoint,
    metadata: &CheckpointMetadata,
    x: Option<DateTime>,
) -> Result<Document> {
    // The id is the `c` field and values live in their own documents: the JSON holds the
    // rest (`v`, `ts`, `channel_versions`, `versions_seen`, `updated_channels`).
    let mut json = serde_json::to_value(checkpoint)
        .map_err(|e| Error::serialization("checkpoint does not encode as JSON", e))?;
    if let Some(fields) = json.as_object_mut() {
        fields.remove("id");
        fields.remove("channel_values");
    }
    let cp = serde_json::to_string(&json)
        .map_err(|e| Error::serialization("checkpoint does not encode as JSON", e))?;
    let md = serde_json::to_string(metadata)
        .map_err(|e| Error::serialization("metadata does not encode as JSON", e))?;
    if cp.len() + md.len() > MAX_CHECKPOINT_BYTES {
        return Err(Error::invalid(format!(
            "checkpoint and metadata encode to {} bytes; the MongoDB saver stores at most {MAX_CHECKPOINT_BYTES} (channel values are not counted)",
            cp.len() + md.len()
        )));
    }
    let id = checkpoint.id.as_str();
    let mut doc = doc! {
        "_id": keys::doc_id(&[thread_id, ns, id]),
        "t": thread_id,
        "n": ns,
        "c": id,
        "s": keys::sort_key(id, thread_id, ns),
    };
    if let Some(p) = parent {
        doc.insert("p", p);
    }
    doc.insert("cp", cp);
    doc.insert("md", md);
    doc.insert(
        "mk",
        keys::filter_entries(metadata)
            .into_iter()
            .map(Bson::String)
            .collect::<Vec<_>>(),
    );
    if let Some(x) = x {
        doc.insert("x", x);
    }
    Ok(doc)
}

/// Decodes a checkpoint document (`mk` and `x` may be projected away).
pub(crate) fn checkpoint_row(mut doc: Document) -> Result<CheckpointRow, MongoError> {
    const WHAT: &str = "checkpoint document";
    let thread_id = take_string(&mut doc, "t", WHAT)?;
    let ns = take_string(&mut doc, "n", WHAT)?;
    let id = take_string(&mut doc, "c", WHAT)?;
    let sort = take_string(&mut doc, "s", WHAT)?;
    let parent = match doc.remove("p") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(p)) => Some(p),
        Some(other) => {
            return Err(MongoError::corrupt(
                WHAT,
                format!("field p is {other:?}, not a string"),
            ));
        }
    };
    let cp = take_string(&mut doc, "cp", WHAT)?;
    let md = take_string(&mut doc, "md", WHAT)?;
    let mut json: serde_json::Value =
        serde_json::from_str(&cp).map_err(|source| MongoError::Json {
            what: "checkpoint JSON",
            source,
        })?;
    if let Some(fields) = json.as_object_mut() {
        fields.insert("id".to_owned(), serde_json::Value::String(id.clone()));
        fields.insert(
            "channel_values".to_owned(),
            serde_json::Value::Object(serde_json::Map::new()),
        );
    }
    let checkpoint: Checkpoint =
        serde_json::from_value(json).map_err(|source| MongoError::Json {
            what: "checkpoint JSON",
            source,
        })?;
    let metadata: CheckpointMetadata =
        serde_json::from_str(&md).map_err(|source| MongoError::Json {
            what: "metadata JSON",
            source,
        })?;
    Ok(CheckpointRow {
        thread_id,
        ns,
        id,
        parent,
        sort,
        checkpoint,
        metadata,
    })
}

/// One pending write inside a writes document:
/// `{i: idx, ch: channel, p: task_path, ty, d | len, b, nc}`.
#[derive(Clone, Debug)]
pub(crate) struct WriteEntry {
    pub(crate) idx: i64,
    pub(crate) channel: String,
    pub(crate) task_path: String,
    pub(crate) value: Stored,
}

impl WriteEntry {
    /// The chunk group this entry's value lives in, if chunked.
    pub(crate) fn blob(&self) -> Option<ObjectId> {
        match self.value {
            Stored::Chunked { blob, .. } => Some(blob),
            _ => None,
        }
    }

    /// Bytes the entry keeps inline.
    pub(crate) fn inline_len(&self) -> usize {
        match &self.value {
            Stored::Inline(v) => v.len(),
            _ => 0,
        }
    }

    pub(crate) fn to_doc(&self) -> Document {
        let mut d = doc! { "i": self.idx, "ch": &self.channel, "p": &self.task_path };
        match &self.value {
            Stored::Removed => {}
            Stored::Inline(v) => {
                d.insert("ty", v.type_tag.as_str());
                d.insert("d", binary(&v.bytes));
            }
            Stored::Chunked {
                type_tag,
                len,
                blob,
                count,
            } => {
                d.insert("ty", type_tag.as_str());
                d.insert("len", *len as i64);
                d.insert("b", *blob);
                d.insert("nc", *count as i32);
            }
        }
        d
    }

    pub(crate) fn from_doc(mut d: Document) -> Result<Self, MongoError> {
        const WHAT: &str = "pending write";
        let idx = number(&d, "i", WHAT)?;
        let channel = take_string(&mut d, "ch", WHAT)?;
        let task_path = take_string(&mut d, "p", WHAT)?;
        let value = get_value(&mut d, WHAT)?;
        if matches!(value, Stored::Removed) {
            return Err(MongoError::corrupt(WHAT, "no value"));
        }
        Ok(Self {
            idx,
            channel,
            task_path,
            value,
        })
    }
}

/// A writes document decoded: the task id and its entries.
#[derive(Clone, Debug)]
pub(crate) struct WritesRow {
    pub(crate) task_id: String,
    pub(crate) revision: i64,
    pub(crate) entries: Vec<WriteEntry>,
}

/// Decodes a writes document `{t, n, c, k, a, r, w: [...]}` (only `k`, `r` and `w` are read).
pub(crate) fn writes_row(mut doc: Document) -> Result<WritesRow, MongoError> {
    const WHAT: &str = "pending writes document";
    let task_id = take_string(&mut doc, "k", WHAT)?;
    let revision = number(&doc, "r", WHAT)?;
    let entries = match doc.remove("w") {
        Some(Bson::Array(items)) => items
            .into_iter()
            .map(|b| match b {
                Bson::Document(d) => WriteEntry::from_doc(d),
                other => Err(MongoError::corrupt(
                    WHAT,
                    format!("entry {other:?} is not a document"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        other => {
            return Err(MongoError::corrupt(
                WHAT,
                format!("field w is {other:?}, not an array"),
            ));
        }
    };
    Ok(WritesRow {
        task_id,
        revision,
        entries,
    })
}

/// Inline bytes a pending-writes document may reach after merging several calls.
pub(crate) const MAX_MERGED_WRITES_BYTES: usize = 12 * 1024 * 1024;

/// A `put_writes` call, prepared.
pub(crate) struct PreparedWrites {
    pub(crate) thread_id: String,
    pub(crate) ns: String,
    pub(crate) checkpoint_id: String,
    pub(crate) task_id: String,
    pub(crate) fence: Option<u64>,
    /// Special-channel-only call: replaces existing entries.
    pub(crate) replace: bool,
    pub(crate) entries: Vec<WriteEntry>,
    pub(crate) chunks: Vec<PendingChunks>,
    pub(crate) x: Option<DateTime>,
}

impl PreparedWrites {
    /// The filter of this task's document (its unique key).
    pub(crate) fn key(&self) -> Document {
        doc! {
            "t": self.thread_id.as_str(),
            "n": self.ns.as_str(),
            "c": self.checkpoint_id.as_str(),
            "k": self.task_id.as_str(),
        }
    }

    pub(crate) fn doc(&self, revision: i64, entries: &[WriteEntry]) -> Document {
        let mut d = doc! {
            "t": self.thread_id.as_str(),
            "n": self.ns.as_str(),
            "c": self.checkpoint_id.as_str(),
            "k": self.task_id.as_str(),
            "a": keys::doc_id(&[&self.thread_id, &self.ns, &self.checkpoint_id]),
            "r": revision,
            "w": entries.iter().map(|e| Bson::Document(e.to_doc())).collect::<Vec<_>>(),
        };
        if let Some(x) = self.x {
            d.insert("x", x);
        }
        d
    }

    /// Merges this call into existing entries by the contract's rule. Returns the merged
    /// entries (or `None` when nothing changes) and the chunk groups no longer referenced.
    pub(crate) fn merge(
        &self,
        existing: &[WriteEntry],
    ) -> Result<(Option<Vec<WriteEntry>>, Vec<ObjectId>), MongoError> {
        let mut merged: Vec<WriteEntry> = existing.to_vec();
        let mut dropped = Vec::new();
        let mut changed = false;
        for e in &self.entries {
            match merged.iter().position(|m| m.idx == e.idx) {
                Some(i) if self.replace => {
                    dropped.extend(merged[i].blob());
                    merged[i] = e.clone();
                    changed = true;
                }
                Some(_) => dropped.extend(e.blob()),
                None => {
                    merged.push(e.clone());
                    changed = true;
                }
            }
        }
        if !changed {
            return Ok((None, dropped));
        }
        let inline: usize = merged.iter().map(WriteEntry::inline_len).sum();
        if inline > MAX_MERGED_WRITES_BYTES {
            return Err(Error::invalid(format!(
                "the pending writes of task {:?} on checkpoint {:?} would hold {inline} bytes inline; at most {MAX_MERGED_WRITES_BYTES} are stored per task and checkpoint",
                self.task_id, self.checkpoint_id
            ))
            .into());
        }
        Ok((Some(merged), dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::{ChannelVersion, Source};
    use serde_json::json;

    #[test]
    fn checkpoint_documents_round_trip() {
        let mut c = Checkpoint::new();
        c.set("messages", &vec!["hi"]).unwrap();
        c.channel_versions
            .insert("$where".into(), ChannelVersion::Int(u64::MAX));
        let meta = CheckpointMetadata::for_step(Source::Loop, 3).with("a.b", json!({"$gt": 1}));
        let doc = checkpoint_doc("t\0", "ns", Some("p"), &c, &meta, None).unwrap();
        assert_eq!(doc.get_str("t").unwrap(), "t\0");
        let row = checkpoint_row(doc).unwrap();
        let mut expected = c.clone();
        expected.channel_values.clear();
        assert_eq!(row.checkpoint, expected);
        assert_eq!(row.metadata, meta);
        assert_eq!(row.parent.as_deref(), Some("p"));
        assert_eq!(row.address(), keys::doc_id(&["t\0", "ns", &c.id]));
    }

    #[test]
    fn malformed_documents_are_typed_errors() {
        for doc in [
            doc! {},
            doc! {"t": 1, "n": "", "c": "x", "s": "", "cp": "{}", "md": "{}"},
            doc! {"t": "t", "n": "", "c": "x", "s": "", "cp": "not json", "md": "{}"},
            doc! {"t": "t", "n": "", "c": "x", "s": "", "cp": "{}", "md": "{}", "p": 5},
        ] {
            assert!(checkpoint_row(doc).is_err());
        }
        assert!(writes_row(doc! {"k": "t", "r": 1, "w": [1]}).is_err());
        assert!(WriteEntry::from_doc(doc! {"i": 0, "ch": "c", "p": ""}).is_err());
    }

    #[test]
    fn large_values_are_chunked_and_rejoined() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let v = TypedValue::new(ValueType::Bytes, bytes.clone());
        let mut d = Document::new();
        let chunks = put_value(&mut d, &v, "t", None, 4096, true, None).expect("chunked");
        assert_eq!(chunks.docs.len(), 3);
        let parts: Vec<Vec<u8>> = chunks
            .docs
            .iter()
            .map(|c| c.get_binary_generic("d").unwrap().clone())
            .collect();
        match get_value(&mut d, "value").unwrap() {
            Stored::Chunked {
                type_tag,
                len,
                count,
                blob,
            } => {
                assert_eq!(blob, chunks.blob);
                assert_eq!(
                    crate::chunk::join_chunks(type_tag, len, count, &parts).unwrap(),
                    v
                );
                assert!(
                    crate::chunk::join_chunks(ValueType::Bytes, len, count, &parts[..2]).is_err()
                );
            }
            other => panic!("{other:?}"),
        }
        let mut d = Document::new();
        assert!(put_value(&mut d, &TypedValue::null(), "t", None, 4096, true, None).is_none());
        assert!(
            matches!(get_value(&mut d, "v").unwrap(), Stored::Inline(x) if x == TypedValue::null())
        );
    }

    #[test]
    fn identifiers_over_the_limit_are_invalid_input() {
        let ids = crate::keys::IDENTIFIERS;
        assert!(ids.check("thread_id", &"x".repeat(64 * 1024)).is_ok());
        assert!(matches!(
            ids.check(
                "thread_id",
                &"x".repeat(crate::keys::MAX_IDENTIFIER_BYTES + 1)
            ),
            Err(Error::InvalidInput { .. })
        ));
    }
}
