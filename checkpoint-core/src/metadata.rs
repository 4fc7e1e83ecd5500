//! Checkpoint metadata: an open JSON object with typed accessors for the well-known keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Why a checkpoint was created (metadata key `source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Created from an input to `invoke`/`stream`.
    Input,
    /// Created inside the pregel loop.
    Loop,
    /// Created by a manual state update.
    Update,
    /// Created as a copy of another checkpoint.
    Fork,
}

impl Source {
    /// The string stored in metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Input => "input",
            Source::Loop => "loop",
            Source::Update => "update",
            Source::Fork => "fork",
        }
    }
}

/// Metadata of a checkpoint: any JSON object. Savers store and return it exactly (key order,
/// number forms, nested values), and [`list`](crate::Saver::list) filters on it.
///
/// Well-known keys have typed accessors: `source`, `step`, `parents` (namespace → checkpoint
/// id of the enclosing graphs) and `run_id`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CheckpointMetadata(pub Map<String, Value>);

impl CheckpointMetadata {
    /// Empty metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Metadata as LangGraph's loop writes it: `source`, `step` and empty `parents`.
    pub fn for_step(source: Source, step: i64) -> Self {
        Self::new()
            .with_source(source)
            .with_step(step)
            .with_parents(BTreeMap::new())
    }

    /// The `source` key, if present and one of the known values.
    pub fn source(&self) -> Option<Source> {
        serde_json::from_value(self.0.get("source")?.clone()).ok()
    }

    /// The `step` key, if it is an integer.
    pub fn step(&self) -> Option<i64> {
        self.0.get("step")?.as_i64()
    }

    /// The `parents` key (namespace → checkpoint id), if it is an object of strings.
    pub fn parents(&self) -> Option<BTreeMap<String, String>> {
        serde_json::from_value(self.0.get("parents")?.clone()).ok()
    }

    /// The `run_id` key, if it is a string.
    pub fn run_id(&self) -> Option<&str> {
        self.0.get("run_id")?.as_str()
    }

    /// Any key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// Sets any key, returning the previous value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        self.0.insert(key.into(), value.into())
    }

    /// Sets `source`.
    pub fn with_source(mut self, source: Source) -> Self {
        self.insert("source", source.as_str());
        self
    }

    /// Sets `step`.
    pub fn with_step(mut self, step: i64) -> Self {
        self.insert("step", step);
        self
    }

    /// Sets `parents`.
    pub fn with_parents(mut self, parents: BTreeMap<String, String>) -> Self {
        let map: Map<String, Value> = parents
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        self.insert("parents", Value::Object(map));
        self
    }

    /// Sets `run_id`.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.insert("run_id", run_id.into());
        self
    }

    /// Sets any key.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.insert(key, value);
        self
    }

    /// Whether every `(key, value)` of `filter` is present here with an equal value
    /// (see [`json_equal`]). An empty filter matches everything.
    pub fn matches(&self, filter: &Map<String, Value>) -> bool {
        filter
            .iter()
            .all(|(k, v)| self.0.get(k).is_some_and(|mine| json_equal(mine, v)))
    }
}

impl From<Map<String, Value>> for CheckpointMetadata {
    fn from(map: Map<String, Value>) -> Self {
        Self(map)
    }
}

/// Deep JSON equality as the metadata filter uses it: numbers compare by exact numeric value
/// (`5` equals `5.0`, as in PostgreSQL JSONB and Python), objects compare regardless of key
/// order, arrays element by element.
///
/// Exact means no rounding through `f64`: the integer 2^53 + 1 does not equal the float
/// 2^53, although converting it to `f64` would give that float. An integer equals a float
/// only when the float is integral and has exactly the integer's value.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn number_equal(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    // A float equals an integer when it is integral and its exact value is the integer's
    // (every integral f64 below 2^127 converts to i128 exactly).
    let float_is = |f: Option<f64>, i: i128| {
        f.is_some_and(|f| f.fract() == 0.0 && f.abs() < 2f64.powi(127) && f as i128 == i)
    };
    match (int(x), int(y)) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) => float_is(y.as_f64(), a),
        (None, Some(b)) => float_is(x.as_f64(), b),
        (None, None) => x.as_f64() == y.as_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn typed_accessors() {
        let m = CheckpointMetadata::for_step(Source::Loop, 3).with_run_id("r1");
        assert_eq!(m.source(), Some(Source::Loop));
        assert_eq!(m.step(), Some(3));
        assert_eq!(m.parents(), Some(BTreeMap::new()));
        assert_eq!(m.run_id(), Some("r1"));
    }

    #[test]
    fn filter_equality_is_numeric_and_deep() {
        let m = CheckpointMetadata::from(
            json!({"step": 5, "nested": {"a": [1, 2]}, "s": "x"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let f = |v: Value| v.as_object().unwrap().clone();
        assert!(m.matches(&f(json!({}))));
        assert!(m.matches(&f(json!({"step": 5.0}))));
        assert!(m.matches(&f(json!({"nested": {"a": [1, 2]}, "s": "x"}))));
        assert!(!m.matches(&f(json!({"nested": {"a": [1]}}))));
        assert!(!m.matches(&f(json!({"missing": null}))));
        assert!(!m.matches(&f(json!({"s": "x", "step": 6}))));
    }

    #[test]
    fn numbers_compare_exactly_at_the_edges_of_f64() {
        // Regression: 2^53 + 1 (an integer) equalled 2^53 (a float) through f64 rounding,
        // where PostgreSQL and Python say they differ.
        let two53 = 9_007_199_254_740_992_i64;
        assert!(json_equal(&json!(two53 as f64), &json!(two53)));
        assert!(!json_equal(&json!(two53 as f64), &json!(two53 + 1)));
        assert!(!json_equal(&json!(two53 + 1), &json!(two53 as f64)));
        assert!(!json_equal(&json!(two53), &json!(two53 + 1)));
        assert!(json_equal(&json!(-0.0), &json!(0)));
        assert!(json_equal(&json!(-0.0), &json!(0.0)));
        assert!(!json_equal(&json!(0.5), &json!(0)));
        assert!(json_equal(&json!(u64::MAX), &json!(u64::MAX)));
        assert!(!json_equal(&json!(u64::MAX), &json!(u64::MAX as f64)));
        assert!(json_equal(&json!(1u64 << 63), &json!((1u64 << 63) as f64)));
        assert!(!json_equal(&json!(i64::MIN), &json!(i64::MAX)));
        assert!(json_equal(&json!(i64::MIN), &json!(i64::MIN as f64)));
        assert!(!json_equal(&json!(1e300), &json!(u64::MAX)));
    }
}
