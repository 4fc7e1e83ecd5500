//! Encodings of identifiers into stored keys: document ids, the order-preserving sort key,
//! channel version keys and the metadata filter entries.
//!
//! Every encoding here is injective and produces plain strings that are only ever compared
//! for equality or order, never interpreted: a `$`, a `.` or a NUL in an identifier is data.

use serde_json::{Map, Value};

use checkpoint_core::backend::{Identifiers, canonical_json_into, digest128};
use checkpoint_core::{ChannelVersion, CheckpointMetadata};

/// Longest identifier (thread id, namespace, checkpoint id, channel, task id, task path)
/// accepted: identifiers are repeated in document ids and index keys, and must leave every
/// document far below the 16 MiB BSON limit.
pub(crate) const MAX_IDENTIFIER_BYTES: usize = 256 * 1024;
/// What this backend stores as an identifier: up to [`MAX_IDENTIFIER_BYTES`], any string.
pub(crate) const IDENTIFIERS: Identifiers = Identifiers::new("MongoDB", MAX_IDENTIFIER_BYTES);

/// A document id made of several identifiers: their JSON array (`["t","ns","id"]`).
/// JSON string escaping makes it injective, and the result is valid UTF-8 without NUL.
pub(crate) fn doc_id(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len() + 3).sum::<usize>() + 2);
    out.push('[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, p);
    }
    out.push(']');
    out
}

/// `id` (made by [`doc_id`]) with its first part, the thread, replaced by `thread`; `None`
/// for a text that is not such an id.
pub(crate) fn with_thread(id: &str, thread: &str) -> Option<String> {
    let mut parts: Vec<String> = serde_json::from_str(id).ok()?;
    *parts.first_mut()? = thread.to_owned();
    Some(doc_id(
        &parts.iter().map(String::as_str).collect::<Vec<_>>(),
    ))
}

fn push_json_string(out: &mut String, s: &str) {
    // serde_json never fails to serialize a string.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// The key of a channel version: `i<decimal>` for an integer version, `s<string>` for a string
/// one, so `Int(5)` and `Str("5")` stay distinct.
pub(crate) fn version_key(v: &ChannelVersion) -> String {
    match v {
        ChannelVersion::Int(n) => format!("i{n}"),
        ChannelVersion::Str(s) => {
            let mut out = String::with_capacity(s.len() + 1);
            out.push('s');
            out.push_str(s);
            out
        }
    }
}

/// Appends the order-preserving encoding of one tuple component: bytes `0x00` and `0x01` are
/// escaped as `0x01 0x02` and `0x01 0x03`, and the component ends with `0x01 0x01`. For any
/// tuples `a`, `b` of strings, `encode(a) < encode(b)` (bytewise, as MongoDB compares
/// strings) exactly when `a < b` in lexicographic tuple order with each component compared
/// bytewise, and no encoding is a prefix of another.
fn push_ordered(out: &mut String, s: &str) {
    for ch in s.chars() {
        match ch {
            '\u{0}' => out.push_str("\u{1}\u{2}"),
            '\u{1}' => out.push_str("\u{1}\u{3}"),
            c => out.push(c),
        }
    }
    out.push_str("\u{1}\u{1}");
}

/// The sort key of a checkpoint: `(checkpoint_id, thread_id, checkpoint_ns)` encoded so that
/// string order is the contract's list order (reversed). One index range on it pages through
/// the global listing, and within one thread it orders by `(id, namespace)`.
pub(crate) fn sort_key(checkpoint_id: &str, thread_id: &str, ns: &str) -> String {
    let mut out = String::with_capacity(checkpoint_id.len() + thread_id.len() + ns.len() + 6);
    push_ordered(&mut out, checkpoint_id);
    push_ordered(&mut out, thread_id);
    push_ordered(&mut out, ns);
    out
}

/// The encoding of a checkpoint id alone: every sort key of a checkpoint with an id below
/// `id` is less than it, every sort key with id `id` or above is greater or equal.
pub(crate) fn id_bound(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 2);
    push_ordered(&mut out, id);
    out
}

/// Metadata with at most this many keys gets an entry per pair of keys as well, so a filter
/// on two keys is one index lookup.
pub(crate) const MAX_PAIRED_KEYS: usize = 12;
/// Entries longer than this are stored as a hash (a hash collision only makes the index
/// lookup return a candidate more; every candidate is checked exactly after loading).
const MAX_ENTRY_LEN: usize = 64;

/// `"key"<canonical JSON of value>`: the text of one filter condition.
fn condition_text(key: &str, value: &Value) -> String {
    let mut out = String::new();
    push_json_string(&mut out, key);
    canonical_json_into(&mut out, value);
    out
}

/// A stored entry: a kind digit and the text, hashed when long.
fn entry(kind: char, text: &str) -> String {
    if text.len() < MAX_ENTRY_LEN {
        let mut out = String::with_capacity(text.len() + 1);
        out.push(kind);
        out.push_str(text);
        out
    } else {
        let mut bytes = Vec::with_capacity(text.len() + 1);
        bytes.push(kind as u8);
        bytes.extend_from_slice(text.as_bytes());
        format!("#{:032x}", digest128(&bytes))
    }
}

/// The metadata filter entries of a checkpoint, stored in an indexed array:
///
/// * metadata with at most [`MAX_PAIRED_KEYS`] keys: one entry `1<key><value>` per key and
///   one entry `2<key1><value1><key2><value2>` per pair of keys (`key1 < key2`);
/// * larger metadata: one entry `3<key><value>` per key.
///
/// Keys are JSON strings and values canonical JSON text, so every entry is unambiguous and
/// no key or value can act as a query operator or a field path.
pub(crate) fn filter_entries(metadata: &CheckpointMetadata) -> Vec<String> {
    let mut conds: Vec<(&String, String)> = metadata
        .0
        .iter()
        .map(|(k, v)| (k, condition_text(k, v)))
        .collect();
    conds.sort_by(|a, b| a.0.cmp(b.0));
    if conds.len() > MAX_PAIRED_KEYS {
        return conds.iter().map(|(_, c)| entry('3', c)).collect();
    }
    let mut out: Vec<String> = conds.iter().map(|(_, c)| entry('1', c)).collect();
    for i in 0..conds.len() {
        for j in i + 1..conds.len() {
            out.push(entry('2', &format!("{}{}", conds[i].1, conds[j].1)));
        }
    }
    out
}

/// Most conditions of one filter the server checks; the others are checked exactly by the
/// client after loading (as every condition is), so a filter of many keys costs the server
/// a bounded number of array scans per candidate, not one per key.
pub(crate) const MAX_FILTER_STAGES: usize = 8;

/// The index lookups of a metadata filter: a list of stages, each a set of entries of which a
/// matching checkpoint holds at least one. The first stage is the one an index serves (for
/// two or more conditions: the pair of the first two keys). Empty for an empty filter; at
/// most [`MAX_FILTER_STAGES`] stages.
///
/// Every checkpoint whose metadata matches the filter passes every stage; a checkpoint that
/// passes every stage matches, except for a hash collision or integers beyond 2^53 (callers
/// re-check with [`CheckpointMetadata::matches`]).
pub(crate) fn filter_stages(filter: &Map<String, Value>) -> Vec<Vec<String>> {
    let mut conds: Vec<(&String, String)> = filter
        .iter()
        .map(|(k, v)| (k, condition_text(k, v)))
        .collect();
    conds.sort_by(|a, b| a.0.cmp(b.0));
    let mut stages = Vec::new();
    match conds.len() {
        0 => {}
        1 => stages.push(vec![entry('1', &conds[0].1), entry('3', &conds[0].1)]),
        _ => {
            stages.push(vec![
                entry('2', &format!("{}{}", conds[0].1, conds[1].1)),
                entry('3', &conds[0].1),
            ]);
            for (_, c) in conds[1..].iter().take(MAX_FILTER_STAGES - 1) {
                stages.push(vec![entry('1', c), entry('3', c)]);
            }
        }
    }
    stages
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn doc_ids_are_injective_and_nul_free() {
        assert_ne!(doc_id(&["a,b", "c"]), doc_id(&["a", "b,c"]));
        assert_ne!(doc_id(&["a\"", ""]), doc_id(&["a", "\""]));
        assert!(!doc_id(&["\0", "x"]).contains('\0'));
        assert_eq!(doc_id(&["t", ""]), r#"["t",""]"#);
    }

    #[test]
    fn an_id_moves_to_another_thread_whole() {
        let id = doc_id(&["src", "ns \"x\"", "ch", "i3"]);
        assert_eq!(
            with_thread(&id, "dst,\u{1F642}").unwrap(),
            doc_id(&["dst,\u{1F642}", "ns \"x\"", "ch", "i3"])
        );
        assert_eq!(with_thread("not json", "dst"), None);
        assert_eq!(with_thread("[]", "dst"), None);
    }

    #[test]
    fn version_keys_keep_the_form() {
        assert_eq!(version_key(&ChannelVersion::Int(5)), "i5");
        assert_eq!(version_key(&ChannelVersion::Str("5".into())), "s5");
        assert_eq!(
            version_key(&ChannelVersion::Int(u64::MAX)),
            format!("i{}", u64::MAX)
        );
    }

    #[test]
    fn sort_key_order_is_tuple_order() {
        let samples = [
            "", "\0", "\0\0", "\u{1}", "\u{1}\0", "\u{2}", "a", "a\0", "a\u{1}", "a\u{2}", "ab",
            "b", "ü", "🙂", "a|b",
        ];
        let mut tuples = Vec::new();
        for a in samples {
            for b in samples {
                for c in ["", "\0", "x"] {
                    tuples.push((a, b, c));
                }
            }
        }
        for x in &tuples {
            for y in &tuples {
                let kx = sort_key(x.0, x.1, x.2);
                let ky = sort_key(y.0, y.1, y.2);
                assert_eq!(kx.as_bytes().cmp(ky.as_bytes()), x.cmp(y), "{x:?} vs {y:?}");
                // An id bound separates ids below from ids at or above it.
                let b = id_bound(y.0);
                assert_eq!(kx.as_str() < b.as_str(), x.0 < y.0, "{x:?} vs bound {y:?}");
            }
        }
    }

    #[test]
    fn filters_find_their_entries() {
        let m = CheckpointMetadata::from(
            json!({"source": "loop", "step": 5, "parents": {}, "$ne": {"$gt": 1}, "a.b": "x"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let entries = filter_entries(&m);
        assert_eq!(entries.len(), 5 + 10);
        let f = |v: Value| v.as_object().unwrap().clone();
        for filter in [
            f(json!({"step": 5.0})),
            f(json!({"source": "loop", "step": 5})),
            f(json!({"$ne": {"$gt": 1.0}, "a.b": "x", "parents": {}})),
        ] {
            for stage in filter_stages(&filter) {
                assert!(
                    stage.iter().any(|e| entries.contains(e)),
                    "{filter:?}: stage {stage:?} misses"
                );
            }
        }
        let miss = f(json!({"source": "loop", "step": 6}));
        assert!(
            filter_stages(&miss)
                .iter()
                .any(|stage| !stage.iter().any(|e| entries.contains(e)))
        );
        assert!(filter_stages(&Map::new()).is_empty());
    }

    #[test]
    fn large_metadata_gets_single_key_entries_only() {
        let mut m = CheckpointMetadata::new();
        for i in 0..=MAX_PAIRED_KEYS {
            m.insert(format!("k{i:02}"), i);
        }
        let entries = filter_entries(&m);
        assert_eq!(entries.len(), MAX_PAIRED_KEYS + 1);
        let filter = json!({"k03": 3, "k07": 7}).as_object().unwrap().clone();
        for stage in filter_stages(&filter) {
            assert!(stage.iter().any(|e| entries.contains(e)));
        }
    }

    #[test]
    fn long_entries_are_hashed_and_stable() {
        let m = CheckpointMetadata::new().with("k", "v".repeat(1000));
        let entries = filter_entries(&m);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].len(), 33);
        assert!(entries[0].starts_with('#'));
        // The same metadata always gives the same entry (entries are stored).
        assert_eq!(filter_entries(&m), entries);
        assert_ne!(
            filter_entries(&CheckpointMetadata::new().with("k", "w".repeat(1000))),
            entries
        );
    }
}
