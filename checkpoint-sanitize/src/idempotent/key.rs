//! Idempotency keys.

use std::fmt;

use checkpoint_core::{CheckpointConfig, Error, Result};

/// The key of one side effect in the idempotency ledger.
///
/// Derived keys are built from `(thread, namespace, checkpoint id, task id, effect name)`:
/// the same task of the same step of the same thread gets the same key on every retry,
/// replay and resume, and nothing else does. Each component is length-prefixed, so no
/// choice of identifiers makes two different tuples collide.
///
/// ```
/// use checkpoint_core::CheckpointConfig;
/// use checkpoint_sanitize::EffectKey;
/// let at = CheckpointConfig::new("case:42").with_checkpoint_id("1f0a");
/// let a = EffectKey::for_task(&at, "task-7", "send_email")?;
/// assert_eq!(a, EffectKey::for_task(&at, "task-7", "send_email")?);
/// assert_ne!(a, EffectKey::for_task(&at, "task-7", "upsert_proposal")?);
/// assert_eq!(EffectKey::new("stripe:pi_123")?.as_str(), "stripe:pi_123");
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectKey(String);

impl EffectKey {
    /// A key given by the caller (for example an id the downstream system already uses).
    /// An empty key is [`Error::InvalidInput`].
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if key.is_empty() {
            return Err(Error::invalid("an effect key is empty"));
        }
        Ok(Self(key))
    }

    /// The key of effect `effect` of task `task_id` at checkpoint `checkpoint_id` of
    /// `(thread_id, checkpoint_ns)`.
    pub fn derive(
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        task_id: &str,
        effect: &str,
    ) -> Self {
        let mut key = String::from("effect/v1");
        for part in [thread_id, checkpoint_ns, checkpoint_id, task_id, effect] {
            key.push('/');
            key.push_str(&part.len().to_string());
            key.push(':');
            key.push_str(part);
        }
        Self(key)
    }

    /// [`derive`](Self::derive) from a config that addresses a checkpoint (thread and
    /// checkpoint id required).
    pub fn for_task(config: &CheckpointConfig, task_id: &str, effect: &str) -> Result<Self> {
        let checkpoint_id = config.require_checkpoint_id()?;
        Ok(Self::derive(
            &config.thread_id,
            &config.checkpoint_ns,
            checkpoint_id,
            task_id,
            effect,
        ))
    }

    /// The key of an effect that happens once per checkpoint (seed 000: present the question
    /// of the interrupt stored in that checkpoint).
    pub fn for_checkpoint(config: &CheckpointConfig, effect: &str) -> Result<Self> {
        Self::for_task(config, "", effect)
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_do_not_collide_across_component_boundaries() {
        let a = EffectKey::derive("a/1:b", "", "c", "t", "e");
        let b = EffectKey::derive("a", "1:b", "c", "t", "e");
        assert_ne!(a, b);
        assert!(EffectKey::new("").is_err());
        assert!(EffectKey::for_task(&CheckpointConfig::new("t"), "x", "y").is_err());
    }
}
