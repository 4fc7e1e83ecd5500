//! The argument checks of the contract, and what a backend can store as an identifier.

use std::time::Duration;

use crate::{
    ChannelVersions, Checkpoint, CheckpointConfig, Error, PutWritesOptions, Result, TypedValue,
};

/// Checks the arguments of [`Saver::put`](crate::Saver::put) as the contract requires:
/// a thread id, a checkpoint id greater than its parent's, and `new_versions` that agree
/// with `channel_versions`. Backends call it (or [`Identifiers::check_put`]) first.
pub fn validate_put(
    config: &CheckpointConfig,
    checkpoint: &Checkpoint,
    new_versions: &ChannelVersions,
) -> Result<()> {
    config.require_thread()?;
    if checkpoint.id.is_empty() {
        return Err(Error::invalid("checkpoint has an empty id"));
    }
    if let Some(parent) = config.checkpoint_id.as_deref()
        && parent >= checkpoint.id.as_str()
    {
        return Err(Error::invalid(format!(
            "checkpoint id {:?} must be greater than its parent's {:?}{}",
            checkpoint.id,
            parent,
            clock_behind(&checkpoint.id, parent)
        )));
    }
    for (channel, version) in new_versions {
        match checkpoint.channel_versions.get(channel) {
            Some(v) if v == version => {}
            other => {
                return Err(Error::invalid(format!(
                    "new_versions[{channel:?}] = {version} but channel_versions has {other:?}"
                )));
            }
        }
    }
    Ok(())
}

/// Why a child's id can sort below its parent's when both are time-ordered ids: the clock
/// of the process that made the child is behind the one that made the parent (another
/// host, or a clock stepped back). Empty when the ids carry no time.
fn clock_behind(child: &str, parent: &str) -> String {
    match (
        crate::checkpoint_id_unix_millis(child),
        crate::checkpoint_id_unix_millis(parent),
    ) {
        (Some(child), Some(parent)) if child <= parent => format!(
            "; both are time-ordered ids and the child's time is {} ms before its parent's: \
             the clock of the process that made it is behind the clock of the one that made \
             the parent (keep hosts' clocks in sync; a retry once this process's clock has \
             passed the parent's time succeeds)",
            parent - child
        ),
        _ => String::new(),
    }
}

/// Checks the arguments of [`Saver::put_writes`](crate::Saver::put_writes) as the contract
/// requires: the config must carry a thread id and a checkpoint id (also for an empty
/// `writes`). Returns the checkpoint id, or `None` when `writes` is empty and the call is a
/// no-op.
pub fn validate_put_writes<'c>(
    config: &'c CheckpointConfig,
    writes: &[(String, TypedValue)],
) -> Result<Option<&'c str>> {
    let checkpoint_id = config.require_checkpoint_id()?;
    Ok((!writes.is_empty()).then_some(checkpoint_id))
}

/// Checks the arguments of [`Saver::acquire_lease`](crate::Saver::acquire_lease) as the
/// contract requires.
pub fn validate_lease_request(thread_id: &str, holder: &str, ttl: Duration) -> Result<()> {
    if thread_id.is_empty() {
        return Err(Error::invalid("lease on an empty thread id"));
    }
    if holder.is_empty() {
        return Err(Error::invalid("lease holder is empty"));
    }
    if ttl.is_zero() {
        return Err(Error::invalid("lease ttl is zero"));
    }
    Ok(())
}

/// Checks the arguments of [`Saver::claim`](crate::Saver::claim) as the contract requires.
pub fn validate_claim_request(key: &str, ttl: Duration) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("ledger key is empty"));
    }
    if ttl.is_zero() {
        return Err(Error::invalid("claim ttl is zero"));
    }
    Ok(())
}

/// What a backend can store as an identifier (thread id, namespace, checkpoint id, channel,
/// version, task id, task path, lease holder, ledger key), and the contract's argument
/// checks under those limits.
///
/// The contract says an identifier the backend cannot store is rejected with
/// [`Error::InvalidInput`] before anything is written, and that a read naming one finds
/// nothing: writes call the `check_*` methods, reads ask [`storable`](Self::storable).
///
/// ```
/// use checkpoint_core::backend::Identifiers;
/// let pg = Identifiers::new("PostgreSQL", 512).without_nul();
/// assert!(pg.check("thread_id", "support-chat-42").is_ok());
/// assert!(pg.check("thread_id", "a\0b").is_err());
/// assert!(!pg.storable(&"x".repeat(513)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identifiers {
    backend: &'static str,
    max_bytes: usize,
    nul: bool,
}

impl Identifiers {
    /// Identifiers of at most `max_bytes` bytes, NUL allowed, for the named backend (used
    /// in error messages).
    pub const fn new(backend: &'static str, max_bytes: usize) -> Self {
        Self {
            backend,
            max_bytes,
            nul: true,
        }
    }

    /// Any string at all.
    pub const fn any(backend: &'static str) -> Self {
        Self::new(backend, usize::MAX)
    }

    /// Rejects identifiers that contain NUL (for stores whose text type cannot hold it).
    pub const fn without_nul(mut self) -> Self {
        self.nul = false;
        self
    }

    /// The longest identifier accepted, in bytes.
    pub const fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Whether `value` can be stored (a read naming anything else finds nothing).
    pub fn storable(&self, value: &str) -> bool {
        value.len() <= self.max_bytes && (self.nul || !value.contains('\0'))
    }

    /// Rejects `value` with [`Error::InvalidInput`] naming `what` when it cannot be stored.
    pub fn check(&self, what: &str, value: &str) -> Result<()> {
        if value.len() > self.max_bytes {
            return Err(Error::invalid(format!(
                "{what} is {} bytes long; the {} saver stores identifiers of at most {} bytes",
                value.len(),
                self.backend,
                self.max_bytes
            )));
        }
        if !self.nul && value.contains('\0') {
            return Err(Error::invalid(format!(
                "{what} contains a NUL character, which the {} saver cannot store",
                self.backend
            )));
        }
        Ok(())
    }

    /// [`validate_put`], then every identifier the put stores: thread id, namespace,
    /// checkpoint id, parent id, and the name and version of each channel in
    /// `new_versions`.
    pub fn check_put(
        &self,
        config: &CheckpointConfig,
        checkpoint: &Checkpoint,
        new_versions: &ChannelVersions,
    ) -> Result<()> {
        validate_put(config, checkpoint, new_versions)?;
        self.check("thread_id", &config.thread_id)?;
        self.check("checkpoint_ns", &config.checkpoint_ns)?;
        self.check("checkpoint id", &checkpoint.id)?;
        if let Some(parent) = &config.checkpoint_id {
            self.check("parent checkpoint id", parent)?;
        }
        for (channel, version) in new_versions {
            self.check("channel name", channel)?;
            if let crate::ChannelVersion::Str(v) = version {
                self.check("channel version", v)?;
            }
        }
        Ok(())
    }

    /// [`validate_put_writes`], then every identifier the call stores: thread id,
    /// namespace, checkpoint id, task id, task path and each write's channel. Returns the
    /// checkpoint id, or `None` when `writes` is empty (a no-op).
    pub fn check_put_writes<'c>(
        &self,
        config: &'c CheckpointConfig,
        writes: &[(String, TypedValue)],
        task_id: &str,
        options: &PutWritesOptions,
    ) -> Result<Option<&'c str>> {
        let Some(checkpoint_id) = validate_put_writes(config, writes)? else {
            return Ok(None);
        };
        self.check("thread_id", &config.thread_id)?;
        self.check("checkpoint_ns", &config.checkpoint_ns)?;
        self.check("checkpoint id", checkpoint_id)?;
        self.check("task_id", task_id)?;
        self.check("task_path", &options.task_path)?;
        for (channel, _) in writes {
            self.check("write channel", channel)?;
        }
        Ok(Some(checkpoint_id))
    }

    /// [`validate_lease_request`], then the thread id and holder.
    pub fn check_lease(&self, thread_id: &str, holder: &str, ttl: Duration) -> Result<()> {
        validate_lease_request(thread_id, holder, ttl)?;
        self.check("thread_id", thread_id)?;
        self.check("lease holder", holder)
    }

    /// [`validate_claim_request`], then the key.
    pub fn check_claim(&self, key: &str, ttl: Duration) -> Result<()> {
        validate_claim_request(key, ttl)?;
        self.check("ledger key", key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PutWritesOptions;

    #[test]
    fn limits_and_nul() {
        let ids = Identifiers::new("test", 4).without_nul();
        assert!(ids.check("x", "abcd").is_ok());
        assert!(matches!(
            ids.check("x", "abcde"),
            Err(Error::InvalidInput { .. })
        ));
        assert!(ids.check("x", "a\0").is_err());
        assert!(
            Identifiers::any("test")
                .check("x", &"\0".repeat(10_000))
                .is_ok()
        );
    }

    #[test]
    fn a_child_made_by_a_clock_behind_its_parents_is_refused_saying_so() {
        let parent = crate::new_checkpoint_id();
        // The same id 30 s earlier: what a host whose clock is 30 s behind makes next.
        let millis = crate::checkpoint_id_unix_millis(&parent).unwrap();
        let ticks = (millis - 30_000) * 10_000 + 0x01B2_1DD2_1381_4000;
        let earlier = uuid::Builder::from_sorted_gregorian_timestamp(ticks, 1, &[1; 6])
            .into_uuid()
            .hyphenated()
            .to_string();
        let config = CheckpointConfig::new("t").with_checkpoint_id(&parent);
        let mut child = Checkpoint::new();
        child.id = earlier;
        let err = validate_put(&config, &child, &ChannelVersions::new()).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("30000 ms before its parent's"),
            "{message}"
        );
        assert!(message.contains("clock"), "{message}");

        // Ids that carry no time are refused without the diagnosis.
        let config = CheckpointConfig::new("t").with_checkpoint_id("b");
        child.id = "a".into();
        let message = validate_put(&config, &child, &ChannelVersions::new())
            .unwrap_err()
            .to_string();
        assert!(!message.contains("clock"), "{message}");
    }

    #[test]
    fn put_writes_checks_the_config_before_the_writes() {
        let ids = Identifiers::any("test");
        let opts = PutWritesOptions::new();
        let no_id = CheckpointConfig::new("t");
        assert!(ids.check_put_writes(&no_id, &[], "task", &opts).is_err());
        let with_id = no_id.with_checkpoint_id("c1");
        assert_eq!(
            ids.check_put_writes(&with_id, &[], "task", &opts).unwrap(),
            None
        );
        let writes = [("ch".to_owned(), TypedValue::null())];
        assert_eq!(
            ids.check_put_writes(&with_id, &writes, "task", &opts)
                .unwrap(),
            Some("c1")
        );
        let tight = Identifiers::new("test", 3);
        assert!(
            tight
                .check_put_writes(&with_id, &writes, "task", &opts)
                .is_err()
        );
    }
}
