//! The checkpoint: a snapshot of a graph's channels at one super-step.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{
    ChannelVersion, ChannelVersions, Error, Result, Serializer, TypedValue, new_checkpoint_id,
};

/// The checkpoint format version written by this library (LangGraph's current `v`).
pub const CHECKPOINT_FORMAT_VERSION: u32 = 4;

/// A snapshot of a graph's state, with LangGraph's fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version ([`CHECKPOINT_FORMAT_VERSION`] for new checkpoints).
    pub v: u32,
    /// Time-ordered id (see [`new_checkpoint_id`]); unique within its thread and namespace.
    pub id: String,
    /// Creation time, ISO-8601 in UTC.
    pub ts: String,
    /// Channel name → serialized value. Only channels that have a value appear.
    pub channel_values: BTreeMap<String, TypedValue>,
    /// Channel name → current version.
    pub channel_versions: ChannelVersions,
    /// Node name → the channel versions that node has seen.
    pub versions_seen: BTreeMap<String, ChannelVersions>,
    /// Channels updated in the step that produced this checkpoint, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_channels: Option<Vec<String>>,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Self::new()
    }
}

impl Checkpoint {
    /// An empty checkpoint with a fresh id and the current time.
    pub fn new() -> Self {
        Self {
            v: CHECKPOINT_FORMAT_VERSION,
            id: new_checkpoint_id(),
            ts: now_iso8601(),
            channel_values: BTreeMap::new(),
            channel_versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            updated_channels: None,
        }
    }

    /// A successor of this checkpoint: same values and versions, a fresh id and time, no
    /// updated channels. Use [`set`](Self::set) on it to record the next step.
    pub fn successor(&self) -> Self {
        Self {
            id: new_checkpoint_id(),
            ts: now_iso8601(),
            updated_channels: None,
            ..self.clone()
        }
    }

    /// Stores `value` (msgpack) in `channel` and bumps the channel's version. Returns the new
    /// version, which the caller passes to [`Saver::put`](crate::Saver::put) in
    /// `new_versions`.
    pub fn set<T: Serialize + ?Sized>(
        &mut self,
        channel: &str,
        value: &T,
    ) -> Result<ChannelVersion> {
        let encoded = Serializer::default().encode(value)?;
        Ok(self.set_typed(channel, encoded))
    }

    /// Stores an already serialized value in `channel` and bumps the channel's version.
    pub fn set_typed(&mut self, channel: &str, value: TypedValue) -> ChannelVersion {
        let next = ChannelVersion::next(self.channel_versions.get(channel));
        self.channel_values.insert(channel.to_owned(), value);
        self.channel_versions
            .insert(channel.to_owned(), next.clone());
        let updated = self.updated_channels.get_or_insert_with(Vec::new);
        if !updated.iter().any(|c| c == channel) {
            updated.push(channel.to_owned());
            updated.sort();
        }
        next
    }

    /// Decodes the value of `channel`; `Ok(None)` when the channel has no value.
    pub fn get<T: DeserializeOwned>(&self, channel: &str) -> Result<Option<T>> {
        self.channel_values
            .get(channel)
            .map(TypedValue::decode)
            .transpose()
    }

    /// Decodes the value of `channel`, failing with [`Error::NotFound`] when it has none.
    pub fn require<T: DeserializeOwned>(&self, channel: &str) -> Result<T> {
        self.get(channel)?.ok_or_else(|| Error::NotFound {
            what: format!("channel {channel:?} has no value"),
        })
    }
}

/// The current UTC time as LangGraph writes `ts`: `2026-11-21T19:14:18.530587+00:00`.
pub fn now_iso8601() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_bumps_versions_and_records_updates() {
        let mut c = Checkpoint::new();
        let v1 = c.set("messages", &vec!["hi"]).unwrap();
        let v2 = c.set("messages", &vec!["hi", "there"]).unwrap();
        assert!(v2 > v1);
        assert_eq!(c.channel_versions["messages"], v2);
        assert_eq!(
            c.updated_channels.as_deref(),
            Some(&["messages".to_owned()][..])
        );
        assert_eq!(
            c.get::<Vec<String>>("messages").unwrap().unwrap(),
            ["hi", "there"]
        );
        assert!(c.get::<String>("nope").unwrap().is_none());
        assert!(matches!(
            c.require::<String>("nope"),
            Err(Error::NotFound { .. })
        ));
        let next = c.successor();
        assert!(next.id > c.id);
        assert_eq!(next.channel_values, c.channel_values);
    }

    #[test]
    fn ts_has_langgraph_shape() {
        let ts = now_iso8601();
        assert_eq!(ts.len(), "2026-11-21T19:14:18.530587+00:00".len(), "{ts}");
        assert!(ts.ends_with("+00:00"));
    }
}
