//! Content-addressed storage of list-valued channels.
//!
//! A channel like LangGraph's `messages` grows by a few elements per step; storing each
//! version whole re-stores the whole conversation every step (≈ 5.5 of the 12 MB the
//! standard workload writes). A MessagePack array large enough to matter is therefore stored
//! as a **manifest** (its array header and the ids of its element chunks) plus the **chunks**
//! (runs of whole elements), each under a content id in the thread's value hash. A version
//! that appends elements re-stores only the chunk holding the new tail; the earlier chunks are
//! shared by every version (and by copies of the thread).
//!
//! Layout inside the thread's value hash `BL` (fields that [`esc`](crate::keys::esc) output
//! can never start with `\1\3` or `\1\4`, so neither collides with a plain value's field):
//!
//! * plain value: field `blob_field`, value `V netstr(tag) bytes` (or `X`);
//! * chunked value: field `\1\4 blob_field`, value `C netstr(tag) netstr(header) id…`, the
//!   ids 16 bytes each; no plain field;
//! * chunk: field `\1\3 id`, value the chunk's bytes; `id` is the first 16 bytes of the
//!   chunk's BLAKE3 hash ([`digest128`](checkpoint_core::backend::digest128)), so equal chunks are stored once and a chunk cannot be forged.
//!
//! Whether a value is chunked depends only on its bytes, so the same version is always
//! stored the same way. Reassembly is exact: `header ++ chunk…` is the original value.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use checkpoint_core::backend::digest128;
use checkpoint_core::{Bytes, TypedValue, ValueType, msgpack};

use crate::keys::netstr_into;

/// Values smaller than this are stored whole (a manifest would save nothing).
pub(crate) const MIN_CHUNKED_BYTES: usize = 1024;
/// A chunk closes at the first element boundary at or past this many bytes, so small
/// elements are grouped and large ones stand alone.
pub(crate) const CHUNK_TARGET_BYTES: usize = 512;
/// Length of a chunk id.
pub(crate) const ID_LEN: usize = 16;
/// Field prefix of chunks.
pub(crate) const CHUNK_PREFIX: &[u8] = b"\x01\x03";
/// Field prefix of manifests (followed by the value's plain field).
pub(crate) const MANIFEST_PREFIX: &[u8] = b"\x01\x04";

/// A value split for storage: its manifest and its chunks as `(field, bytes)` pairs (the
/// bytes are slices of the value's own buffer, not copies).
pub(crate) struct Split {
    pub(crate) manifest: Vec<u8>,
    pub(crate) chunks: Vec<(Vec<u8>, Bytes)>,
}

/// The manifest field of a value stored under `field`.
pub(crate) fn manifest_field(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MANIFEST_PREFIX.len() + field.len());
    out.extend_from_slice(MANIFEST_PREFIX);
    out.extend_from_slice(field);
    out
}

/// The field of the chunk with id `id`.
pub(crate) fn chunk_field(id: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK_PREFIX.len() + id.len());
    out.extend_from_slice(CHUNK_PREFIX);
    out.extend_from_slice(id);
    out
}

/// Splits `value` when it is a MessagePack array of at least two elements and
/// [`MIN_CHUNKED_BYTES`]; `None` means store it whole.
#[cfg(test)]
pub(crate) fn split(value: &TypedValue) -> Option<Split> {
    split_with(value, None).map(|(split, _)| split)
}

/// [`split`], reusing what `previous` (the last value split for the same channel of the same
/// thread, see [`ChunkMemo`]) already worked out. When its elements are a prefix of this
/// value's (a list that grew by appending, the usual case), its chunks but the last are
/// this value's chunks too: the same elements close them by the same size rule. Only the
/// elements after those are walked. A chunk whose bytes equal the chunk at the same
/// position in `previous` takes its id; only the others are hashed. Also returns what to
/// remember of `value`.
fn split_with(value: &TypedValue, previous: Option<&Memo>) -> Option<(Split, Memo)> {
    if value.type_tag != ValueType::Msgpack || value.bytes.len() < MIN_CHUNKED_BYTES {
        return None;
    }
    let bytes = &value.bytes[..];
    // A malformed header (a count beyond the input, say) is stored whole, as is.
    let (count, header) = msgpack::array_header(bytes).ok()??;
    if count < 2 {
        return None;
    }
    let mut manifest = b"C".to_vec();
    netstr_into(&mut manifest, value.type_tag.as_str().as_bytes());
    netstr_into(&mut manifest, &bytes[..header]);
    let mut chunks = Vec::new();
    let mut ranges: Vec<ChunkRange> = Vec::new();
    let mut start = header;
    let mut walked = 0;
    if let Some((p, (_, reusable))) = previous.and_then(|p| Some((p, p.chunks.split_last()?))) {
        let body = &p.value[p.header..];
        if bytes.get(header..header + body.len()) == Some(body) {
            for r in reusable {
                let end = r.end - p.header + header;
                manifest.extend_from_slice(&r.id);
                chunks.push((chunk_field(&r.id), value.bytes.slice(start..end)));
                ranges.push(ChunkRange { end, ..*r });
                walked += r.elements;
                start = end;
            }
        }
    }
    if walked > count {
        return None;
    }
    let mut pos = start;
    let mut elements = 0;
    for i in walked..count {
        pos = msgpack::value_end(bytes, pos).ok()?;
        elements += 1;
        if pos - start < CHUNK_TARGET_BYTES && i + 1 < count {
            continue;
        }
        let chunk = &bytes[start..pos];
        let known = previous.and_then(|p| {
            let r = p.chunks.get(ranges.len())?;
            (p.value.get(r.end - r.len..r.end) == Some(chunk)).then_some(r.id)
        });
        let id = known.unwrap_or_else(|| digest128(chunk).to_be_bytes());
        manifest.extend_from_slice(&id);
        chunks.push((chunk_field(&id), value.bytes.slice(start..pos)));
        ranges.push(ChunkRange {
            end: pos,
            len: pos - start,
            id,
            elements,
        });
        start = pos;
        elements = 0;
    }
    if pos != bytes.len() {
        return None;
    }
    let memo = Memo {
        value: value.bytes.clone(),
        header,
        chunks: ranges,
    };
    Some((Split { manifest, chunks }, memo))
}

/// What [`ChunkMemo`] keeps of a split value: its bytes (shared, not copied), its array
/// header's length and its chunks.
struct Memo {
    value: Bytes,
    header: usize,
    chunks: Vec<ChunkRange>,
}

/// One chunk of a remembered value: where it ends in the value, its length, its id and how
/// many elements it holds.
#[derive(Clone, Copy)]
struct ChunkRange {
    end: usize,
    len: usize,
    id: [u8; ID_LEN],
    elements: usize,
}

/// Most values a [`ChunkMemo`] keeps, and (by default) most bytes they may hold in all;
/// past either, it starts over empty (a miss only costs hashing again).
const MEMO_MAX_ENTRIES: usize = 4096;
pub(crate) const MEMO_MAX_BYTES: usize = 64 << 20;

/// Per saver: the last value split for each (thread, namespace, channel), so the next
/// version of a growing list hashes only its new chunks (hashing every element costs ~0.7
/// us per 500-byte message, ~14 us for a 20-message list in the standard workload). A
/// remembered id is used only for a chunk whose bytes equal the remembered chunk's, so an
/// id is always the hash of its chunk and the stored layout is the same as without it.
pub(crate) struct ChunkMemo {
    state: Mutex<MemoState>,
    max_bytes: usize,
}

impl Default for ChunkMemo {
    fn default() -> Self {
        Self::new(MEMO_MAX_BYTES)
    }
}

#[derive(Default)]
struct MemoState {
    entries: HashMap<Vec<u8>, Arc<Memo>>,
    bytes: usize,
}

impl ChunkMemo {
    /// A memo holding at most `max_bytes` of values (`0`: none).
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            state: Mutex::default(),
            max_bytes,
        }
    }

    /// [`split`] of `value`, the value of one channel of one thread identified by `key`.
    pub(crate) fn split(&self, key: &[u8], value: &TypedValue) -> Option<Split> {
        let previous = self.lock().entries.get(key).cloned();
        let (split, memo) = split_with(value, previous.as_deref())?;
        let size = memo.value.len();
        let mut state = self.lock();
        if let Some(old) = state.entries.remove(key) {
            state.bytes -= old.value.len();
        }
        if size <= self.max_bytes / 8 {
            if state.entries.len() >= MEMO_MAX_ENTRIES || state.bytes + size > self.max_bytes {
                state.entries.clear();
                state.bytes = 0;
            }
            state.bytes += size;
            state.entries.insert(key.to_vec(), Arc::new(memo));
        }
        Some(split)
    }

    /// Forgets every value remembered for the thread whose escaped id is `ethread` (the
    /// memo keys start with it), so a deleted thread's data is not kept in memory.
    pub(crate) fn forget_thread(&self, ethread: &[u8]) {
        let mut state = self.lock();
        let mut freed = 0;
        state.entries.retain(|k, m| {
            let keep = !k.starts_with(ethread);
            if !keep {
                freed += m.value.len();
            }
            keep
        });
        state.bytes -= freed;
    }

    /// Forgets everything.
    pub(crate) fn clear(&self) {
        let mut state = self.lock();
        state.entries.clear();
        state.bytes = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The chunk fields a manifest names, in order; `None` if it is not a well-formed manifest.
pub(crate) fn manifest_chunks(manifest: &[u8]) -> Option<Vec<Vec<u8>>> {
    let ids = manifest_parts(manifest)?.2;
    Some(ids.chunks(ID_LEN).map(chunk_field).collect())
}

/// `(tag, header, ids)` of a manifest.
fn manifest_parts(manifest: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let rest = manifest.strip_prefix(b"C")?;
    let (tag, rest) = crate::keys::netstr(rest)?;
    let (header, ids) = crate::keys::netstr(rest)?;
    (ids.len() % ID_LEN == 0).then_some((tag, header, ids))
}

/// The stored form (`V netstr(tag) bytes`) of the value a manifest describes, from its
/// chunks in manifest order; `None` if the manifest is malformed or the chunk count differs.
pub(crate) fn reassemble<'a>(
    manifest: &[u8],
    chunks: impl ExactSizeIterator<Item = &'a [u8]>,
) -> Option<Vec<u8>> {
    let (tag, header, ids) = manifest_parts(manifest)?;
    if chunks.len() != ids.len() / ID_LEN {
        return None;
    }
    let mut out = b"V".to_vec();
    netstr_into(&mut out, tag);
    out.extend_from_slice(header);
    for c in chunks {
        out.extend_from_slice(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(value: &TypedValue) -> Vec<u8> {
        let s = split(value).expect("chunked");
        let by_field: std::collections::HashMap<_, _> = s.chunks.iter().cloned().collect();
        let fields = manifest_chunks(&s.manifest).unwrap();
        let parts: Vec<&[u8]> = fields.iter().map(|f| &by_field[f][..]).collect();
        reassemble(&s.manifest, parts.into_iter()).unwrap()
    }

    fn stored(value: &TypedValue) -> Vec<u8> {
        let mut out = b"V".to_vec();
        netstr_into(&mut out, value.type_tag.as_str().as_bytes());
        out.extend_from_slice(&value.bytes);
        out
    }

    #[test]
    fn a_growing_list_shares_its_earlier_chunks() {
        let msg = |k: usize| serde_json::json!({"id": format!("m{k}"), "content": "x".repeat(600)});
        let v1 = TypedValue::msgpack(&(0..3).map(msg).collect::<Vec<_>>()).unwrap();
        let v2 = TypedValue::msgpack(&(0..4).map(msg).collect::<Vec<_>>()).unwrap();
        let (s1, s2) = (split(&v1).unwrap(), split(&v2).unwrap());
        assert_eq!(s1.chunks.len(), 3);
        assert_eq!(s2.chunks.len(), 4);
        assert_eq!(s1.chunks[..], s2.chunks[..3]);
        assert_eq!(roundtrip(&v1), stored(&v1));
        assert_eq!(roundtrip(&v2), stored(&v2));
    }

    #[test]
    fn small_elements_are_grouped() {
        let v = TypedValue::msgpack(&(0..2000u32).collect::<Vec<_>>()).unwrap();
        let s = split(&v).unwrap();
        assert!(s.chunks.len() < 20, "{} chunks", s.chunks.len());
        assert!(s.chunks.iter().all(|(_, c)| !c.is_empty()));
        assert_eq!(roundtrip(&v), stored(&v));
    }

    #[test]
    fn only_large_msgpack_arrays_are_split() {
        let long = "y".repeat(4000);
        assert!(split(&TypedValue::msgpack(&long).unwrap()).is_none());
        assert!(split(&TypedValue::msgpack(&vec![long.clone()]).unwrap()).is_none());
        assert!(split(&TypedValue::msgpack(&vec!["a", "b"]).unwrap()).is_none());
        let json = TypedValue::json(&vec![long.clone(), long.clone()]).unwrap();
        assert!(split(&json).is_none());
        let two = TypedValue::msgpack(&vec![long.clone(), long]).unwrap();
        assert!(split(&two).is_some());
    }

    #[test]
    fn malformed_arrays_are_stored_whole() {
        let good = TypedValue::msgpack(&vec!["z".repeat(800), "w".repeat(800)]).unwrap();
        let mut trailing = good.bytes.to_vec();
        trailing.push(0xc0);
        let mut truncated = good.bytes.to_vec();
        truncated.truncate(truncated.len() - 1);
        let mut huge_count = good.bytes.to_vec();
        huge_count[0] = 0xdd;
        huge_count.splice(1..1, [0xff, 0xff, 0xff]);
        for bytes in [trailing, truncated, huge_count] {
            assert!(split(&TypedValue::new(ValueType::Msgpack, bytes)).is_none());
        }
    }

    #[test]
    fn a_manifest_with_the_wrong_chunk_count_is_rejected() {
        let v = TypedValue::msgpack(&vec!["z".repeat(800), "w".repeat(800)]).unwrap();
        let s = split(&v).unwrap();
        let one = [&s.chunks[0].1[..]];
        assert!(reassemble(&s.manifest, one.into_iter()).is_none());
        assert!(reassemble(b"C3:abc", std::iter::empty()).is_none());
    }

    fn arb_msgpack() -> impl Strategy<Value = rmpv::Value> {
        let leaf = prop_oneof![
            Just(rmpv::Value::Nil),
            any::<bool>().prop_map(rmpv::Value::from),
            any::<i64>().prop_map(rmpv::Value::from),
            any::<u64>().prop_map(rmpv::Value::from),
            any::<f32>().prop_map(rmpv::Value::from),
            any::<f64>().prop_map(rmpv::Value::from),
            ".{0,300}".prop_map(rmpv::Value::from),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(rmpv::Value::from),
            (any::<i8>(), proptest::collection::vec(any::<u8>(), 0..20))
                .prop_map(|(t, d)| rmpv::Value::Ext(t, d)),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(rmpv::Value::Array),
                proptest::collection::vec((inner.clone(), inner), 0..6).prop_map(rmpv::Value::Map),
            ]
        })
    }

    /// A split through `memo` equals a fresh split of `v`.
    fn splits_as_fresh(memo: &ChunkMemo, v: &TypedValue) -> Result<(), TestCaseError> {
        let fresh = split(v);
        let memoized = memo.split(b"thread\0channel", v);
        prop_assert_eq!(fresh.is_some(), memoized.is_some());
        if let (Some(f), Some(m)) = (fresh, memoized) {
            prop_assert_eq!(f.manifest, m.manifest);
            prop_assert_eq!(f.chunks, m.chunks);
        }
        Ok(())
    }

    /// The shortcut is taken for a grown list: the chunks but the last come from the memo
    /// as they are, neither compared nor hashed (shown by planted ids and lengths, which a
    /// comparison would reject and a hash replace), and from the last one on the list is
    /// walked and hashed again.
    #[test]
    fn a_grown_list_reuses_the_memo_without_walking_it() {
        let msg = |k: usize| serde_json::json!({"id": format!("m{k}"), "content": "x".repeat(600)});
        let first = TypedValue::msgpack(&(0..4).map(msg).collect::<Vec<_>>()).unwrap();
        let grown = TypedValue::msgpack(&(0..6).map(msg).collect::<Vec<_>>()).unwrap();
        let (s1, mut memo) = split_with(&first, None).unwrap();
        assert_eq!(s1.chunks.len(), 4);
        let planted = [7u8; ID_LEN];
        for r in &mut memo.chunks {
            r.id = planted;
            r.len = 0;
        }
        let (s2, _) = split_with(&grown, Some(&memo)).unwrap();
        let fresh = split(&grown).unwrap();
        assert_eq!(s2.chunks.len(), 6);
        for (i, ((f2, b2), (ff, bf))) in s2.chunks.iter().zip(&fresh.chunks).enumerate() {
            assert_eq!(b2, bf, "chunk {i} bytes");
            if i < 3 {
                assert_eq!(f2, &chunk_field(&planted), "chunk {i} taken from the memo");
            } else {
                assert_eq!(f2, ff, "chunk {i} hashed");
            }
        }
    }

    #[test]
    fn the_memo_forgets_deleted_threads_and_accounts_its_bytes() {
        let msg = |k: usize| serde_json::json!({"id": format!("m{k}"), "content": "x".repeat(600)});
        let v = TypedValue::msgpack(&(0..3).map(msg).collect::<Vec<_>>()).unwrap();
        let memo = ChunkMemo::default();
        let key = |thread: &str, channel: &str| {
            let mut k = crate::keys::esc(thread);
            crate::keys::esc_into(&mut k, b"");
            crate::keys::esc_into(&mut k, channel.as_bytes());
            k
        };
        memo.split(&key("a", "messages"), &v).unwrap();
        memo.split(&key("a", "messages"), &v).unwrap();
        memo.split(&key("a", "other"), &v).unwrap();
        memo.split(&key("ab", "messages"), &v).unwrap();
        assert_eq!(memo.lock().entries.len(), 3);
        assert_eq!(
            memo.lock().bytes,
            3 * v.bytes.len(),
            "a replaced entry is counted once"
        );
        memo.forget_thread(&crate::keys::esc("a"));
        assert_eq!(
            memo.lock().entries.len(),
            1,
            "thread `ab` is not thread `a`"
        );
        assert_eq!(memo.lock().bytes, v.bytes.len());
        memo.clear();
        assert_eq!(memo.lock().bytes, 0);
    }

    proptest! {
        #[test]
        fn split_then_reassemble_is_exact(items in proptest::collection::vec(arb_msgpack(), 0..40)) {
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, &rmpv::Value::Array(items)).unwrap();
            let v = TypedValue::new(ValueType::Msgpack, bytes);
            if split(&v).is_some() {
                prop_assert_eq!(roundtrip(&v), stored(&v));
            }
        }

        /// Whatever the memo remembers (the previous version of the list, edited at any
        /// position, or another value under the same key), a split through it is the same
        /// as a fresh split: every id is the hash of its chunk's bytes.
        #[test]
        fn the_memo_never_changes_a_split(
            first in proptest::collection::vec(".{0,700}", 0..12),
            edits in proptest::collection::vec((0usize..14, ".{0,700}"), 0..4),
            grow in proptest::collection::vec(".{0,700}", 0..4),
        ) {
            let mut second = first.clone();
            for (at, text) in edits {
                let at = at.min(second.len());
                if at < second.len() { second[at] = text } else { second.push(text) }
            }
            second.extend(grow);
            let memo = ChunkMemo::default();
            let (v1, v2) = (TypedValue::msgpack(&first).unwrap(), TypedValue::msgpack(&second).unwrap());
            for v in [&v1, &v2, &v2, &v1] {
                splits_as_fresh(&memo, v)?;
            }
        }

        /// The usual case, a list that grows by appending, takes the memo's shortcut (its
        /// chunks but the last reused without walking): still the same as a fresh split,
        /// also when the array header grows (15 → 16+ elements, 1 → 3 header bytes).
        #[test]
        fn a_grown_list_splits_as_fresh(
            first in proptest::collection::vec(".{0,300}", 2..20),
            grow in proptest::collection::vec(".{0,300}", 0..6),
        ) {
            let mut second = first.clone();
            second.extend(grow);
            let memo = ChunkMemo::default();
            for v in [&first, &second] {
                splits_as_fresh(&memo, &TypedValue::msgpack(v).unwrap())?;
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            marker in 0x92u8..=0x9f,
            tail in proptest::collection::vec(any::<u8>(), 0..3000),
        ) {
            let mut bytes = vec![marker];
            bytes.extend(tail);
            let v = TypedValue::new(ValueType::Msgpack, bytes);
            if split(&v).is_some() {
                prop_assert_eq!(roundtrip(&v), stored(&v));
            }
        }
    }
}
