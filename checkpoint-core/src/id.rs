//! Time-ordered checkpoint ids.
//!
//! Ids are RFC 9562 UUID version 6 strings (the form LangGraph itself generates), so that a
//! thread written alternately by a Python LangGraph service and by this library keeps one
//! consistent order. Within a process they are strictly increasing, even when many are made in
//! the same clock tick or the wall clock steps backwards: the generator never reuses or goes
//! below the last timestamp it issued. Because the timestamp occupies the leading hex digits
//! of the canonical form, string order equals creation order.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;

/// 100-ns intervals between the Gregorian epoch (1582-10-15) and the Unix epoch.
const GREGORIAN_OFFSET: u64 = 0x01B2_1DD2_1381_4000;

static LAST_TICKS: Mutex<u64> = Mutex::new(0);

fn now_ticks() -> u64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ticks = since_unix.as_secs() * 10_000_000 + u64::from(since_unix.subsec_nanos()) / 100;
    ticks + GREGORIAN_OFFSET
}

fn next_ticks() -> u64 {
    let now = now_ticks();
    // A poisoned lock only means another thread panicked while holding a plain integer.
    let mut last = LAST_TICKS.lock().unwrap_or_else(|e| e.into_inner());
    let ticks = if now > *last { now } else { *last + 1 };
    *last = ticks;
    ticks
}

/// Returns a new checkpoint id: a 36-character lowercase UUIDv6 string, strictly greater than
/// every id this process returned before.
///
/// ```
/// let a = checkpoint_core::new_checkpoint_id();
/// let b = checkpoint_core::new_checkpoint_id();
/// assert_eq!(a.len(), 36);
/// assert!(a < b);
/// ```
pub fn new_checkpoint_id() -> String {
    let ticks = next_ticks();
    let mut rng = rand::rng();
    // The 14-bit clock sequence and a random 48-bit node with the multicast bit set (RFC
    // 9562: a node id that is not a MAC address); `uuid` sets version and variant.
    let clock_seq: u16 = rng.random::<u16>() & 0x3FFF;
    let mut node: [u8; 6] = rng.random();
    node[0] |= 0x01;
    uuid::Builder::from_sorted_gregorian_timestamp(ticks, clock_seq, &node)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// The timestamp embedded in a UUIDv6 id, as milliseconds since the Unix epoch, or `None`
/// when the string is not a version-6 UUID.
pub fn checkpoint_id_unix_millis(id: &str) -> Option<u64> {
    let uuid = uuid::Uuid::parse_str(id).ok()?;
    if uuid.get_version_num() != 6 {
        return None;
    }
    let (ticks, _) = uuid.get_timestamp()?.to_gregorian();
    Some(ticks.checked_sub(GREGORIAN_OFFSET)? / 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_strictly_increasing_even_in_one_tick() {
        let mut prev = new_checkpoint_id();
        for _ in 0..100_000 {
            let next = new_checkpoint_id();
            assert!(next > prev, "{next} !> {prev}");
            prev = next;
        }
    }

    #[test]
    fn ids_are_uuid_v6_and_carry_the_time() {
        let id = new_checkpoint_id();
        assert_eq!(id.len(), 36);
        let parsed = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(parsed.get_version_num(), 6);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let ms = checkpoint_id_unix_millis(&id).unwrap();
        assert!(ms.abs_diff(now_ms) < 60_000, "{ms} vs {now_ms}");
    }

    #[test]
    fn ids_from_many_threads_are_unique_and_ordered_per_thread() {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let v: Vec<String> = (0..10_000).map(|_| new_checkpoint_id()).collect();
                    assert!(v.windows(2).all(|w| w[0] < w[1]));
                    v
                })
            })
            .collect();
        let mut all: Vec<String> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn non_v6_ids_have_no_timestamp() {
        assert_eq!(checkpoint_id_unix_millis("not-a-uuid"), None);
        assert_eq!(
            checkpoint_id_unix_millis("67e55044-10b1-426f-9247-bb680e5fe0c8"),
            None
        );
    }
}
