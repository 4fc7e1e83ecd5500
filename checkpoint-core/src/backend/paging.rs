//! `list` as a lazy stream over pages a backend fetches one at a time.

use std::collections::VecDeque;
use std::future::Future;

use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};

use crate::{CheckpointTuple, Result};

/// One page of a [`paged`] stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// Tuples in list order (they may be fewer than asked for, even none, when the backend
    /// stopped early, e.g. after a scan budget).
    pub tuples: Vec<CheckpointTuple>,
    /// Whether nothing follows this page.
    pub last: bool,
}

impl Page {
    /// A page of `tuples`, with `last` telling whether nothing follows.
    pub fn new(tuples: Vec<CheckpointTuple>, last: bool) -> Self {
        Self { tuples, last }
    }
}

/// Builds the stream [`Saver::list`](crate::Saver::list) returns from a page fetcher.
///
/// `fetch(state, want)` reads the next page (`want` is at most `page_size`, and never more
/// than what `limit` leaves) and hands the state back for the next call; the state is the
/// backend's cursor, connection handle or anything else a page needs. The stream yields the
/// tuples of each page in order, asks for the next page only when the previous one is
/// consumed (so at most one page is held in memory), stops after `limit` tuples or a page
/// marked [`last`](Page::last), and ends after yielding the first error.
///
/// ```
/// use checkpoint_core::backend::{Page, paged};
/// use futures::StreamExt;
/// // A backend whose "store" is a counter: pages of up to `want` numbers below 10.
/// let stream = paged(Some(5), 2, 0usize, |next, want| async move {
///     let ids: Vec<usize> = (next..10).take(want).collect();
///     let after = next + ids.len();
///     Ok::<_, checkpoint_core::Error>((after, Page::new(Vec::new(), after >= 10)))
/// });
/// # let _ = stream;
/// ```
pub fn paged<S, F, Fut>(
    limit: Option<usize>,
    page_size: usize,
    state: S,
    fetch: F,
) -> BoxStream<'static, Result<CheckpointTuple>>
where
    S: Send + 'static,
    F: FnMut(S, usize) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(S, Page)>> + Send + 'static,
{
    let paging = Paging {
        state: Some(state),
        fetch,
        remaining: limit,
        page_size: page_size.max(1),
        buffer: VecDeque::new(),
        last: false,
    };
    stream::unfold(paging, |mut p| async move {
        loop {
            if p.remaining == Some(0) {
                return None;
            }
            if let Some(t) = p.buffer.pop_front() {
                p.remaining = p.remaining.map(|r| r - 1);
                return Some((Ok(t), p));
            }
            if p.last {
                return None;
            }
            let state = p.state.take()?;
            let want = p.remaining.map_or(p.page_size, |r| r.min(p.page_size));
            match (p.fetch)(state, want).await {
                Ok((state, page)) => {
                    p.state = Some(state);
                    p.last = page.last;
                    p.buffer.extend(page.tuples);
                }
                Err(e) => {
                    p.last = true;
                    p.buffer.clear();
                    return Some((Err(e), p));
                }
            }
        }
    })
    .boxed()
}

/// The most keys the first page of [`paged_keys`] asks for.
pub const FIRST_KEY_PAGE: usize = 128;

/// Builds the stream [`Saver::list_threads`](crate::Saver::list_threads) (`after` `None`)
/// or [`Saver::list_threads_after`](crate::Saver::list_threads_after) returns from a
/// keyset page fetcher: `fetch(after, want)` returns up to `want` keys greater than `after`
/// (`None`: from the start), ascending. The first page starts after `after` and asks for
/// at most [`FIRST_KEY_PAGE`] keys, each next page for 4 times as many, up to
/// `page_size`: a caller that takes a few ids pays for a small page, one that reads a whole
/// listing for few round trips. The stream asks for the next page when the previous one
/// is consumed, and ends after a page shorter than asked for, or after yielding the first
/// error.
///
/// ```
/// use checkpoint_core::backend::paged_keys;
/// use futures::TryStreamExt;
/// # futures::executor::block_on(async {
/// let store = ["a", "b", "c", "d", "e"];
/// let fetch = move |after: Option<String>, want| async move {
///     Ok(store
///         .iter()
///         .filter(|k| after.as_deref().is_none_or(|a| **k > a))
///         .take(want)
///         .map(|k| k.to_string())
///         .collect())
/// };
/// let keys: Vec<String> = paged_keys(2, None, fetch).try_collect().await?;
/// assert_eq!(keys, ["a", "b", "c", "d", "e"]);
/// let rest: Vec<String> = paged_keys(2, Some("b".into()), fetch).try_collect().await?;
/// assert_eq!(rest, ["c", "d", "e"]);
/// # Ok::<_, checkpoint_core::Error>(()) }).unwrap();
/// ```
pub fn paged_keys<F, Fut>(
    page_size: usize,
    after: Option<String>,
    fetch: F,
) -> BoxStream<'static, Result<String>>
where
    F: FnMut(Option<String>, usize) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Vec<String>>> + Send + 'static,
{
    let page_size = page_size.max(1);
    let first = page_size.min(FIRST_KEY_PAGE);
    // (fetcher, the last key yielded, buffered keys, the next page's size, whether the last
    // page was short)
    let state = (fetch, after, VecDeque::<String>::new(), first, false);
    stream::unfold(
        state,
        move |(mut fetch, mut after, mut buffer, mut want, mut done)| async move {
            loop {
                if let Some(key) = buffer.pop_front() {
                    after = Some(key.clone());
                    return Some((Ok(key), (fetch, after, buffer, want, done)));
                }
                if done {
                    return None;
                }
                match fetch(after.clone(), want).await {
                    Ok(keys) => {
                        done = keys.len() < want;
                        buffer.extend(keys);
                        want = want.saturating_mul(4).min(page_size);
                    }
                    Err(e) => return Some((Err(e), (fetch, after, buffer, want, true))),
                }
            }
        },
    )
    .boxed()
}

/// The ids of `ids`, a listing in byte order, that come after `after`: the default
/// [`Saver::list_threads_after`](crate::Saver::list_threads_after) of a saver whose
/// `list_threads` keeps to the byte order (it reads the listing from its start).
pub fn ids_after(
    ids: BoxStream<'static, Result<String>>,
    after: &str,
) -> BoxStream<'static, Result<String>> {
    let after = after.to_owned();
    ids.try_filter(move |id| std::future::ready(id.as_str() > after.as_str()))
        .boxed()
}

/// A [`Saver::list_threads`](crate::Saver::list_threads) stream for a backend that cannot
/// page through its thread ids: `collect` gathers the distinct ids (in ascending order), and
/// the stream yields them, or the error.
pub fn collected_keys<F>(collect: F) -> BoxStream<'static, Result<String>>
where
    F: Future<Output = Result<std::collections::BTreeSet<String>>> + Send + 'static,
{
    stream::once(collect)
        .map(|keys| match keys {
            Ok(keys) => stream::iter(keys.into_iter().map(Ok)).boxed(),
            Err(e) => stream::iter([Err(e)]).boxed(),
        })
        .flatten()
        .boxed()
}

struct Paging<S, F> {
    state: Option<S>,
    fetch: F,
    remaining: Option<usize>,
    page_size: usize,
    buffer: VecDeque<CheckpointTuple>,
    last: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Checkpoint, CheckpointConfig, CheckpointMetadata, Error};
    use futures::TryStreamExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn tuple(n: usize) -> CheckpointTuple {
        CheckpointTuple {
            config: CheckpointConfig::new(format!("t{n}")),
            checkpoint: Checkpoint::new(),
            metadata: CheckpointMetadata::new(),
            parent_config: None,
            pending_writes: Vec::new(),
        }
    }

    /// Numbers below `total` in pages of `want`, counting the fetches.
    fn numbers(
        total: usize,
        limit: Option<usize>,
        fetches: Arc<AtomicUsize>,
    ) -> BoxStream<'static, Result<CheckpointTuple>> {
        paged(limit, 3, 0usize, move |next, want| {
            fetches.fetch_add(1, Ordering::SeqCst);
            async move {
                assert!(want <= 3 && want > 0);
                let page: Vec<_> = (next..total).take(want).map(tuple).collect();
                let after = next + page.len();
                Ok((after, Page::new(page, after >= total)))
            }
        })
    }

    fn run<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn pages_are_fetched_lazily_and_limits_apply() {
        run(async {
            let fetches = Arc::new(AtomicUsize::new(0));
            let all: Vec<_> = numbers(8, None, fetches.clone())
                .try_collect()
                .await
                .unwrap();
            assert_eq!(all.len(), 8);
            assert_eq!(all[7].config.thread_id, "t7");
            assert_eq!(fetches.load(Ordering::SeqCst), 3);

            let fetches = Arc::new(AtomicUsize::new(0));
            let four: Vec<_> = numbers(8, Some(4), fetches.clone())
                .try_collect()
                .await
                .unwrap();
            assert_eq!(four.len(), 4);
            assert_eq!(fetches.load(Ordering::SeqCst), 2, "3 then 1");

            let fetches = Arc::new(AtomicUsize::new(0));
            let none: Vec<_> = numbers(8, Some(0), fetches.clone())
                .try_collect()
                .await
                .unwrap();
            assert!(none.is_empty());
            assert_eq!(fetches.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn empty_pages_continue_and_errors_end_the_stream() {
        run(async {
            // Two empty, non-final pages, then one tuple, then an error.
            let stream = paged(None, 10, 0u8, |step, _| async move {
                match step {
                    0 | 1 => Ok((step + 1, Page::new(Vec::new(), false))),
                    2 => Ok((3, Page::new(vec![tuple(0)], false))),
                    _ => Err(Error::invalid("boom")),
                }
            });
            let items: Vec<_> = stream.collect().await;
            assert_eq!(items.len(), 2);
            assert!(items[0].is_ok());
            assert!(items[1].is_err());
        });
    }
}

/// Makes the tuples of one page that hold the same stored value (same thread, namespace,
/// channel and version, equal bytes) share one buffer, so a page of a thread's history
/// holds each value once however many of its checkpoints name it. Values that differ are
/// left alone.
pub fn share_values(tuples: &mut [CheckpointTuple]) {
    let mut seen: std::collections::HashMap<(String, String, String, String), bytes::Bytes> =
        std::collections::HashMap::new();
    for t in tuples {
        let (thread, ns) = (&t.config.thread_id, &t.config.checkpoint_ns);
        let versions = &t.checkpoint.channel_versions;
        for (channel, value) in &mut t.checkpoint.channel_values {
            let Some(version) = versions.get(channel) else {
                continue;
            };
            let key = (
                thread.clone(),
                ns.clone(),
                channel.clone(),
                version.to_string(),
            );
            match seen.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    if *e.get() == value.bytes {
                        value.bytes = e.get().clone();
                    }
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(value.bytes.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;
    use futures::{StreamExt, TryStreamExt};
    use std::sync::{Arc, Mutex};

    /// `paged_keys` over the keys `k00000`.. `k<total - 1>`, recording what each fetch
    /// asked for.
    fn keys(
        total: usize,
        page_size: usize,
        asked: Arc<Mutex<Vec<usize>>>,
    ) -> BoxStream<'static, Result<String>> {
        paged_keys(page_size, None, move |after, want| {
            asked.lock().unwrap().push(want);
            async move {
                Ok((0..total)
                    .map(|i| format!("k{i:05}"))
                    .filter(|k| after.as_deref().is_none_or(|a| k.as_str() > a))
                    .take(want)
                    .collect())
            }
        })
    }

    #[test]
    fn pages_start_small_and_grow_to_the_page_size() {
        futures::executor::block_on(async {
            let asked = Arc::new(Mutex::new(Vec::new()));
            let all: Vec<String> = keys(3000, 1000, asked.clone()).try_collect().await.unwrap();
            assert_eq!(all.len(), 3000);
            assert!(all.windows(2).all(|w| w[0] < w[1]));
            // 128 + 512 + 1000 + 1000 = 2640, then 360 < 1000 ends it.
            assert_eq!(*asked.lock().unwrap(), [128, 512, 1000, 1000, 1000]);

            // Taking a few ids costs one small page.
            let asked = Arc::new(Mutex::new(Vec::new()));
            let few: Vec<String> = keys(3000, 1000, asked.clone())
                .take(100)
                .try_collect()
                .await
                .unwrap();
            assert_eq!(few.len(), 100);
            assert_eq!(*asked.lock().unwrap(), [128]);

            // A page size below the first page's is used from the start.
            let asked = Arc::new(Mutex::new(Vec::new()));
            let all: Vec<String> = keys(5, 2, asked.clone()).try_collect().await.unwrap();
            assert_eq!(all.len(), 5);
            assert_eq!(*asked.lock().unwrap(), [2, 2, 2]);
        });
    }
}

#[cfg(test)]
mod share_tests {
    use super::share_values;
    use crate::{Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple};

    fn tuple(thread: &str, text: &str) -> CheckpointTuple {
        let mut checkpoint = Checkpoint::new();
        checkpoint
            .channel_versions
            .insert("doc".into(), 1u64.into());
        checkpoint
            .channel_values
            .insert("doc".into(), crate::TypedValue::json(&text).unwrap());
        CheckpointTuple {
            config: CheckpointConfig::new(thread).with_checkpoint_id(checkpoint.id.clone()),
            checkpoint,
            metadata: CheckpointMetadata::new(),
            parent_config: None,
            pending_writes: Vec::new(),
        }
    }

    #[test]
    fn equal_values_of_one_version_share_a_buffer_and_others_do_not() {
        let mut page = vec![
            tuple("t", "same"),
            tuple("t", "same"),
            tuple("u", "same"),
            tuple("t", "changed"),
        ];
        share_values(&mut page);
        let ptr = |i: usize| page[i].checkpoint.channel_values["doc"].bytes.as_ptr();
        assert_eq!(ptr(0), ptr(1), "same thread, version and bytes: one buffer");
        assert_ne!(ptr(0), ptr(2), "another thread keeps its own");
        assert_ne!(ptr(0), ptr(3), "different bytes are never replaced");
        assert_eq!(
            &page[3].checkpoint.channel_values["doc"].bytes[..],
            b"\"changed\""
        );
    }
}
