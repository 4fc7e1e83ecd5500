//! The key layout and every encoding of identifiers into key names and index members.
//!
//! Two encodings are used, both injective (no two inputs share an output):
//!
//! * [`key_part`] for identifiers inside **key names**: bytes outside `[A-Za-z0-9._-]` become
//!   `%XX`. The result has no `{`, `}`, `*`, `?`, `[`, `]`, `\`, `:`, space, NUL or non-ASCII
//!   byte, so a thread id can neither open/close a hash tag, nor glob in a `SCAN MATCH`, nor
//!   fake a key separator.
//! * [`esc`] for identifiers inside **sorted-set members and hash fields**: an
//!   order-preserving escape (`0x00` → `01 01`, `0x01` → `01 02`) followed by a `0x00`
//!   terminator. Components are self-delimiting, and byte order of the encoded string equals
//!   string order of the original, so `ZRANGEBYLEX` orders checkpoints by id exactly as the
//!   contract compares them, with ties broken by the following components.

use std::io::Write as _;

use checkpoint_core::ChannelVersion;
use checkpoint_core::backend::{canonical_json, digest128};
use serde_json::Value;

/// Decodes a [`key_part`]; `None` for anything `key_part` cannot have produced.
pub(crate) fn parse_key_part(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = part.get(i + 1..i + 3)?;
                let b = u8::from_str_radix(hex, 16).ok()?;
                if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                    return None; // never escaped
                }
                out.push(b);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// Encodes an identifier for use inside a key name (see the module docs).
pub(crate) fn key_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    key_part_into(&mut out, s);
    out
}

/// Appends [`key_part`]`(s)` to `out`.
fn key_part_into(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

/// Appends the order-preserving, self-delimiting encoding of `s` to `out`.
pub(crate) fn esc_into(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            0 => out.extend_from_slice(&[1, 1]),
            1 => out.extend_from_slice(&[1, 2]),
            b => out.push(b),
        }
    }
    out.push(0);
}

/// The order-preserving, self-delimiting encoding of `s`.
pub(crate) fn esc(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 1);
    esc_into(&mut out, s.as_bytes());
    out
}

/// Decodes one [`esc`] component at the start of `input`; returns it and the rest.
pub(crate) fn unesc(input: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            0 => return Some((out, &input[i + 1..])),
            1 => {
                match input.get(i + 1)? {
                    1 => out.push(0),
                    2 => out.push(1),
                    _ => return None,
                }
                i += 2;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    None
}

/// Decodes one [`esc`] component that must be UTF-8.
pub(crate) fn unesc_str(input: &[u8]) -> Option<(String, &[u8])> {
    let (raw, rest) = unesc(input)?;
    Some((String::from_utf8(raw).ok()?, rest))
}

/// A thread-local checkpoint reference: `esc(id) esc(ns)`. Also the prefix of the members of
/// the checkpoint's pending writes.
pub(crate) fn tref(id: &str, ns: &str) -> Vec<u8> {
    let mut out = esc(id);
    esc_into(&mut out, ns.as_bytes());
    out
}

/// Decodes a [`tref`] into `(id, ns)`.
pub(crate) fn parse_tref(r: &[u8]) -> Option<(String, String)> {
    let (id, rest) = unesc_str(r)?;
    let (ns, rest) = unesc_str(rest)?;
    rest.is_empty().then_some((id, ns))
}

/// A global checkpoint reference: `esc(id) esc(thread) esc(ns)`.
pub(crate) fn gref(id: &str, thread: &str, ns: &str) -> Vec<u8> {
    let mut out = esc(id);
    esc_into(&mut out, thread.as_bytes());
    esc_into(&mut out, ns.as_bytes());
    out
}

/// `ZADD` arguments (score `0`, member pairs) of a checkpoint's entries in its thread's
/// index: `\1 tref`, `\2 esc(ns) esc(id)` and `token \0 tref` per metadata token (the
/// layout the scripts read; see `scripts.rs`).
pub(crate) fn thread_index_args(id: &str, ns: &str, tokens: &[String]) -> Vec<Vec<u8>> {
    let tref = tref(id, ns);
    let mut by_ns = vec![2u8];
    esc_into(&mut by_ns, ns.as_bytes());
    esc_into(&mut by_ns, id.as_bytes());
    let mut args = vec![
        b"0".to_vec(),
        [&[1u8][..], &tref].concat(),
        b"0".to_vec(),
        by_ns,
    ];
    for t in tokens {
        args.push(b"0".to_vec());
        args.push([t.as_bytes(), b"\0", &tref].concat());
    }
    args
}

/// The first byte of a thread's entry in the global index (see [`thread_entry`]).
pub(crate) const THREAD_ENTRY: u8 = 3;

/// A thread's entry in the global index: `\3 esc(thread) cp_key`, where `cp_key` is the
/// name of the thread's checkpoint-record hash. The entries list the threads in the
/// contract's order (`esc` is order-preserving and self-delimiting), and each names the key
/// whose existence says whether its thread still has a checkpoint.
pub(crate) fn thread_entry(thread: &str, cp_key: &str) -> Vec<u8> {
    let mut out = vec![THREAD_ENTRY];
    esc_into(&mut out, thread.as_bytes());
    out.extend_from_slice(cp_key.as_bytes());
    out
}

/// Decodes a [`thread_entry`] into `(thread, cp_key)`.
pub(crate) fn parse_thread_entry(entry: &[u8]) -> Option<(String, String)> {
    let rest = entry.strip_prefix(&[THREAD_ENTRY])?;
    let (thread, key) = unesc_str(rest)?;
    Some((thread, String::from_utf8(key.to_vec()).ok()?))
}

/// The `ZRANGEBYLEX` start (exclusive) of the thread entries after `after`, or of all of
/// them: `(\3 esc(after) \xFF` sorts after every entry of `after` (a key name has no
/// `0xFF` byte) and before those of every greater id (`esc` is prefix-free).
pub(crate) fn thread_entries_after(after: Option<&str>) -> Vec<u8> {
    let mut lo = vec![b'(', THREAD_ENTRY];
    if let Some(after) = after {
        esc_into(&mut lo, after.as_bytes());
        lo.push(0xFF);
    }
    lo
}

/// `ZADD` arguments (score `0`, member pairs) of a new checkpoint's entries in the global
/// index: its thread's [`thread_entry`], `\1 gref pack(tokens)` and `token \0 gref` per
/// metadata token.
pub(crate) fn global_index_args(
    thread_entry: &[u8],
    gref: &[u8],
    tokens: &[String],
) -> Vec<Vec<u8>> {
    let mut args = vec![
        b"0".to_vec(),
        thread_entry.to_vec(),
        b"0".to_vec(),
        [&[1u8][..], gref, &pack_list(tokens)].concat(),
    ];
    for t in tokens {
        args.push(b"0".to_vec());
        args.push([t.as_bytes(), b"\0", gref].concat());
    }
    args
}

/// Decodes a [`gref`] into `(id, thread, ns)`.
pub(crate) fn parse_gref(r: &[u8]) -> Option<(String, String, String)> {
    let (id, rest) = unesc_str(r)?;
    let (thread, rest) = unesc_str(rest)?;
    let (ns, rest) = unesc_str(rest)?;
    rest.is_empty().then_some((id, thread, ns))
}

/// An `i64` as 8 bytes whose byte order equals numeric order.
pub(crate) fn idx8(i: i64) -> [u8; 8] {
    ((i as u64) ^ (1 << 63)).to_be_bytes()
}

/// Inverse of [`idx8`].
pub(crate) fn parse_idx8(b: &[u8]) -> Option<i64> {
    let arr: [u8; 8] = b.try_into().ok()?;
    Some((u64::from_be_bytes(arr) ^ (1 << 63)) as i64)
}

/// Appends a channel version as stored in a blob field: `i<n>` or `s<string>`.
fn version_into(out: &mut Vec<u8>, v: &ChannelVersion) {
    match v {
        ChannelVersion::Int(n) => {
            out.push(b'i');
            let _ = write!(out, "{n}");
        }
        ChannelVersion::Str(s) => {
            out.push(b's');
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// The field of a channel value in the thread's blob hash: `esc(ns) esc(channel) version`.
pub(crate) fn blob_field(ns: &str, channel: &str, version: &ChannelVersion) -> Vec<u8> {
    let mut out = Vec::with_capacity(ns.len() + channel.len() + 52);
    esc_into(&mut out, ns.as_bytes());
    esc_into(&mut out, channel.as_bytes());
    version_into(&mut out, version);
    out
}

/// Appends a length-prefixed string (`<len>:<bytes>`), the packing the scripts parse.
pub(crate) fn netstr_into(out: &mut Vec<u8>, s: &[u8]) {
    let _ = write!(out, "{}:", s.len());
    out.extend_from_slice(s);
}

/// Reads one length-prefixed string; returns it and the rest.
pub(crate) fn netstr(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = input.iter().position(|&b| b == b':')?;
    let len: usize = std::str::from_utf8(&input[..colon]).ok()?.parse().ok()?;
    let start = colon + 1;
    let end = start.checked_add(len)?;
    if end > input.len() {
        return None;
    }
    Some((&input[start..end], &input[end..]))
}

/// Packs a list of byte strings.
pub(crate) fn pack_list<I, S>(items: I) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<[u8]>,
{
    let mut out = Vec::new();
    for item in items {
        netstr_into(&mut out, item.as_ref());
    }
    out
}

/// Unpacks a list packed by [`pack_list`].
pub(crate) fn unpack_list(mut input: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let (item, rest) = netstr(input)?;
        out.push(item.to_vec());
        input = rest;
    }
    Some(out)
}

/// Longest token kept readable; longer ones are hashed.
const MAX_TOKEN: usize = 160;

/// The index token of a metadata condition `key == value`: printable ASCII without NUL,
/// so `token \0 ref` members parse unambiguously.
///
/// The value is in its canonical JSON text
/// ([`canonical_json`](checkpoint_core::backend::canonical_json)), so values equal under
/// `json_equal` give the same token; long tokens are a digest of key and value.
pub(crate) fn token(key: &str, value: &Value) -> String {
    let canon = canonical_json(value);
    let mut readable = String::with_capacity(2 + 3 * (key.len() + canon.len()));
    readable.push('k');
    key_part_into(&mut readable, key);
    readable.push('=');
    key_part_into(&mut readable, &canon);
    if readable.len() <= MAX_TOKEN {
        return readable;
    }
    let mut bytes = Vec::with_capacity(key.len() + canon.len() + 1);
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(canon.as_bytes());
    format!("h{:032x}", digest128(&bytes))
}

/// Names of the keys of one saver (one key prefix).
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    prefix: String,
}

/// The data keys of one thread, in the order the scripts expect them in `KEYS`.
pub(crate) const THREAD_KEY_SUFFIXES: [&str; 7] = ["cp", "bl", "wi", "wv", "mi", "opt", "lease"];

/// Positions in [`THREAD_KEY_SUFFIXES`].
pub(crate) const CP: usize = 0;
pub(crate) const BL: usize = 1;
pub(crate) const WI: usize = 2;
pub(crate) const WV: usize = 3;
pub(crate) const MI: usize = 4;
pub(crate) const OPT: usize = 5;
pub(crate) const LEASE: usize = 6;
/// Position of the global index key when it follows a thread's keys (single node).
pub(crate) const GMI: usize = THREAD_KEY_SUFFIXES.len();

impl Layout {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>:{<thread>}`: the hash tag puts every key of a thread in one Cluster slot.
    pub(crate) fn thread_base(&self, thread: &str) -> String {
        format!("{}:{{{}}}", self.prefix, key_part(thread))
    }

    /// The 7 keys of a thread (see [`THREAD_KEY_SUFFIXES`]).
    pub(crate) fn thread_keys(&self, thread: &str) -> Vec<String> {
        let base = self.thread_base(thread);
        THREAD_KEY_SUFFIXES
            .iter()
            .map(|s| format!("{base}:{s}"))
            .collect()
    }

    /// The key of a thread's checkpoint-record hash (`cp`): the key whose existence says
    /// whether the thread holds a checkpoint.
    pub(crate) fn records_key(&self, thread: &str) -> String {
        format!("{}:{}", self.thread_base(thread), THREAD_KEY_SUFFIXES[CP])
    }

    /// The global keys, in their own slot: the index (`mi`) and, on a Cluster, the times
    /// thread entries were last written (`ts`). `%g` cannot be the encoding of a thread id
    /// (`%` is always followed by two hex digits there).
    pub(crate) fn global_keys(&self) -> Vec<String> {
        ["mi", "ts"]
            .iter()
            .map(|s| format!("{}:{{%g}}:{s}", self.prefix))
            .collect()
    }

    /// The key that records the stored layout of everything under the prefix, in its own
    /// slot. `%v` cannot be the encoding of a thread id.
    pub(crate) fn layout_key(&self) -> String {
        format!("{}:{{%v}}:layout", self.prefix)
    }

    /// The key of an idempotency-ledger entry, in its own slot.
    pub(crate) fn ledger_key(&self, key: &str) -> String {
        format!("{}:{{%l{}}}:claim", self.prefix, key_part(key))
    }

    /// The `SCAN MATCH` pattern of the `cp` key (checkpoint records) of every thread.
    pub(crate) fn thread_records_pattern(&self) -> String {
        format!("{}:{{*}}:{}", self.prefix, THREAD_KEY_SUFFIXES[CP])
    }

    /// The thread whose `cp` key is `key` (see [`thread_records_pattern`](Self::thread_records_pattern)).
    pub(crate) fn thread_of_records_key(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let part = key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(":{")?
            .strip_suffix(&format!("}}:{}", THREAD_KEY_SUFFIXES[CP]))?;
        parse_key_part(part)
    }

    /// The `SCAN MATCH` pattern of every key of this saver (the prefix is glob-free).
    pub(crate) fn pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }
}

/// Whether a key prefix is acceptable: non-empty, at most 128 bytes of `[A-Za-z0-9._:/-]`
/// (no hash-tag braces, no glob characters).
pub(crate) fn valid_prefix(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 128
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_parts_decode_back_and_nothing_else_decodes() {
        for id in ["a", "t-ü", "x:{y}*%?[]\\ z", "\0", "%41", ""] {
            assert_eq!(parse_key_part(&key_part(id)).as_deref(), Some(id), "{id:?}");
        }
        // Not key_part output: a bare separator, a short or non-hex escape, an escaped
        // character key_part keeps, an escape that is not UTF-8.
        for part in ["a:b", "%4", "%zz", "%41", "%FF"] {
            assert_eq!(parse_key_part(part), None, "{part:?}");
        }
    }

    #[test]
    fn key_part_is_glob_and_tag_free_and_injective() {
        let inputs = [
            "", "a", "*", "?", "[a]", "{t}", "}", ":", " ", "\0", "%", "%25", "ü", "a b", "a%20b",
        ];
        let mut seen = std::collections::HashSet::new();
        for s in inputs {
            let k = key_part(s);
            assert!(
                k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-%".contains(&b)),
                "{s:?} -> {k:?}"
            );
            assert!(seen.insert(k), "collision for {s:?}");
        }
    }

    #[test]
    fn esc_preserves_order_and_roundtrips() {
        let mut words = vec![
            "", "\0", "\u{1}", "\u{1}\0", "a", "a\0", "a\0b", "ab", "a\u{1}", "b", "ü", "zz",
        ];
        words.sort();
        let encoded: Vec<Vec<u8>> = words.iter().map(|w| esc(w)).collect();
        let mut sorted = encoded.clone();
        sorted.sort();
        assert_eq!(encoded, sorted, "escape must preserve order");
        for w in &words {
            let mut e = esc(w);
            e.extend_from_slice(b"rest");
            let (back, rest) = unesc_str(&e).unwrap();
            assert_eq!((back.as_str(), rest), (*w, &b"rest"[..]));
        }
        // Composite keys order by their first component first.
        assert!(tref("a", "zzz") < tref("ab", ""));
        assert!(gref("x", "t", "") < gref("x", "t", "n"));
        assert_eq!(
            parse_gref(&gref("i\0d", "t{}", "a:b")).unwrap(),
            ("i\0d".into(), "t{}".into(), "a:b".into())
        );
        assert_eq!(
            parse_tref(&tref("i", "")).unwrap(),
            ("i".into(), String::new())
        );
    }

    #[test]
    fn idx8_orders_like_integers() {
        let v = [i64::MIN, -4, -1, 0, 1, 2, 300, i64::MAX];
        for w in v.windows(2) {
            assert!(idx8(w[0]) < idx8(w[1]));
        }
        for x in v {
            assert_eq!(parse_idx8(&idx8(x)), Some(x));
        }
    }

    #[test]
    fn packing_roundtrips() {
        let items: Vec<&[u8]> = vec![b"", b"a:b", b"\0\xff", b"12:"];
        let packed = pack_list(items.clone());
        assert_eq!(unpack_list(&packed).unwrap(), items);
        assert!(unpack_list(b"5:ab").is_none());
        assert!(unpack_list(b"x:ab").is_none());
    }

    /// Tokens and value fields are stored in indexes and hashes, so their format must never
    /// change: pinned here against literal strings.
    #[test]
    fn stored_token_and_field_formats_are_stable() {
        assert_eq!(token("step", &json!(5)), "kstep=5.0");
        assert_eq!(token("source", &json!("loop")), "ksource=%22loop%22");
        assert_eq!(token("parents", &json!({})), "kparents=%7B%7D");
        assert_eq!(token("a b", &json!([1, "x"])), "ka%20b=%5B1.0%2C%22x%22%5D");
        assert_eq!(
            token("k", &json!("x".repeat(200))),
            "ha20cd4a4788c398991e5a56c38dc5c63"
        );
        assert_eq!(
            blob_field("", "messages", &ChannelVersion::Int(12)),
            b"\0messages\0i12".to_vec()
        );
        assert_eq!(
            blob_field("n\u{1}", "c", &ChannelVersion::Str("01.5".into())),
            b"n\x01\x02\0c\0s01.5".to_vec()
        );
        let mut packed = Vec::new();
        netstr_into(&mut packed, b"");
        netstr_into(&mut packed, &[7u8; 12]);
        assert_eq!(&packed[..5], b"0:12:");
        assert_eq!(packed.len(), 5 + 12);
    }

    #[test]
    fn tokens_follow_json_equal() {
        assert_eq!(token("step", &json!(5)), token("step", &json!(5.0)));
        assert_ne!(token("step", &json!(5)), token("step", &json!("5")));
        assert_ne!(token("step", &json!(5)), token("step", &json!(6)));
        assert_eq!(
            token("o", &json!({"a": 1, "b": [1, 2]})),
            token("o", &json!({"b": [1.0, 2], "a": 1}))
        );
        assert_ne!(
            token("o", &json!({"a": 1})),
            token("o", &json!({"a": 1, "b": 1}))
        );
        assert_ne!(token("a", &json!("b=c")), token("a=b", &json!("c")));
        assert_eq!(token("z", &json!(0.0)), token("z", &json!(-0.0)));
        let long = "x".repeat(1000);
        let t = token("k", &json!(long));
        assert!(t.starts_with('h') && t.len() == 33, "{t}");
        assert_ne!(t, token("k", &json!(format!("{long}y"))));
        for t in [token("\0*", &json!("{\0}")), t] {
            assert!(t.bytes().all(|b| b.is_ascii_graphic()), "{t:?}");
        }
    }

    #[test]
    fn thread_entries_sort_as_their_ids_and_decode() {
        let l = Layout::new("cp");
        let ids = [
            "", "\0", "\0\0", "\u{1}", "a", "a\0", "a\u{1}", "ab", "b", "\u{ff}",
        ];
        let entries: Vec<Vec<u8>> = ids
            .iter()
            .map(|t| thread_entry(t, &l.records_key(t)))
            .collect();
        let mut sorted = entries.clone();
        sorted.sort();
        assert_eq!(sorted, entries, "entries sort as their ids");
        for (t, e) in ids.iter().zip(&entries) {
            assert_eq!(
                parse_thread_entry(e),
                Some((t.to_string(), l.records_key(t)))
            );
            // The exclusive start after `t` lies between its entry and the next one's.
            let lo = thread_entries_after(Some(t));
            assert!(&lo[1..] > e.as_slice());
            for later in entries.iter().filter(|x| *x > e) {
                assert!(&lo[1..] < later.as_slice(), "{t:?}");
            }
        }
        assert!(
            entries
                .iter()
                .all(|e| &thread_entries_after(None)[1..] <= e.as_slice())
        );
    }

    #[test]
    fn layout_keys_share_a_tag_per_thread() {
        let l = Layout::new("cp");
        let keys = l.thread_keys("a{b}*");
        assert!(keys.iter().all(|k| k.starts_with("cp:{a%7Bb%7D%2A}:")));
        assert_eq!(l.records_key("a{b}*"), keys[CP]);
        assert_eq!(l.global_keys(), ["cp:{%g}:mi", "cp:{%g}:ts"]);
        assert!(valid_prefix("checkpoint:test-1/x"));
        assert!(!valid_prefix("a{b}"));
        assert!(!valid_prefix("a*"));
        assert!(!valid_prefix(""));
    }
}
