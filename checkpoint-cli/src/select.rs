//! Which threads a command works on: `--thread ID`, `--threads GLOB` and `--since TIME`, and
//! the per-thread summaries (checkpoint count, latest checkpoint) the global listing yields.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_core::{CheckpointTuple, ListOptions, Saver, checkpoint_id_unix_millis};
use futures::TryStreamExt;
use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::CliError;

/// A thread selection. Empty (no id, no pattern, no time) selects every thread.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    ids: Vec<String>,
    globs: Option<GlobSet>,
    since_millis: Option<u64>,
}

impl Selection {
    /// Every thread.
    pub fn all() -> Self {
        Self::default()
    }

    /// Threads named by `ids` or matching one of `patterns` (shell globs: `*`, `?`, `[abc]`,
    /// `{a,b}`; `*` also matches `/` and `:`), or every thread when both are empty; of those,
    /// with `since`, only threads whose latest checkpoint is at or after that time. A bad
    /// pattern or time is [`CliError::Usage`].
    pub fn new(
        ids: Vec<String>,
        patterns: Vec<String>,
        since: Option<&str>,
    ) -> Result<Self, CliError> {
        let globs = if patterns.is_empty() {
            None
        } else {
            let mut set = GlobSetBuilder::new();
            for p in &patterns {
                let glob = Glob::new(p)
                    .map_err(|e| CliError::Usage(format!("bad thread pattern {p:?}: {e}")))?;
                set.add(glob);
            }
            Some(
                set.build()
                    .map_err(|e| CliError::Usage(format!("bad thread patterns: {e}")))?,
            )
        };
        let since_millis = since
            .map(|s| parse_since(s, SystemTime::now()))
            .transpose()?;
        Ok(Self {
            ids,
            globs,
            since_millis,
        })
    }

    /// Whether the selection names its threads (only `--thread`), so the store's listing is
    /// not needed to find them.
    fn named_only(&self) -> bool {
        !self.ids.is_empty() && self.globs.is_none()
    }

    fn matches_id(&self, thread: &str) -> bool {
        if self.ids.is_empty() && self.globs.is_none() {
            return true;
        }
        self.ids.iter().any(|id| id == thread)
            || self.globs.as_ref().is_some_and(|g| g.is_match(thread))
    }

    fn recent_enough(&self, latest: &ThreadSummary) -> bool {
        match self.since_millis {
            None => true,
            Some(since) => latest.latest_millis().is_some_and(|t| t >= since),
        }
    }
}

/// A thread as the listing found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSummary {
    /// The thread id.
    pub thread_id: String,
    /// Its checkpoints in all namespaces.
    pub checkpoints: u64,
    /// Its most recent checkpoint id (the greatest; ids sort by time).
    pub latest_id: String,
    /// That checkpoint's time stamp as stored.
    pub latest_ts: String,
}

impl ThreadSummary {
    fn new(thread_id: String) -> Self {
        Self {
            thread_id,
            checkpoints: 0,
            latest_id: String::new(),
            latest_ts: String::new(),
        }
    }

    fn add(&mut self, t: &CheckpointTuple) {
        self.checkpoints += 1;
        if t.checkpoint.id > self.latest_id {
            self.latest_id = t.checkpoint.id.clone();
            self.latest_ts = t.checkpoint.ts.clone();
        }
    }

    /// The latest checkpoint's time in milliseconds since the epoch: its time stamp, or the
    /// time in its id when the stamp is not RFC 3339.
    pub fn latest_millis(&self) -> Option<u64> {
        chrono::DateTime::parse_from_rfc3339(&self.latest_ts)
            .ok()
            .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
            .or_else(|| checkpoint_id_unix_millis(&self.latest_id))
    }
}

/// Every thread of the store, one summary each, most recent first (ties by id). Reads the
/// global listing once.
pub async fn summaries(saver: &dyn Saver) -> Result<Vec<ThreadSummary>, CliError> {
    let mut seen: HashMap<String, ThreadSummary> = HashMap::new();
    let mut stream = saver.list(ListOptions::new());
    while let Some(t) = stream.try_next().await? {
        seen.entry(t.config.thread_id.clone())
            .or_insert_with(|| ThreadSummary::new(t.config.thread_id.clone()))
            .add(&t);
    }
    let mut rows: Vec<ThreadSummary> = seen.into_values().collect();
    sort_recent_first(&mut rows);
    Ok(rows)
}

/// Most recent first (ties by thread id).
fn sort_recent_first(rows: &mut [ThreadSummary]) {
    rows.sort_by(|a, b| {
        b.latest_id
            .cmp(&a.latest_id)
            .then(a.thread_id.cmp(&b.thread_id))
    });
}

/// The selected threads, most recent first. Threads named with `--thread` alone are read one
/// by one (the store's listing is not scanned); a named thread with no checkpoint is not
/// returned.
pub async fn select(
    saver: &dyn Saver,
    selection: &Selection,
) -> Result<Vec<ThreadSummary>, CliError> {
    let mut rows = if selection.named_only() {
        let mut rows = Vec::new();
        for id in &selection.ids {
            let mut summary = ThreadSummary::new(id.clone());
            let mut stream = saver.list(ListOptions::thread(id));
            while let Some(t) = stream.try_next().await? {
                summary.add(&t);
            }
            if summary.checkpoints > 0 && !rows.iter().any(|r: &ThreadSummary| r.thread_id == *id) {
                rows.push(summary);
            }
        }
        sort_recent_first(&mut rows);
        rows
    } else {
        summaries(saver).await?
    };
    rows.retain(|r| selection.matches_id(&r.thread_id) && selection.recent_enough(r));
    Ok(rows)
}

/// The ids of the selected threads, without counting their checkpoints: those named with
/// `--thread` alone as given (nothing is read); otherwise the store's threads
/// ([`Saver::list_threads`], which reads no checkpoint on the workspace's backends) that
/// match, and with `--since` only those whose latest checkpoint (one `list` call with limit
/// 1 each) is recent enough.
pub async fn select_ids(saver: &dyn Saver, selection: &Selection) -> Result<Vec<String>, CliError> {
    let mut seen = std::collections::HashSet::new();
    let candidates: Vec<String> = if selection.named_only() {
        selection
            .ids
            .iter()
            .filter(|id| seen.insert((*id).clone()))
            .cloned()
            .collect()
    } else {
        saver
            .list_threads()
            .try_filter(|id| futures::future::ready(selection.matches_id(id)))
            .try_collect()
            .await?
    };
    if selection.since_millis.is_none() {
        return Ok(candidates);
    }
    let mut out = Vec::new();
    for id in candidates {
        let mut summary = ThreadSummary::new(id.clone());
        let mut latest = saver.list(ListOptions::thread(&id).limit(1));
        if let Some(t) = latest.try_next().await? {
            summary.add(&t);
            if selection.recent_enough(&summary) {
                out.push(id);
            }
        }
    }
    Ok(out)
}

/// `--since`: an RFC 3339 time (`2026-11-24T08:00:00Z`), a date (`2026-11-24`, midnight UTC)
/// or an age before `now` (`90s`, `30m`, `12h`, `7d`), as milliseconds since the epoch.
pub fn parse_since(text: &str, now: SystemTime) -> Result<u64, CliError> {
    let bad = || {
        CliError::Usage(format!(
            "bad --since {text:?}: expected an RFC 3339 time (2026-11-24T08:00:00Z), a date \
             (2026-11-24) or an age (90s, 30m, 12h, 7d)"
        ))
    };
    let text = text.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return u64::try_from(t.timestamp_millis()).map_err(|_| bad());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let t = d.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc();
        return u64::try_from(t.timestamp_millis()).map_err(|_| bad());
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => None,
    }
    .ok_or_else(bad)?;
    let since = now
        .checked_sub(Duration::from_secs(seconds))
        .unwrap_or(UNIX_EPOCH);
    let millis = since
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    u64::try_from(millis).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_times_dates_and_ages() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(
            parse_since("2026-11-24T08:00:00Z", now).unwrap(),
            1_795_478_400_000 + 8 * 3_600_000
        );
        assert_eq!(
            parse_since("2026-11-24T09:00:00+01:00", now).unwrap(),
            1_795_478_400_000 + 8 * 3_600_000
        );
        assert_eq!(parse_since("2026-11-24", now).unwrap(), 1_795_478_400_000);
        assert_eq!(parse_since("90s", now).unwrap(), 1_800_000_000_000 - 90_000);
        assert_eq!(
            parse_since("2h", now).unwrap(),
            1_800_000_000_000 - 7_200_000
        );
        assert_eq!(
            parse_since("7d", now).unwrap(),
            1_800_000_000_000 - 604_800_000
        );
        for bad in [
            "",
            "yesterday",
            "5w",
            "h",
            "-3d",
            "99999999999999999999d",
            "2026-13-01",
        ] {
            assert!(
                matches!(parse_since(bad, now), Err(CliError::Usage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn patterns_match_whole_ids_and_bad_ones_are_usage_errors() {
        let s = Selection::new(
            vec!["exact".into()],
            vec!["user-*".into(), "t[0-9]".into()],
            None,
        )
        .unwrap();
        for id in ["exact", "user-1", "user-a/b:c", "t7"] {
            assert!(s.matches_id(id), "{id}");
        }
        for id in ["exact2", "xuser-1", "t10", ""] {
            assert!(!s.matches_id(id), "{id}");
        }
        assert!(Selection::all().matches_id("anything"));
        assert!(matches!(
            Selection::new(vec![], vec!["a[".into()], None),
            Err(CliError::Usage(_))
        ));
    }

    #[test]
    fn a_thread_time_comes_from_its_stamp_or_its_id() {
        let mut s = ThreadSummary::new("t".into());
        s.latest_ts = "2024-07-31T20:14:19.804150+00:00".into();
        assert_eq!(s.latest_millis(), Some(1_722_456_859_804));
        s.latest_ts = "not a time".into();
        s.latest_id = checkpoint_core::new_checkpoint_id();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(s.latest_millis().unwrap().abs_diff(now) < 60_000);
        s.latest_id = "1".into();
        assert_eq!(s.latest_millis(), None);
    }
}
