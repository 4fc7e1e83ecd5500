//! Python ↔ model conversions at the boundary.
//!
//! The Python half serializes every value with the saver's `serde` (`dumps_typed`) before it
//! crosses, so values cross as `(type, bytes)` pairs and are stored exactly as LangGraph
//! stores them; metadata crosses as JSON text. Everything else (ids, versions, the
//! checkpoint's bookkeeping) is converted here field by field, with a `ValueError` or
//! `TypeError` naming the field for anything malformed.

use std::collections::BTreeMap;

use checkpoint_core::{
    Bytes, ChannelVersion, ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple,
    PendingWrite, TypedValue, ValueType,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

/// A `(type, bytes)` pair from `serde.dumps_typed`.
pub(crate) fn typed_value(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<TypedValue> {
    let pair = obj
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: expected a (type, bytes) tuple")))?;
    if pair.len() != 2 {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected a (type, bytes) tuple of 2, got {}",
            pair.len()
        )));
    }
    let tag: String = pair.get_item(0)?.extract()?;
    let item = pair.get_item(1)?;
    let bytes = item
        .cast::<PyBytes>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: the payload must be bytes")))?;
    Ok(TypedValue::new(
        ValueType::from(tag.as_str()),
        Bytes::copy_from_slice(bytes.as_bytes()),
    ))
}

/// A stored value as the `(type, bytes)` pair `serde.loads_typed` takes.
pub(crate) fn typed_to_py<'py>(py: Python<'py>, v: &TypedValue) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            PyString::new(py, v.type_tag.as_str()).into_any(),
            PyBytes::new(py, &v.bytes).into_any(),
        ],
    )
}

/// A channel version: a non-negative int or a string (LangGraph's two kinds).
pub(crate) fn version(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<ChannelVersion> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(ChannelVersion::Str(s.to_str()?.to_owned()));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<u64>().map(ChannelVersion::Int).map_err(|_| {
            PyValueError::new_err(format!("{what}: a version must be a non-negative int"))
        });
    }
    Err(PyTypeError::new_err(format!(
        "{what}: a channel version is an int or a str, not {}",
        obj.get_type().name()?
    )))
}

fn version_to_py<'py>(py: Python<'py>, v: &ChannelVersion) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        ChannelVersion::Int(n) => n.into_pyobject(py)?.into_any(),
        ChannelVersion::Str(s) => PyString::new(py, s).into_any(),
    })
}

/// A `{channel: version}` dict.
pub(crate) fn versions(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<ChannelVersions> {
    let dict = obj
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: expected a dict")))?;
    let mut out = ChannelVersions::new();
    for (k, v) in dict.iter() {
        let channel: String = k.extract()?;
        let version = version(what, &v)?;
        out.insert(channel, version);
    }
    Ok(out)
}

fn versions_to_py<'py>(py: Python<'py>, vs: &ChannelVersions) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in vs {
        dict.set_item(k, version_to_py(py, v)?)?;
    }
    Ok(dict)
}

fn required<'py>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    dict.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("checkpoint: missing key {key:?}")))
}

/// A checkpoint dict whose `channel_values` are already `(type, bytes)` pairs.
pub(crate) fn checkpoint(obj: &Bound<'_, PyAny>) -> PyResult<Checkpoint> {
    let dict = obj
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("checkpoint: expected a dict"))?;
    let mut channel_values = BTreeMap::new();
    let values = required(dict, "channel_values")?;
    let values = values
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("checkpoint.channel_values: expected a dict"))?;
    for (k, v) in values.iter() {
        let channel: String = k.extract()?;
        let value = typed_value(&format!("channel_values[{channel:?}]"), &v)?;
        channel_values.insert(channel, value);
    }
    let mut versions_seen = BTreeMap::new();
    let seen = required(dict, "versions_seen")?;
    let seen = seen
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("checkpoint.versions_seen: expected a dict"))?;
    for (k, v) in seen.iter() {
        let node: String = k.extract()?;
        versions_seen.insert(node, versions("checkpoint.versions_seen", &v)?);
    }
    let updated_channels = match dict.get_item("updated_channels")? {
        Some(u) if !u.is_none() => Some(u.extract::<Vec<String>>()?),
        _ => None,
    };
    Ok(Checkpoint {
        v: required(dict, "v")?.extract()?,
        id: required(dict, "id")?.extract()?,
        ts: required(dict, "ts")?.extract()?,
        channel_values,
        channel_versions: versions(
            "checkpoint.channel_versions",
            &required(dict, "channel_versions")?,
        )?,
        versions_seen,
        updated_channels,
    })
}

/// Metadata as JSON text (an object).
pub(crate) fn metadata(json: &str) -> PyResult<CheckpointMetadata> {
    serde_json::from_str(json)
        .map_err(|e| PyValueError::new_err(format!("metadata: not a JSON object: {e}")))
}

/// A JSON object filter for `list`.
pub(crate) fn filter(json: Option<&str>) -> PyResult<serde_json::Map<String, serde_json::Value>> {
    match json {
        None => Ok(serde_json::Map::new()),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| PyValueError::new_err(format!("filter: not a JSON object: {e}"))),
    }
}

fn writes_to_py<'py>(py: Python<'py>, writes: &[PendingWrite]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for w in writes {
        list.append((
            w.task_id.as_str(),
            w.channel.as_str(),
            typed_to_py(py, &w.value)?,
        ))?;
    }
    Ok(list)
}

/// A read result: `(thread_id, checkpoint_ns, checkpoint_id, parent_id, checkpoint,
/// metadata_json, pending_writes)`, the checkpoint's `channel_values` and each write's value
/// as `(type, bytes)` pairs for `serde.loads_typed`.
pub(crate) fn tuple_to_py(py: Python<'_>, t: &CheckpointTuple) -> PyResult<Py<PyAny>> {
    let c = &t.checkpoint;
    let checkpoint = PyDict::new(py);
    checkpoint.set_item("v", c.v)?;
    checkpoint.set_item("id", &c.id)?;
    checkpoint.set_item("ts", &c.ts)?;
    let values = PyDict::new(py);
    for (k, v) in &c.channel_values {
        values.set_item(k, typed_to_py(py, v)?)?;
    }
    checkpoint.set_item("channel_values", values)?;
    checkpoint.set_item("channel_versions", versions_to_py(py, &c.channel_versions)?)?;
    let seen = PyDict::new(py);
    for (node, vs) in &c.versions_seen {
        seen.set_item(node, versions_to_py(py, vs)?)?;
    }
    checkpoint.set_item("versions_seen", seen)?;
    checkpoint.set_item("updated_channels", c.updated_channels.as_deref())?;
    let metadata = serde_json::to_string(&t.metadata)
        .map_err(|e| PyValueError::new_err(format!("metadata: {e}")))?;
    let tuple = (
        t.config.thread_id.as_str(),
        t.config.checkpoint_ns.as_str(),
        t.config.checkpoint_id.as_deref(),
        t.parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.as_deref()),
        checkpoint,
        metadata,
        writes_to_py(py, &t.pending_writes)?,
    );
    Ok(tuple.into_pyobject(py)?.into_any().unbind())
}

/// A delta history: `{channel: (seed or None, [(task_id, channel, value), ...])}`.
pub(crate) fn delta_to_py(
    py: Python<'_>,
    history: &BTreeMap<String, checkpoint_core::DeltaChannelHistory>,
) -> PyResult<Py<PyAny>> {
    let out = PyDict::new(py);
    for (channel, h) in history {
        let seed = match &h.seed {
            Some(v) => typed_to_py(py, v)?.into_any(),
            None => py.None().into_bound(py),
        };
        out.set_item(channel, (seed, writes_to_py(py, &h.writes)?))?;
    }
    Ok(out.into_any().unbind())
}
