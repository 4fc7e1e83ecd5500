//! Reads: `get_tuple` (one statement) and `list` (keyset-paginated, one statement a page),
//! on the reader connections.

use std::collections::BTreeMap;
use std::sync::Arc;

use checkpoint_core::backend::{Page, legacy, paged};
use checkpoint_core::{
    BoxStream, CheckpointConfig, CheckpointTuple, DeltaChannelHistory, ListOptions, Result,
};
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::{QueryBuilder, Sqlite};

use crate::codec::{decode_delta, decode_tuples, decode_writes_rows};
use crate::core::{Inner, Warm, warm};
use crate::error::classify;
use crate::keys::{IDENTIFIERS, entry};
use crate::schema::with_now;
use crate::sql;

/// How many checkpoints one `list` page fetches.
const PAGE: usize = 64;

pub(crate) async fn get_tuple(
    inner: &Inner,
    config: &CheckpointConfig,
) -> Result<Option<CheckpointTuple>> {
    let thread = config.require_thread()?;
    let ns = &config.checkpoint_ns;
    if !IDENTIFIERS.storable(thread)
        || !IDENTIFIERS.storable(ns)
        || config
            .checkpoint_id
            .as_deref()
            .is_some_and(|id| !IDENTIFIERS.storable(id))
    {
        return Ok(None);
    }
    let query = match &config.checkpoint_id {
        Some(id) => sqlx::query(&sql::GET_BY_ID).bind(thread).bind(ns).bind(id),
        None => sqlx::query(&sql::GET_LATEST).bind(thread).bind(ns),
    };
    let mut tuples = fetch_tuples(&inner.reader, query).await?;
    legacy_sends(inner, &mut tuples).await?;
    let tuple = tuples.into_iter().next();
    if tuple.is_some() {
        refresh(inner, thread).await?;
    }
    Ok(tuple)
}

/// The tuples a tuple query returns.
async fn fetch_tuples<'q>(
    reader: &Arc<Warm>,
    query: Query<'q, Sqlite, SqliteArguments<'q>>,
) -> Result<Vec<CheckpointTuple>> {
    let rows = warm!(reader, |conn| query.fetch_all(conn)).map_err(classify)?;
    Ok(decode_tuples(&rows)?)
}

/// Checkpoints of a LangGraph format before 4 read with their parent's sends (see
/// `checkpoint_core::backend::legacy`): one query per such checkpoint, none otherwise.
async fn legacy_sends(inner: &Inner, tuples: &mut [CheckpointTuple]) -> Result<()> {
    for tuple in tuples {
        let Some(parent) = legacy::sends_parent(tuple).cloned() else {
            continue;
        };
        let rows = warm!(inner.reader, |conn| sqlx::query(sql::PARENT_SENDS)
            .bind(&parent.thread_id)
            .bind(&parent.checkpoint_ns)
            .bind(parent.checkpoint_id.as_deref())
            .fetch_all(conn))
        .map_err(classify)?;
        let writes = decode_writes_rows(&rows)?;
        legacy::apply_parent_sends(tuple, &writes);
    }
    Ok(())
}

/// With `refresh_on_read`, restarts the TTL of a thread that was read.
async fn refresh(inner: &Inner, thread: &str) -> Result<()> {
    if !inner.refresh_on_read {
        return Ok(());
    }
    let _turn = inner.write_turn().await;
    warm!(inner.writer, |conn| sqlx::query(sql::TOUCH)
        .bind(thread)
        .bind(inner.default_ttl_ms)
        .execute(conn))
    .map_err(classify)?;
    Ok(())
}

/// Which index order a list query walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One thread and namespace: by id.
    Namespace,
    /// One thread, every namespace: by (id, namespace).
    Thread,
    /// Every thread: by (id, thread, namespace).
    Global,
}

struct ListState {
    inner: Arc<Inner>,
    opts: ListOptions,
    mode: Mode,
    /// The filter's index entries; a global filtered list walks the rarest one.
    entries: Vec<String>,
    /// The entry a global filtered list walks, once chosen.
    driver: Option<String>,
    /// The last checkpoint of the previous page: `(id, thread, namespace)`.
    cursor: Option<(String, String, String)>,
}

/// The most thread ids per `list_threads` page (the first pages are smaller; see
/// [`paged_keys`](checkpoint_core::backend::paged_keys)).
const THREAD_PAGE: usize = 1000;

/// `list_threads` (`after` `None`) and `list_threads_after`: keyset pages of the primary
/// key's thread ids in byte order (expired threads skipped).
pub(crate) fn list_threads(
    inner: Arc<Inner>,
    after: Option<&str>,
) -> BoxStream<'static, Result<String>> {
    let after = after.map(str::to_owned);
    checkpoint_core::backend::paged_keys(THREAD_PAGE, after, move |after, want| {
        let inner = Arc::clone(&inner);
        async move {
            warm!(inner.reader, |conn| sqlx::query_scalar(
                sql::LIST_THREADS.as_str()
            )
            .bind(after.unwrap_or_default())
            .bind(i64::try_from(want).unwrap_or(i64::MAX))
            .fetch_all(conn))
            .map_err(classify)
        }
    })
}

pub(crate) fn list(
    inner: Arc<Inner>,
    options: ListOptions,
) -> BoxStream<'static, Result<CheckpointTuple>> {
    let unmatchable = [
        &options.thread_id,
        &options.checkpoint_ns,
        &options.checkpoint_id,
    ]
    .into_iter()
    .flatten()
    .any(|s| !IDENTIFIERS.storable(s));
    let limit = if unmatchable { Some(0) } else { options.limit };
    let mode = match (&options.thread_id, &options.checkpoint_ns) {
        (Some(_), Some(_)) => Mode::Namespace,
        (Some(_), None) => Mode::Thread,
        (None, _) => Mode::Global,
    };
    let mut entries: Vec<String> = options.filter.iter().map(|(k, v)| entry(k, v)).collect();
    entries.sort();
    entries.dedup();
    let state = ListState {
        inner,
        opts: options,
        mode,
        entries,
        driver: None,
        cursor: None,
    };
    paged(limit, PAGE, state, |mut st, want| async move {
        let page = next_page(&mut st, want).await?;
        Ok((st, page))
    })
}

/// The entry of `entries` with the fewest checkpoints, or `None` when one has none (then
/// nothing matches).
async fn rarest(inner: &Inner, entries: &[String]) -> Result<Option<String>> {
    if let [only] = entries {
        return Ok(Some(only.clone()));
    }
    let mut qb = QueryBuilder::<Sqlite>::new(
        "SELECT entry, count(*) AS n FROM checkpoint_metadata WHERE entry IN (",
    );
    let mut sep = qb.separated(", ");
    for e in entries {
        sep.push_bind(e.clone());
    }
    qb.push(") GROUP BY entry ORDER BY n");
    let counts: Vec<(String, i64)> =
        warm!(inner.reader, |conn| qb.build_query_as().fetch_all(conn)).map_err(classify)?;
    if counts.len() < entries.len() {
        return Ok(None);
    }
    Ok(counts.into_iter().next().map(|(e, _)| e))
}

async fn next_page(st: &mut ListState, want: usize) -> Result<Page> {
    let o = &st.opts;
    // A global filter walks the metadata index from its rarest entry, already in list
    // order; a thread's list walks the thread's checkpoints and checks the entries.
    let drive = st.mode == Mode::Global && !st.entries.is_empty();
    if drive && st.driver.is_none() {
        match rarest(&st.inner, &st.entries).await? {
            Some(e) => st.driver = Some(e),
            None => return Ok(Page::new(Vec::new(), true)),
        }
    }
    let t = if drive { "m" } else { "c" };
    let mut qb = QueryBuilder::<Sqlite>::new("WITH c AS MATERIALIZED (SELECT ");
    qb.push(sql::CHECKPOINT_COLUMNS);
    if drive {
        qb.push(
            " FROM checkpoint_metadata m CROSS JOIN checkpoints c ON c.thread_id = m.thread_id \
             AND c.checkpoint_ns = m.checkpoint_ns AND c.checkpoint_id = m.checkpoint_id \
             WHERE m.entry = ",
        )
        .push_bind(st.driver.clone().unwrap_or_default());
    } else {
        qb.push(" FROM checkpoints c WHERE true");
    }
    if let Some(thread) = &o.thread_id {
        qb.push(format!(" AND {t}.thread_id = "))
            .push_bind(thread.clone());
    }
    if let Some(ns) = &o.checkpoint_ns {
        qb.push(format!(" AND {t}.checkpoint_ns = "))
            .push_bind(ns.clone());
    }
    if let Some(id) = &o.checkpoint_id {
        qb.push(format!(" AND {t}.checkpoint_id = "))
            .push_bind(id.clone());
    }
    if let Some(before) = &o.before {
        qb.push(format!(" AND {t}.checkpoint_id < "))
            .push_bind(before.clone());
    }
    for e in &st.entries {
        if drive && Some(e) == st.driver.as_ref() {
            continue;
        }
        qb.push(" AND EXISTS (SELECT 1 FROM checkpoint_metadata x WHERE x.entry = ")
            .push_bind(e.clone())
            .push(
                " AND x.checkpoint_id = c.checkpoint_id AND x.thread_id = c.thread_id \
             AND x.checkpoint_ns = c.checkpoint_ns)",
            );
    }
    if let Some((id, thread, ns)) = &st.cursor {
        match st.mode {
            Mode::Namespace => {
                qb.push(format!(" AND {t}.checkpoint_id < "))
                    .push_bind(id.clone());
            }
            Mode::Thread => {
                qb.push(format!(" AND ({t}.checkpoint_id, {t}.checkpoint_ns) < ("))
                    .push_bind(id.clone())
                    .push(", ")
                    .push_bind(ns.clone())
                    .push(")");
            }
            Mode::Global => {
                qb.push(format!(
                    " AND ({t}.checkpoint_id, {t}.thread_id, {t}.checkpoint_ns) < ("
                ))
                .push_bind(id.clone())
                .push(", ")
                .push_bind(thread.clone())
                .push(", ")
                .push_bind(ns.clone())
                .push(")");
            }
        }
    }
    qb.push(" AND ").push(with_now(sql::LIVE));
    qb.push(match st.mode {
        Mode::Namespace => format!(" ORDER BY {t}.checkpoint_id DESC"),
        Mode::Thread => format!(" ORDER BY {t}.checkpoint_id DESC, {t}.checkpoint_ns DESC"),
        Mode::Global => {
            format!(" ORDER BY {t}.checkpoint_id DESC, {t}.thread_id DESC, {t}.checkpoint_ns DESC")
        }
    });
    qb.push(" LIMIT ")
        .push_bind(i64::try_from(want).unwrap_or(i64::MAX))
        .push(")");
    qb.push(sql::TUPLE_TAIL.as_str());
    let mut tuples = fetch_tuples(&st.inner.reader, qb.build()).await?;
    legacy_sends(&st.inner, &mut tuples).await?;
    if let Some(t) = tuples.last() {
        st.cursor = Some((
            t.checkpoint.id.clone(),
            t.config.thread_id.clone(),
            t.config.checkpoint_ns.clone(),
        ));
    }
    let last = tuples.len() < want;
    if let (Some(thread), Some(_)) = (&o.thread_id, tuples.first()) {
        refresh(&st.inner, thread).await?;
    }
    // Index entries over-approximate (digests, integers beyond 2^53): the exact conditions
    // decide.
    let admitted = tuples
        .into_iter()
        .filter(|t| {
            o.admits(
                &t.config.thread_id,
                &t.config.checkpoint_ns,
                &t.checkpoint.id,
                &t.metadata,
            )
        })
        .collect();
    Ok(Page::new(admitted, last))
}

pub(crate) async fn delta_channel_history(
    inner: &Inner,
    config: &CheckpointConfig,
    channels: &[String],
) -> Result<BTreeMap<String, DeltaChannelHistory>> {
    let thread = config.require_thread()?;
    let mut out: BTreeMap<String, DeltaChannelHistory> = checkpoint_core::delta::empty(channels);
    let ns = &config.checkpoint_ns;
    let id = config.checkpoint_id.as_deref();
    if out.is_empty()
        || !IDENTIFIERS.storable(thread)
        || !IDENTIFIERS.storable(ns)
        || id.is_some_and(|id| !IDENTIFIERS.storable(id))
    {
        return Ok(out);
    }
    let wanted = serde_json::Value::from(out.keys().cloned().collect::<Vec<_>>()).to_string();
    let rows = warm!(inner.reader, |conn| sqlx::query(&sql::DELTA_HISTORY)
        .bind(thread)
        .bind(ns)
        .bind(id)
        .bind(wanted)
        .fetch_all(conn))
    .map_err(classify)?;
    decode_delta(&rows, &mut out)?;
    Ok(out)
}
