//! What is stored per checkpoint and per write, and decoding of script replies.

use std::collections::BTreeMap;

use checkpoint_core::Bytes;
use checkpoint_core::{
    ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata,
    CheckpointTuple, DeltaChannelHistory, Error, PendingWrite, Result, TypedValue, ValueType,
};
use redis::Value;
use serde::{Deserialize, Serialize};

use crate::error::{corrupt, protocol};
use crate::keys::{
    blob_field, esc, netstr, netstr_into, pack_list, parse_idx8, parse_tref, token, unesc_str,
    unpack_list,
};

/// The JSON part of a checkpoint record: the checkpoint without its values and channel
/// versions (the versions are in the record's blob fields already), and its metadata.
#[derive(Serialize)]
struct BodyOut<'a> {
    v: u32,
    id: &'a str,
    ts: &'a str,
    versions_seen: &'a BTreeMap<String, ChannelVersions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_channels: &'a Option<Vec<String>>,
    metadata: &'a CheckpointMetadata,
}

/// [`BodyOut`], read back.
#[derive(Deserialize)]
struct BodyIn {
    v: u32,
    id: String,
    ts: String,
    versions_seen: BTreeMap<String, ChannelVersions>,
    #[serde(default)]
    updated_channels: Option<Vec<String>>,
    metadata: CheckpointMetadata,
}

/// Decodes a blob field (`esc(ns) esc(channel) version`) into its channel and version.
pub(crate) fn parse_blob_field(f: &[u8]) -> Option<(String, ChannelVersion)> {
    let (_, rest) = unesc_str(f)?;
    let (channel, rest) = unesc_str(rest)?;
    let version = std::str::from_utf8(rest).ok()?;
    let version = match version.as_bytes().first()? {
        b'i' => ChannelVersion::Int(version[1..].parse().ok()?),
        b's' => ChannelVersion::Str(version[1..].to_owned()),
        _ => return None,
    };
    Some((channel, version))
}

/// A checkpoint record as stored in the thread's `cp` hash:
/// `netstr(pack(blob fields)) netstr(pack(tokens)) netstr(esc(parent) | "")
/// netstr(pack(field, manifest, …)) json`.
/// The prefix is what the scripts need (values to load, index entries to maintain, the
/// parent for compare-and-set) without parsing JSON. The fourth part carries the manifests
/// of the values this put chunked (see the `chunk` module), so a reader can fetch their
/// chunks in the same step as the plain values.
pub(crate) struct EncodedRecord {
    pub(crate) bytes: Vec<u8>,
    pub(crate) tokens: Vec<String>,
}

/// Index tokens of a metadata object (one per top-level key).
pub(crate) fn metadata_tokens(metadata: &CheckpointMetadata) -> Vec<String> {
    let mut tokens: Vec<String> = metadata.0.iter().map(|(k, v)| token(k, v)).collect();
    tokens.sort();
    tokens.dedup();
    tokens
}

pub(crate) fn encode_record(
    ns: &str,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    parent: Option<&str>,
    manifests: &[Vec<u8>],
) -> Result<EncodedRecord> {
    let fields: Vec<Vec<u8>> = checkpoint
        .channel_versions
        .iter()
        .map(|(c, v)| blob_field(ns, c, v))
        .collect();
    let tokens = metadata_tokens(&metadata);
    let mut bytes = Vec::with_capacity(1024);
    netstr_into(&mut bytes, &pack_list(&fields));
    netstr_into(&mut bytes, &pack_list(&tokens));
    netstr_into(&mut bytes, &parent.map(esc).unwrap_or_default());
    netstr_into(&mut bytes, &pack_list(manifests));
    let body = BodyOut {
        v: checkpoint.v,
        id: &checkpoint.id,
        ts: &checkpoint.ts,
        versions_seen: &checkpoint.versions_seen,
        updated_channels: &checkpoint.updated_channels,
        metadata: &metadata,
    };
    serde_json::to_writer(&mut bytes, &body)
        .map_err(|e| Error::serialization("encoding a checkpoint record", e))?;
    Ok(EncodedRecord { bytes, tokens })
}

/// The `(blob field, manifest)` pairs a record carries for the values its put chunked.
pub(crate) fn record_manifests(rec: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let (_, rest) = netstr(rec)?;
    let (_, rest) = netstr(rest)?;
    let (_, rest) = netstr(rest)?;
    let (packed, _) = netstr(rest)?;
    let flat = unpack_list(packed)?;
    if flat.len() % 2 != 0 {
        return None;
    }
    let mut it = flat.into_iter();
    let mut out = Vec::new();
    while let (Some(f), Some(m)) = (it.next(), it.next()) {
        out.push((f, m));
    }
    Some(out)
}

/// The tokens stored in a record's prefix.
pub(crate) fn record_tokens(rec: &[u8]) -> Option<Vec<String>> {
    let (_, rest) = netstr(rec)?;
    let (tokens, _) = netstr(rest)?;
    unpack_list(tokens)?
        .into_iter()
        .map(|t| String::from_utf8(t).ok())
        .collect()
}

/// A stored channel value: `V netstr(tag) bytes`, or `X` for a removed channel.
pub(crate) fn encode_blob(value: Option<&TypedValue>) -> Vec<u8> {
    match value {
        None => b"X".to_vec(),
        Some(v) => {
            let mut out = Vec::with_capacity(v.bytes.len() + 16);
            out.push(b'V');
            encode_typed_into(&mut out, v);
            out
        }
    }
}

/// `netstr(tag) bytes`.
pub(crate) fn encode_typed(v: &TypedValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.bytes.len() + 16);
    encode_typed_into(&mut out, v);
    out
}

/// Appends [`encode_typed`] of `v` to `out` (values are copied once, into the argument
/// that is sent).
fn encode_typed_into(out: &mut Vec<u8>, v: &TypedValue) {
    netstr_into(out, v.type_tag.as_str().as_bytes());
    out.extend_from_slice(&v.bytes);
}

pub(crate) fn decode_typed(b: &[u8]) -> Option<TypedValue> {
    let (tag, bytes) = netstr(b)?;
    let tag = std::str::from_utf8(tag).ok()?;
    Some(TypedValue::new(ValueType::from(tag), bytes.to_vec()))
}

/// [`decode_typed`] of the part of `b` from `from` on, without copying the payload (the
/// value shares `b`'s buffer).
fn decode_typed_shared(b: Bytes, from: usize) -> Option<TypedValue> {
    let (tag, rest) = netstr(b.get(from..)?)?;
    let tag = ValueType::from(std::str::from_utf8(tag).ok()?);
    let start = b.len() - rest.len();
    Some(TypedValue::new(tag, b.slice(start..)))
}

/// Takes the bytes of a bulk reply without copying them.
fn owned_bulk(v: Value) -> Option<Bytes> {
    match v {
        Value::BulkString(b) => Some(Bytes::from(b)),
        Value::SimpleString(s) => Some(Bytes::from(s.into_bytes())),
        _ => None,
    }
}

/// A pending write from its index member (the part after the checkpoint reference:
/// `esc(task_path) esc(task_id) idx8`) and its stored form (see [`encode_write`]).
fn decode_write(member: &[u8], w: Bytes) -> Option<PendingWrite> {
    let (task_path, rest) = unesc_str(member)?;
    let (task_id, rest) = unesc_str(rest)?;
    let idx = parse_idx8(rest)?;
    let (_, rest) = netstr(&w)?;
    let (channel, rest) = netstr(rest)?;
    let channel = String::from_utf8(channel.to_vec()).ok()?;
    let from = w.len() - rest.len();
    let value = decode_typed_shared(w, from)?;
    Some(PendingWrite {
        task_id,
        channel,
        value,
        idx,
        task_path,
    })
}

/// Decodes a `delta.lua` reply for the channels it was asked about (in that order) into
/// `out`: each channel's seed, and its writes oldest checkpoint first.
pub(crate) fn decode_delta(
    v: Value,
    channels: &[&str],
    out: &mut BTreeMap<String, DeltaChannelHistory>,
) -> Result<()> {
    let bad = || corrupt("a corrupt record or write in a delta history");
    let mut items = array(v)?.into_iter();
    let mut writes: Vec<(u64, PendingWrite)> = Vec::new();
    while let Some(kind) = items.next() {
        match text(&kind)? {
            "w" => {
                let (Some(depth), Some(member), Some(value)) =
                    (items.next(), items.next(), items.next())
                else {
                    return Err(protocol("a delta write entry has 3 parts"));
                };
                let member = bulk(&member).ok_or_else(|| protocol("write member"))?;
                // The member starts with the checkpoint's reference: esc(id) esc(ns).
                let (_, rest) = unesc_str(member).ok_or_else(bad)?;
                let (_, rest) = unesc_str(rest).ok_or_else(bad)?;
                let value = owned_bulk(value).ok_or_else(|| protocol("write value"))?;
                writes.push((number(&depth)?, decode_write(rest, value).ok_or_else(bad)?));
            }
            "s" => {
                let (Some(k), Some(value)) = (items.next(), items.next()) else {
                    return Err(protocol("a delta seed entry has 2 parts"));
                };
                let k = usize::try_from(number(&k)?).unwrap_or(usize::MAX);
                let channel = k
                    .checked_sub(1)
                    .and_then(|i| channels.get(i))
                    .ok_or_else(|| protocol("a seed of a channel not asked for"))?;
                let value = owned_bulk(value).ok_or_else(|| protocol("seed value"))?;
                if value.first() != Some(&b'V') {
                    return Err(bad());
                }
                let seed = decode_typed_shared(value, 1).ok_or_else(bad)?;
                if let Some(h) = out.get_mut(*channel) {
                    h.seed = Some(seed);
                }
            }
            other => return Err(protocol(format!("unknown delta entry {other:?}"))),
        }
    }
    // Newest checkpoint first in the reply, each checkpoint's writes in index order: a
    // stable sort by depth, deepest first, keeps that order within a checkpoint.
    writes.sort_by(|(a, _), (b, _)| b.cmp(a));
    for (_, w) in writes {
        if let Some(h) = out.get_mut(&w.channel) {
            h.writes.push(w);
        }
    }
    Ok(())
}

/// A pending write as `put_writes` stores it: `netstr(esc(task_path)) netstr(channel)
/// netstr(tag) bytes`, `path` being `esc(task_path)`.
pub(crate) fn encode_write(path: &[u8], channel: &str, value: &TypedValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.bytes.len() + path.len() + channel.len() + 32);
    netstr_into(&mut out, path);
    netstr_into(&mut out, channel.as_bytes());
    encode_typed_into(&mut out, value);
    out
}

pub(crate) fn bulk(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(crate) fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(protocol(format!("expected an array, got {other:?}"))),
    }
}

pub(crate) fn text(v: &Value) -> Result<&str> {
    bulk(v)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or_else(|| protocol(format!("expected a string, got {v:?}")))
}

pub(crate) fn number(v: &Value) -> Result<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).map_err(|_| protocol(format!("negative number {n}"))),
        other => text(other)?
            .parse()
            .map_err(|_| protocol(format!("expected a number, got {other:?}"))),
    }
}

/// Decodes a `load_tuple` reply `{tref, record, values, write members, write values}` of
/// thread `thread_id`.
pub(crate) fn decode_tuple(thread_id: &str, v: Value) -> Result<CheckpointTuple> {
    let mut parts = array(v)?.into_iter();
    let (Some(tref), Some(rec), Some(vals), Some(members), Some(wvals)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(protocol("a tuple reply has 5 parts"));
    };
    let tref = bulk(&tref)
        .ok_or_else(|| protocol("tuple reference"))?
        .to_vec();
    let (id, ns) = parse_tref(&tref).ok_or_else(|| corrupt("undecodable checkpoint reference"))?;
    let rec = bulk(&rec).ok_or_else(|| protocol("tuple record"))?;
    let bad = || corrupt(format!("corrupt record of checkpoint {id:?}"));
    let (fields, rest) = netstr(rec).ok_or_else(bad)?;
    let (_, rest) = netstr(rest).ok_or_else(bad)?;
    let (parent, rest) = netstr(rest).ok_or_else(bad)?;
    let (_, json) = netstr(rest).ok_or_else(bad)?;
    let parent = if parent.is_empty() {
        None
    } else {
        Some(unesc_str(parent).ok_or_else(bad)?.0)
    };
    let body: BodyIn = serde_json::from_slice(json)
        .map_err(|e| Error::serialization(format!("record of checkpoint {id:?}"), e))?;
    let mut channels = Vec::new();
    let mut channel_versions = ChannelVersions::new();
    let mut input = fields;
    while !input.is_empty() {
        let (f, rest) = netstr(input).ok_or_else(bad)?;
        let (channel, version) = parse_blob_field(f).ok_or_else(bad)?;
        channels.push(channel.clone());
        channel_versions.insert(channel, version);
        input = rest;
    }
    let mut checkpoint = Checkpoint {
        v: body.v,
        id: body.id,
        ts: body.ts,
        channel_values: BTreeMap::new(),
        channel_versions,
        versions_seen: body.versions_seen,
        updated_channels: body.updated_channels,
    };
    let vals = array(vals)?;
    if vals.len() != channels.len() && !vals.is_empty() {
        return Err(protocol("value count differs from channel count"));
    }
    for (channel, val) in channels.into_iter().zip(vals) {
        let Some(b) = owned_bulk(val) else { continue };
        match b.first() {
            Some(b'X') if b.len() == 1 => {}
            Some(b'V') => {
                let value = decode_typed_shared(b, 1).ok_or_else(bad)?;
                checkpoint.channel_values.insert(channel, value);
            }
            _ => return Err(bad()),
        }
    }
    let members = array(members)?;
    let wvals = array(wvals)?;
    let mut pending_writes = Vec::with_capacity(members.len());
    for (m, w) in members.iter().zip(wvals) {
        let (Some(m), Some(w)) = (bulk(m), owned_bulk(w)) else {
            continue;
        };
        let rest = m.strip_prefix(tref.as_slice()).ok_or_else(bad)?;
        pending_writes.push(decode_write(rest, w).ok_or_else(bad)?);
    }
    let address = |id: &str| {
        CheckpointConfig::new(thread_id)
            .with_ns(ns.clone())
            .with_checkpoint_id(id)
    };
    Ok(CheckpointTuple {
        config: address(&id),
        parent_config: parent.as_deref().map(address),
        checkpoint,
        metadata: body.metadata,
        pending_writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkpoint_core::Source;

    #[test]
    fn record_prefix_carries_tokens() {
        let mut c = Checkpoint::new();
        c.channel_versions
            .insert("a".into(), checkpoint_core::ChannelVersion::Int(1));
        let m = CheckpointMetadata::for_step(Source::Loop, 5);
        let r = encode_record("", c, m.clone(), Some("p"), &[]).unwrap();
        assert_eq!(record_tokens(&r.bytes).unwrap(), metadata_tokens(&m));
        assert_eq!(r.tokens.len(), 3);
    }

    #[test]
    fn typed_values_roundtrip() {
        for v in [
            TypedValue::null(),
            TypedValue::from_bytes(vec![0, 255, b':']),
            TypedValue::new(ValueType::from("pi:ckle"), b"x".to_vec()),
        ] {
            assert_eq!(decode_typed(&encode_typed(&v)).unwrap(), v);
        }
    }
}
