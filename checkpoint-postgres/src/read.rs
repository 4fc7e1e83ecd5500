//! Reads: `get_tuple` (one statement) and `list` (keyset-paginated, one statement a page).

use std::collections::BTreeMap;

use checkpoint_core::backend::{Page, legacy, paged};
use checkpoint_core::{
    BoxStream, CheckpointConfig, CheckpointTuple, DeltaChannelHistory, Error, ListOptions, Result,
};
use futures::stream::{self, StreamExt};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Postgres, QueryBuilder};

use crate::codec::{decode_delta, decode_page, decode_write, json_contains_nul};
use crate::core::{Conns, Inner, warm};
use crate::error::classify;
use crate::keys::storable;
use crate::sql;

/// How many rows one `list` page fetches.
const PAGE: usize = 64;

pub(crate) async fn get_tuple(
    inner: &Inner,
    config: &CheckpointConfig,
) -> Result<Option<CheckpointTuple>> {
    config.require_thread()?;
    if !storable(&config.thread_id)
        || !storable(&config.checkpoint_ns)
        || config
            .checkpoint_id
            .as_deref()
            .is_some_and(|id| !storable(id))
    {
        return Ok(None);
    }
    let rows = match &config.checkpoint_id {
        Some(id) => {
            warm!(idempotent inner.conns, |conn| sqlx::query(sql::GET_BY_ID)
                .bind(&config.thread_id)
                .bind(&config.checkpoint_ns)
                .bind(id)
                .fetch_all(conn))
        }
        None => {
            warm!(idempotent inner.conns, |conn| sqlx::query(sql::GET_LATEST)
                .bind(&config.thread_id)
                .bind(&config.checkpoint_ns)
                .fetch_all(conn))
        }
    }
    .map_err(classify)?;
    let mut tuples = decode_page(&rows)?;
    legacy_sends(&inner.conns, &mut tuples).await?;
    if inner.refresh_on_read && !tuples.is_empty() {
        warm!(idempotent inner.conns, |conn| sqlx::query(sql::REFRESH_TTL)
            .bind(&config.thread_id)
            .bind(inner.default_ttl_ms)
            .execute(conn))
        .map_err(classify)?;
    }
    Ok(tuples.into_iter().next())
}

/// The most thread ids per `list_threads` page (the first pages are smaller; see
/// [`paged_keys`](checkpoint_core::backend::paged_keys)).
const THREAD_PAGE: usize = 1000;

/// `list_threads` (`after` `None`) and `list_threads_after`: keyset pages of the primary
/// key's thread ids, in the column's collation. A stored id holds no NUL, so the ids after
/// one that does are those after the part before its first NUL (exactly so in byte order).
pub(crate) fn list_threads(
    inner: &Inner,
    after: Option<&str>,
) -> BoxStream<'static, Result<String>> {
    let conns = inner.conns.clone();
    let after = after.map(|a| a.split('\0').next().unwrap_or_default().to_owned());
    checkpoint_core::backend::paged_keys(THREAD_PAGE, after, move |after, want| {
        let conns = conns.clone();
        async move {
            warm!(idempotent conns, |conn| sqlx::query_scalar(sql::LIST_THREADS)
                .bind(after.as_deref().unwrap_or_default())
                .bind(i64::try_from(want).unwrap_or(i64::MAX))
                .fetch_all(conn))
            .map_err(classify)
        }
    })
}

/// `list`: pages of [`PAGE`] checkpoints, each one query (checkpoints, their values and
/// writes), keyset-paginated on the index order of the listing.
pub(crate) fn list(
    inner: &Inner,
    options: ListOptions,
) -> BoxStream<'static, Result<CheckpointTuple>> {
    let unmatchable = [
        &options.thread_id,
        &options.checkpoint_ns,
        &options.checkpoint_id,
        &options.before,
    ]
    .into_iter()
    .flatten()
    .any(|s| s.contains('\0'))
        || json_contains_nul(&Value::Object(options.filter.clone()));
    if unmatchable {
        // Nothing stored can contain NUL: the answer is empty without asking the server.
        return stream::empty().boxed();
    }
    let mode = match (&options.thread_id, &options.checkpoint_ns) {
        (Some(_), Some(_)) => ListMode::Namespace,
        (Some(_), None) => ListMode::Thread,
        (None, _) => ListMode::Global,
    };
    let limit = options.limit;
    let state = ListState {
        conns: inner.conns.clone(),
        opts: options,
        mode,
        cursor: None,
    };
    paged(limit, PAGE, state, |mut st, want| async move {
        let page = next_page(&mut st, want).await?;
        Ok((st, page))
    })
}

/// Which index order a list query walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListMode {
    /// One thread and namespace: by id.
    Namespace,
    /// One thread, every namespace: by (id, namespace).
    Thread,
    /// Every thread: by (id, thread, namespace).
    Global,
}

struct ListState {
    conns: Conns,
    opts: ListOptions,
    mode: ListMode,
    cursor: Option<(String, String, String)>,
}

fn page_query(
    opts: &ListOptions,
    mode: ListMode,
    cursor: Option<&(String, String, String)>,
    limit: usize,
) -> QueryBuilder<'static, Postgres> {
    let order = match mode {
        ListMode::Namespace => "c.checkpoint_id DESC",
        ListMode::Thread => "c.checkpoint_id DESC, c.checkpoint_ns DESC",
        ListMode::Global => "c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC",
    };
    let mut qb = QueryBuilder::<Postgres>::new(sql::LIST_PAGE_HEAD);
    qb.push(order).push(sql::LIST_PAGE_FROM);
    // Expired threads are invisible.
    qb.push(
        " WHERE NOT EXISTS (SELECT 1 FROM checkpoint_threads x \
         WHERE x.thread_id = c.thread_id AND x.expires_at <= now())",
    );
    if let Some(t) = &opts.thread_id {
        qb.push(" AND c.thread_id = ").push_bind(t.clone());
    }
    if let Some(ns) = &opts.checkpoint_ns {
        qb.push(" AND c.checkpoint_ns = ").push_bind(ns.clone());
    }
    if let Some(id) = &opts.checkpoint_id {
        qb.push(" AND c.checkpoint_id = ").push_bind(id.clone());
    }
    if let Some(b) = &opts.before {
        qb.push(" AND c.checkpoint_id < ").push_bind(b.clone());
    }
    if !opts.filter.is_empty() {
        let filter = Value::Object(opts.filter.clone());
        // Containment is served by the GIN index; the NOT EXISTS makes it exact equality
        // per key (containment alone would accept supersets of nested objects and arrays).
        qb.push(" AND c.metadata @> ")
            .push_bind(Json(filter.clone()))
            .push("::jsonb AND NOT EXISTS (SELECT 1 FROM jsonb_each(")
            .push_bind(Json(filter))
            .push("::jsonb) AS f WHERE c.metadata -> f.key IS DISTINCT FROM f.value)");
    }
    if let Some((id, thread, ns)) = cursor {
        match mode {
            ListMode::Namespace => {
                qb.push(" AND c.checkpoint_id < ").push_bind(id.clone());
            }
            ListMode::Thread => {
                qb.push(" AND (c.checkpoint_id, c.checkpoint_ns) < (")
                    .push_bind(id.clone())
                    .push(", ")
                    .push_bind(ns.clone())
                    .push(")");
            }
            ListMode::Global => {
                qb.push(" AND (c.checkpoint_id, c.thread_id, c.checkpoint_ns) < (")
                    .push_bind(id.clone())
                    .push(", ")
                    .push_bind(thread.clone())
                    .push(", ")
                    .push_bind(ns.clone())
                    .push(")");
            }
        }
    }
    qb.push(" ORDER BY ").push(order);
    qb.push(" LIMIT ")
        .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    qb.push(sql::LIST_PAGE_TAIL);
    qb
}

async fn next_page(st: &mut ListState, want: usize) -> Result<Page> {
    let rows = warm!(idempotent st.conns, |conn| page_query(
        &st.opts,
        st.mode,
        st.cursor.as_ref(),
        want
    )
    .build()
    .fetch_all(conn))
    .map_err(classify)?;
    let mut page = decode_page(&rows).map_err(Error::from)?;
    legacy_sends(&st.conns, &mut page).await?;
    if let Some(t) = page.last() {
        st.cursor = Some((
            t.checkpoint.id.clone(),
            t.config.thread_id.clone(),
            t.config.checkpoint_ns.clone(),
        ));
    }
    let last = page.len() < want;
    Ok(Page::new(page, last))
}

/// Checkpoints of a LangGraph format before 4 read with their parent's sends (see
/// `checkpoint_core::backend::legacy`), as LangGraph's Python saver reads them: one query
/// per such checkpoint, none otherwise.
async fn legacy_sends(conns: &Conns, tuples: &mut [CheckpointTuple]) -> Result<()> {
    for tuple in tuples {
        let Some(parent) = legacy::sends_parent(tuple).cloned() else {
            continue;
        };
        let rows = warm!(idempotent conns, |conn| sqlx::query(sql::PARENT_SENDS)
            .bind(&parent.thread_id)
            .bind(&parent.checkpoint_ns)
            .bind(parent.checkpoint_id.as_deref())
            .fetch_all(conn))
        .map_err(classify)?;
        let writes = rows
            .iter()
            .map(decode_write)
            .collect::<Result<Vec<_>, _>>()?;
        legacy::apply_parent_sends(tuple, &writes);
    }
    Ok(())
}

pub(crate) async fn delta_channel_history(
    inner: &Inner,
    config: &CheckpointConfig,
    channels: &[String],
) -> Result<BTreeMap<String, DeltaChannelHistory>> {
    config.require_thread()?;
    let mut out: BTreeMap<String, DeltaChannelHistory> = checkpoint_core::delta::empty(channels);
    if out.is_empty()
        || !storable(&config.thread_id)
        || !storable(&config.checkpoint_ns)
        || config
            .checkpoint_id
            .as_deref()
            .is_some_and(|id| !storable(id))
        || out.keys().any(|c| c.contains('\0'))
    {
        return Ok(out);
    }
    let wanted: Vec<&str> = out.keys().map(String::as_str).collect();
    let rows = warm!(idempotent inner.conns, |conn| sqlx::query(sql::DELTA_HISTORY)
        .bind(&config.thread_id)
        .bind(&config.checkpoint_ns)
        .bind(config.checkpoint_id.as_deref())
        .bind(&wanted)
        .fetch_all(conn))
    .map_err(classify)?;
    decode_delta(&rows, &mut out)?;
    Ok(out)
}
