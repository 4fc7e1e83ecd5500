//! Index entries for metadata filters: canonical JSON text and a stable digest.

use std::fmt::Write as _;

use serde_json::Value;

/// The canonical JSON text of `value` for equality as [`json_equal`](crate::json_equal)
/// defines it: numbers equal to an `f64` by that `f64` in the shortest form that reads back
/// to it (`5` and `5.0` both give `5.0`; `-0.0` gives `0.0`), integers no `f64` equals
/// (beyond 2^53, such as 2^53 + 1) by their digits, object keys sorted, no whitespace,
/// strings escaped as `serde_json` escapes them.
///
/// Values get the same text exactly when they are equal under `json_equal`, so an index of
/// `(key, canonical_json(value))` entries finds every checkpoint a filter matches and no
/// other (backends still re-check candidates with
/// [`CheckpointMetadata::matches`](crate::CheckpointMetadata::matches), since long entries
/// are stored as digests).
///
/// ```
/// use checkpoint_core::backend::canonical_json;
/// use serde_json::json;
/// assert_eq!(canonical_json(&json!({"b": 5, "a": [true, null, "x"]})), r#"{"a":[true,null,"x"],"b":5.0}"#);
/// assert_eq!(canonical_json(&json!(5)), canonical_json(&json!(5.0)));
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    canonical_json_into(&mut out, value);
    out
}

/// [`canonical_json`], appended to `out`.
pub fn canonical_json_into(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let int = n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from));
            if let Some(i) = int
                && (i as f64) as i128 != i
            {
                // Equal to no f64: its digits, which no float's text looks like.
                let _ = write!(out, "{i}");
                return;
            }
            // serde_json numbers are finite; -0.0 == 0.0, so both print as 0.0.
            let f = n.as_f64().unwrap_or(0.0);
            let f = if f == 0.0 { 0.0 } else { f };
            // `Debug` of f64 is the shortest text that reads back to the same value.
            let _ = write!(out, "{f:?}");
        }
        Value::String(s) => push_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json_into(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(out, k);
                out.push(':');
                canonical_json_into(out, &map[k]);
            }
            out.push('}');
        }
    }
}

fn push_json_string(out: &mut String, s: &str) {
    // Serializing a string into JSON text cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// A stable 128-bit digest of `bytes` (the first 16 bytes of their BLAKE3 hash), for index
/// entries too long to store as they are. Stable across versions and platforms: digests are
/// stored. A collision only ever makes an index return one candidate more, which the
/// backend re-checks exactly.
///
/// ```
/// use checkpoint_core::backend::digest128;
/// assert_eq!(format!("{:032x}", digest128(b"")), "af1349b9f5f9a1a6a0404dea36dcc949");
/// ```
pub fn digest128(bytes: &[u8]) -> u128 {
    let hash = blake3::hash(bytes);
    let mut head = [0u8; 16];
    head.copy_from_slice(&hash.as_bytes()[..16]);
    u128::from_be_bytes(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_equal;
    use proptest::prelude::*;
    use serde_json::json;

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (0u32..64, -2i64..3).prop_map(|(e, d)| json!((1i64 << (e.min(62))) + d)),
            (0u32..64).prop_map(|e| json!(2f64.powi(e as i32))),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            (-1000i64..1000).prop_map(|i| json!(i as f64)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn equal_values_have_equal_text(a in arb_json(), b in arb_json()) {
            // Same text exactly when equal.
            prop_assert_eq!(json_equal(&a, &b), canonical_json(&a) == canonical_json(&b));
            // The text is valid JSON that reads back equal.
            let back: Value = serde_json::from_str(&canonical_json(&a)).unwrap();
            prop_assert!(json_equal(&a, &back));
        }
    }

    #[test]
    fn numbers_and_keys_are_canonical() {
        assert_eq!(canonical_json(&json!(-0.0)), canonical_json(&json!(0)));
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": 2})),
            canonical_json(&json!({"a": 2.0, "b": 1.0}))
        );
        assert_ne!(canonical_json(&json!("1")), canonical_json(&json!(1)));
        assert_eq!(canonical_json(&json!("a\"\u{0}")), r#""a\"\u0000""#);
        // Integers no f64 equals keep their digits; those an f64 equals print as it.
        let two53 = 9_007_199_254_740_992_i64;
        assert_eq!(canonical_json(&json!(two53 + 1)), "9007199254740993");
        assert_eq!(
            canonical_json(&json!(two53)),
            canonical_json(&json!(two53 as f64))
        );
        assert_eq!(canonical_json(&json!(u64::MAX)), "18446744073709551615");
        assert_eq!(
            canonical_json(&json!(1u64 << 63)),
            canonical_json(&json!((1u64 << 63) as f64))
        );
    }
}
