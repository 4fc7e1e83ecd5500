//! Values too large for one document: split into `chunks` documents of at most
//! `MongoConfig::chunk_size` bytes, loaded back in order, and deleted with what owned them.

use std::collections::{BTreeSet, HashMap};

use checkpoint_core::{Bytes, TypedValue, ValueType};
use futures::TryStreamExt;
use mongodb::ClientSession;
use mongodb::bson::{Bson, Document, doc, oid::ObjectId};

use crate::codec;
use crate::core::Inner;
use crate::error::MongoError;

/// Loads the chunks of the given `(thread, blob)` groups, in order.
pub(crate) async fn fetch_chunks(
    inner: &Inner,
    blobs: &BTreeSet<(String, ObjectId)>,
) -> Result<HashMap<(String, ObjectId), Vec<Vec<u8>>>, MongoError> {
    let mut out: HashMap<(String, ObjectId), Vec<Vec<u8>>> = HashMap::new();
    if blobs.is_empty() {
        return Ok(out);
    }
    let threads: BTreeSet<&String> = blobs.iter().map(|(t, _)| t).collect();
    let ids: BTreeSet<ObjectId> = blobs.iter().map(|(_, b)| *b).collect();
    let mut cursor = inner
        .chunks
        .find(doc! {
            "t": { "$in": threads.into_iter().cloned().collect::<Vec<_>>() },
            "b": { "$in": ids.into_iter().collect::<Vec<_>>() },
        })
        .sort(doc! { "t": 1, "b": 1, "i": 1 })
        .projection(doc! { "t": 1, "b": 1, "d": 1 })
        .batch_size(64)
        .await?;
    while let Some(mut d) = cursor.try_next().await? {
        let t = codec::take_string(&mut d, "t", "chunk")?;
        let b = match d.get("b") {
            Some(Bson::ObjectId(b)) => *b,
            _ => return Err(MongoError::corrupt("chunk", "field b is not an ObjectId")),
        };
        if !blobs.contains(&(t.clone(), b)) {
            continue;
        }
        let data = match d.remove("d") {
            Some(Bson::Binary(bin)) => bin.bytes,
            _ => return Err(MongoError::corrupt("chunk", "field d is not binary")),
        };
        out.entry((t, b)).or_default().push(data);
    }
    Ok(out)
}

/// Reassembles a chunked value from its chunks, in order.
pub(crate) fn join_chunks(
    type_tag: ValueType,
    len: usize,
    count: u32,
    parts: &[Vec<u8>],
) -> Result<TypedValue, MongoError> {
    if parts.len() != count as usize {
        return Err(MongoError::corrupt(
            "chunked value",
            format!("{} of {count} chunks found", parts.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(len);
    for p in parts {
        bytes.extend_from_slice(p);
    }
    if bytes.len() != len {
        return Err(MongoError::corrupt(
            "chunked value",
            format!("chunks hold {} bytes, expected {len}", bytes.len()),
        ));
    }
    Ok(TypedValue::new(type_tag, Bytes::from(bytes)))
}

pub(crate) async fn referenced_blobs(
    inner: &Inner,
    thread_id: &str,
    ids: &[String],
) -> Result<BTreeSet<ObjectId>, MongoError> {
    let docs: Vec<Document> = inner
        .values
        .find(doc! { "_id": { "$in": ids.to_vec() }, "t": thread_id })
        .projection(doc! { "b": 1 })
        .await?
        .try_collect()
        .await?;
    Ok(docs
        .iter()
        .filter_map(|d| d.get_object_id("b").ok())
        .collect())
}

/// Deletes chunk groups of one thread.
pub(crate) async fn delete_chunks(
    inner: &Inner,
    thread_id: &str,
    blobs: Vec<ObjectId>,
    session: Option<&mut ClientSession>,
) -> Result<(), MongoError> {
    if blobs.is_empty() {
        return Ok(());
    }
    let filter = doc! { "t": thread_id, "b": { "$in": blobs } };
    match session {
        Some(s) => inner.chunks.delete_many(filter).session(s).await?,
        None => inner.chunks.delete_many(filter).await?,
    };
    Ok(())
}
