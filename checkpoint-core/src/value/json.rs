//! A bounded pass over a JSON value before anything decodes it: the same
//! [`DecodeLimits`] the MessagePack decoder enforces (depth and element count), checked while
//! `serde_json` streams the input, so a hostile value fails with
//! [`Error::LimitExceeded`] before a single element is allocated.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::DecodeLimits;
use crate::{Error, Result};

/// Checks that `bytes` is one JSON value within `limits` (size, depth, elements; scalars,
/// arrays, objects and object keys each count as an element, as in MessagePack). Allocates
/// nothing that grows with the input but `serde_json`'s scratch buffer for one escaped
/// string.
pub fn validate(bytes: &[u8], limits: &DecodeLimits) -> Result<()> {
    limits.check_size(bytes.len())?;
    let state = State {
        limits,
        elements: Cell::new(0),
        exceeded: Cell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let walked = Walk {
        state: &state,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match (walked, state.exceeded.take()) {
        (Err(_), Some(limit)) => Err(limit),
        (Err(e), None) => Err(Error::serialization("invalid JSON value", e)),
        (Ok(()), _) => Ok(()),
    }
}

/// Decodes JSON text into a `serde_json::Value` under `limits`: [`validate`] first, so a
/// value over a limit is refused before anything is allocated for it.
pub fn decode_json(bytes: &[u8], limits: &DecodeLimits) -> Result<serde_json::Value> {
    validate(bytes, limits)?;
    serde_json::from_slice(bytes).map_err(|e| Error::serialization("invalid JSON value", e))
}

struct State<'a> {
    limits: &'a DecodeLimits,
    elements: Cell<usize>,
    /// The limit that stopped the walk (serde errors cannot carry it).
    exceeded: Cell<Option<Error>>,
}

impl State<'_> {
    fn count<E: de::Error>(&self) -> std::result::Result<(), E> {
        let n = self.elements.get() + 1;
        self.elements.set(n);
        if n > self.limits.max_elements {
            return Err(self.stop(Error::LimitExceeded {
                limit: "elements",
                actual: n as u64,
                max: self.limits.max_elements as u64,
            }));
        }
        Ok(())
    }

    fn enter<E: de::Error>(&self, depth: usize) -> std::result::Result<(), E> {
        if depth > self.limits.max_depth {
            return Err(self.stop(Error::LimitExceeded {
                limit: "depth",
                actual: depth as u64,
                max: self.limits.max_depth as u64,
            }));
        }
        Ok(())
    }

    fn stop<E: de::Error>(&self, limit: Error) -> E {
        let message = limit.to_string();
        self.exceeded.set(Some(limit));
        E::custom(message)
    }
}

/// One value at `depth` (the top level is 0; a container's elements are one deeper).
#[derive(Clone, Copy)]
struct Walk<'s, 'a> {
    state: &'s State<'a>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<(), E> {
        self.state.count()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<(), E> {
        self.state.count()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<(), E> {
        self.state.count()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<(), E> {
        self.state.count()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<(), E> {
        self.state.count()
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        self.state.count()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        self.state.count()?;
        let inner = Walk {
            depth: self.depth + 1,
            ..self
        };
        self.state.enter(inner.depth)?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        self.state.count()?;
        let inner = Walk {
            depth: self.depth + 1,
            ..self
        };
        self.state.enter(inner.depth)?;
        while map.next_key_seed(inner)?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(elements: usize, depth: usize) -> DecodeLimits {
        DecodeLimits::default()
            .with_max_elements(elements)
            .with_max_depth(depth)
    }

    #[test]
    fn counts_every_value_and_key() {
        // {"a": [1, "x", null, true]}: the map, a key, the array, four scalars.
        let v = br#"{"a": [1, "x", null, true]}"#;
        assert!(validate(v, &limits(7, 8)).is_ok());
        assert!(matches!(
            validate(v, &limits(6, 8)),
            Err(Error::LimitExceeded {
                limit: "elements",
                actual: 7,
                max: 6
            })
        ));
    }

    #[test]
    fn depth_is_that_of_the_msgpack_decoder() {
        assert!(validate(b"[[1]]", &limits(100, 2)).is_ok());
        assert!(matches!(
            validate(b"[[[1]]]", &limits(100, 2)),
            Err(Error::LimitExceeded { limit: "depth", .. })
        ));
    }

    #[test]
    fn malformed_json_is_a_serialization_error() {
        for bad in [&b"[1,"[..], b"{\"a\" 1}", b"[1] 2", b"", b"\xff"] {
            assert!(
                matches!(
                    validate(bad, &DecodeLimits::default()),
                    Err(Error::Serialization { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
