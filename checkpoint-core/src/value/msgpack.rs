//! MessagePack, read safely: a closed, bounded decoder ([`decode_msgpack`]) and walkers that
//! find where values and array elements end without decoding them ([`value_end`],
//! [`array_elements`]).
//!
//! Every length read from the input is checked against the bytes that remain before anything
//! is allocated (an element takes at least one byte), nesting is bounded by
//! [`DecodeLimits::max_depth`] and the number of values by [`DecodeLimits::max_elements`], so
//! memory stays proportional to the input and a hostile blob gets a typed error. Extension
//! types are kept as opaque `(type, bytes)` pairs, so re-encoding a decoded value reproduces a
//! canonically encoded input byte for byte.

use std::ops::Range;

use rmp::Marker;
use rmpv::Value;

use super::DecodeLimits;
use crate::{Error, Result};

/// Decodes one msgpack value that must span all of `bytes`, under `limits`.
pub fn decode_msgpack(bytes: &[u8], limits: &DecodeLimits) -> Result<Value> {
    Decoder::new(bytes, limits, true).run()
}

/// The offset just past the msgpack value that starts at `pos` in `buf`, found without
/// decoding it.
///
/// Iterative (nested containers only add to the count of values still to skip, so any depth
/// costs no stack), and every length is checked against the bytes that remain, so a hostile
/// header fails at once instead of being trusted.
///
/// ```
/// use checkpoint_core::msgpack::value_end;
/// let bytes = [0x92, 0x01, 0xa1, b'x', 0xc0]; // [1, "x"], then nil
/// assert_eq!(value_end(&bytes, 0)?, 4);
/// assert_eq!(value_end(&bytes, 4)?, 5);
/// assert!(value_end(&[0xdc, 0xff, 0xff], 0).is_err()); // 65535 items, no bytes
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
pub fn value_end(buf: &[u8], mut pos: usize) -> Result<usize> {
    let mut remaining: usize = 1;
    while remaining > 0 {
        remaining -= 1;
        let byte = *buf
            .get(pos)
            .ok_or_else(|| malformed(format!("truncated value at offset {pos}")))?;
        pos += 1;
        let (payload, items) = match Marker::from_u8(byte) {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => {
                (0, 0)
            }
            Marker::U8 | Marker::I8 => (1, 0),
            Marker::U16 | Marker::I16 => (2, 0),
            Marker::U32 | Marker::I32 | Marker::F32 => (4, 0),
            Marker::U64 | Marker::I64 | Marker::F64 => (8, 0),
            Marker::FixStr(n) => (usize::from(n), 0),
            Marker::Str8 | Marker::Bin8 => (read_len(buf, &mut pos, 1)?, 0),
            Marker::Str16 | Marker::Bin16 => (read_len(buf, &mut pos, 2)?, 0),
            Marker::Str32 | Marker::Bin32 => (read_len(buf, &mut pos, 4)?, 0),
            Marker::FixExt1 => (2, 0),
            Marker::FixExt2 => (3, 0),
            Marker::FixExt4 => (5, 0),
            Marker::FixExt8 => (9, 0),
            Marker::FixExt16 => (17, 0),
            Marker::Ext8 => (read_len(buf, &mut pos, 1)?.saturating_add(1), 0),
            Marker::Ext16 => (read_len(buf, &mut pos, 2)?.saturating_add(1), 0),
            Marker::Ext32 => (read_len(buf, &mut pos, 4)?.saturating_add(1), 0),
            Marker::FixArray(n) => (0, usize::from(n)),
            Marker::Array16 => (0, read_len(buf, &mut pos, 2)?),
            Marker::Array32 => (0, read_len(buf, &mut pos, 4)?),
            Marker::FixMap(n) => (0, 2 * usize::from(n)),
            Marker::Map16 => (0, read_len(buf, &mut pos, 2)?.saturating_mul(2)),
            Marker::Map32 => (0, read_len(buf, &mut pos, 4)?.saturating_mul(2)),
            Marker::Reserved => {
                return Err(malformed(format!(
                    "reserved marker 0xc1 at offset {}",
                    pos - 1
                )));
            }
        };
        pos = pos
            .checked_add(payload)
            .filter(|&end| end <= buf.len())
            .ok_or_else(|| malformed(format!("truncated value before offset {pos}")))?;
        remaining = remaining.saturating_add(items);
        // Every value still to skip takes at least one byte.
        if remaining > buf.len() - pos {
            return Err(malformed(format!(
                "declares {remaining} more values at offset {pos} but only {} bytes remain",
                buf.len() - pos
            )));
        }
    }
    Ok(pos)
}

/// `(element count, header length)` of the msgpack array `buf` starts with, or `None` when
/// `buf` does not start with an array marker. The count is checked against the bytes that
/// follow (each element takes at least one).
pub fn array_header(buf: &[u8]) -> Result<Option<(usize, usize)>> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut pos = 1;
    let count = match Marker::from_u8(first) {
        Marker::FixArray(n) => usize::from(n),
        Marker::Array16 => read_len(buf, &mut pos, 2)?,
        Marker::Array32 => read_len(buf, &mut pos, 4)?,
        _ => return Ok(None),
    };
    if count > buf.len() - pos {
        return Err(malformed(format!(
            "an array declares {count} elements but only {} bytes follow",
            buf.len() - pos
        )));
    }
    Ok(Some((count, pos)))
}

/// The byte ranges of the elements of the msgpack array that spans exactly all of `buf`,
/// or `None` when `buf` does not start with an array marker.
///
/// ```
/// use checkpoint_core::msgpack::array_elements;
/// let list = rmp_serde::to_vec(&vec!["a", "bc"]).unwrap();
/// let ranges = array_elements(&list)?.expect("an array");
/// assert_eq!(&list[ranges[1].clone()], b"\xa2bc");
/// # Ok::<(), checkpoint_core::Error>(())
/// ```
pub fn array_elements(buf: &[u8]) -> Result<Option<Vec<Range<usize>>>> {
    let Some((count, mut pos)) = array_header(buf)? else {
        return Ok(None);
    };
    let mut ranges = Vec::with_capacity(count);
    for _ in 0..count {
        let end = value_end(buf, pos)?;
        ranges.push(pos..end);
        pos = end;
    }
    if pos != buf.len() {
        return Err(malformed(format!(
            "{} trailing bytes after the array",
            buf.len() - pos
        )));
    }
    Ok(Some(ranges))
}

/// Reads a big-endian length of `width` bytes at `pos` and moves `pos` past it.
fn read_len(buf: &[u8], pos: &mut usize, width: usize) -> Result<usize> {
    let end = pos
        .checked_add(width)
        .filter(|&e| e <= buf.len())
        .ok_or_else(|| malformed(format!("truncated length at offset {pos}")))?;
    let n = buf[*pos..end]
        .iter()
        .fold(0u64, |n, &b| (n << 8) | u64::from(b));
    *pos = end;
    usize::try_from(n).map_err(|_| malformed("length overflows usize"))
}

/// Walks one msgpack value under `limits` without building it.
pub(crate) fn validate(bytes: &[u8], limits: &DecodeLimits) -> Result<()> {
    Decoder::new(bytes, limits, false).run().map(drop)
}

struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    limits: &'a DecodeLimits,
    elements: usize,
    build: bool,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Serialization {
        reason: format!("malformed msgpack: {}", reason.into()),
        source: None,
    }
}

impl<'a> Decoder<'a> {
    fn new(buf: &'a [u8], limits: &'a DecodeLimits, build: bool) -> Self {
        Self {
            buf,
            pos: 0,
            limits,
            elements: 0,
            build,
        }
    }

    fn run(mut self) -> Result<Value> {
        if self.buf.len() > self.limits.max_bytes {
            return Err(Error::LimitExceeded {
                limit: "bytes",
                actual: self.buf.len() as u64,
                max: self.limits.max_bytes as u64,
            });
        }
        let v = self.value(0)?;
        if self.pos != self.buf.len() {
            return Err(malformed(format!(
                "{} trailing bytes after the value",
                self.buf.len() - self.pos
            )));
        }
        Ok(v)
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(malformed(format!(
                "needs {n} bytes at offset {}, {} remain",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn len8(&mut self) -> Result<usize> {
        Ok(usize::from(self.be::<1>()?[0]))
    }

    fn len16(&mut self) -> Result<usize> {
        Ok(usize::from(u16::from_be_bytes(self.be()?)))
    }

    fn len32(&mut self) -> Result<usize> {
        usize::try_from(u32::from_be_bytes(self.be()?))
            .map_err(|_| malformed("length overflows usize"))
    }

    fn count(&mut self, n: usize) -> Result<()> {
        self.elements = self.elements.saturating_add(n);
        if self.elements > self.limits.max_elements {
            return Err(Error::LimitExceeded {
                limit: "elements",
                actual: self.elements as u64,
                max: self.limits.max_elements as u64,
            });
        }
        Ok(())
    }

    /// Decodes one value. Kept small: containers recurse through here, so its stack frame
    /// bounds the stack used at the maximum depth; scalars are decoded out of line.
    fn value(&mut self, depth: usize) -> Result<Value> {
        self.count(1)?;
        let marker = Marker::from_u8(self.be::<1>()?[0]);
        match self.container(marker)? {
            Some((false, n)) => self.array(n, depth),
            Some((true, n)) => self.map(n, depth),
            None => self.scalar(marker),
        }
    }

    /// For an array or map marker, `(is_map, item count)`.
    #[inline(never)]
    fn container(&mut self, marker: Marker) -> Result<Option<(bool, usize)>> {
        Ok(Some(match marker {
            Marker::FixArray(n) => (false, usize::from(n)),
            Marker::Array16 => (false, self.len16()?),
            Marker::Array32 => (false, self.len32()?),
            Marker::FixMap(n) => (true, usize::from(n)),
            Marker::Map16 => (true, self.len16()?),
            Marker::Map32 => (true, self.len32()?),
            _ => return Ok(None),
        }))
    }

    #[inline(never)]
    fn scalar(&mut self, marker: Marker) -> Result<Value> {
        Ok(match marker {
            Marker::FixPos(n) => Value::from(n),
            Marker::FixNeg(n) => Value::from(n),
            Marker::Null => Value::Nil,
            Marker::True => Value::Boolean(true),
            Marker::False => Value::Boolean(false),
            Marker::U8 => Value::from(self.be::<1>()?[0]),
            Marker::U16 => Value::from(u16::from_be_bytes(self.be()?)),
            Marker::U32 => Value::from(u32::from_be_bytes(self.be()?)),
            Marker::U64 => Value::from(u64::from_be_bytes(self.be()?)),
            Marker::I8 => Value::from(i8::from_be_bytes(self.be()?)),
            Marker::I16 => Value::from(i16::from_be_bytes(self.be()?)),
            Marker::I32 => Value::from(i32::from_be_bytes(self.be()?)),
            Marker::I64 => Value::from(i64::from_be_bytes(self.be()?)),
            Marker::F32 => Value::F32(f32::from_be_bytes(self.be()?)),
            Marker::F64 => Value::F64(f64::from_be_bytes(self.be()?)),
            Marker::FixStr(n) => self.string(usize::from(n))?,
            Marker::Str8 => {
                let n = self.len8()?;
                self.string(n)?
            }
            Marker::Str16 => {
                let n = self.len16()?;
                self.string(n)?
            }
            Marker::Str32 => {
                let n = self.len32()?;
                self.string(n)?
            }
            Marker::Bin8 => {
                let n = self.len8()?;
                self.binary(n)?
            }
            Marker::Bin16 => {
                let n = self.len16()?;
                self.binary(n)?
            }
            Marker::Bin32 => {
                let n = self.len32()?;
                self.binary(n)?
            }
            Marker::FixExt1 => self.ext(1)?,
            Marker::FixExt2 => self.ext(2)?,
            Marker::FixExt4 => self.ext(4)?,
            Marker::FixExt8 => self.ext(8)?,
            Marker::FixExt16 => self.ext(16)?,
            Marker::Ext8 => {
                let n = self.len8()?;
                self.ext(n)?
            }
            Marker::Ext16 => {
                let n = self.len16()?;
                self.ext(n)?
            }
            Marker::Ext32 => {
                let n = self.len32()?;
                self.ext(n)?
            }
            Marker::Reserved => {
                return Err(malformed(format!(
                    "reserved marker 0xc1 at offset {}",
                    self.pos - 1
                )));
            }
            other => {
                return Err(malformed(format!(
                    "unexpected marker {other:?} at offset {}",
                    self.pos - 1
                )));
            }
        })
    }

    fn string(&mut self, n: usize) -> Result<Value> {
        let s = self.take(n)?;
        let s = std::str::from_utf8(s)
            .map_err(|_| malformed(format!("string at offset {} is not UTF-8", self.pos - n)))?;
        Ok(if self.build {
            Value::String(s.into())
        } else {
            Value::Nil
        })
    }

    fn binary(&mut self, n: usize) -> Result<Value> {
        let s = self.take(n)?;
        Ok(if self.build {
            Value::Binary(s.to_vec())
        } else {
            Value::Nil
        })
    }

    fn ext(&mut self, n: usize) -> Result<Value> {
        let ty = i8::from_be_bytes(self.be()?);
        let data = self.take(n)?;
        Ok(if self.build {
            Value::Ext(ty, data.to_vec())
        } else {
            Value::Nil
        })
    }

    fn enter(&self, depth: usize, items: usize) -> Result<()> {
        if depth + 1 > self.limits.max_depth {
            return Err(Error::LimitExceeded {
                limit: "depth",
                actual: (depth + 1) as u64,
                max: self.limits.max_depth as u64,
            });
        }
        // Every item takes at least one byte: reject impossible counts before allocating.
        if items > self.remaining() {
            return Err(malformed(format!(
                "declares {items} items at offset {} but only {} bytes remain",
                self.pos,
                self.remaining()
            )));
        }
        Ok(())
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value> {
        self.enter(depth, n)?;
        let mut items = Vec::with_capacity(if self.build { n } else { 0 });
        for _ in 0..n {
            let v = self.value(depth + 1)?;
            if self.build {
                items.push(v);
            }
        }
        Ok(if self.build {
            Value::Array(items)
        } else {
            Value::Nil
        })
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value> {
        self.enter(depth, n.saturating_mul(2))?;
        let mut items = Vec::with_capacity(if self.build { n } else { 0 });
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            if self.build {
                items.push((k, v));
            }
        }
        Ok(if self.build {
            Value::Map(items)
        } else {
            Value::Nil
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            any::<bool>().prop_map(Value::Boolean),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("NaN never equals itself", |f| !f.is_nan())
                .prop_map(Value::F64),
            any::<f32>()
                .prop_filter("NaN never equals itself", |f| !f.is_nan())
                .prop_map(Value::F32),
            ".{0,40}".prop_map(|s| Value::String(s.into())),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(Value::Binary),
            (any::<i8>(), proptest::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(t, d)| Value::Ext(t, d)),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::vec((inner.clone(), inner), 0..8).prop_map(Value::Map),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_encodings_roundtrip_byte_for_byte(v in arb_value()) {
            let bytes = encode(&v);
            let decoded = decode_msgpack(&bytes, &DecodeLimits::default()).unwrap();
            prop_assert_eq!(&decoded, &v);
            prop_assert_eq!(encode(&decoded), bytes);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let limits = DecodeLimits::default();
            let full = decode_msgpack(&bytes, &limits);
            let walked = validate(&bytes, &limits);
            prop_assert_eq!(full.is_ok(), walked.is_ok());
            // The skipping walkers agree with the decoder on where a valid value ends.
            match value_end(&bytes, 0) {
                Ok(end) if end == bytes.len() && full.is_ok() => {}
                Ok(end) => prop_assert!(end < bytes.len() || full.is_err()),
                Err(_) => prop_assert!(full.is_err()),
            }
            let _ = array_elements(&bytes);
        }

        #[test]
        fn walkers_find_every_element_of_a_list(items in proptest::collection::vec(arb_value(), 0..12)) {
            let list = encode(&Value::Array(items.clone()));
            prop_assert_eq!(value_end(&list, 0).unwrap(), list.len());
            let ranges = array_elements(&list).unwrap().unwrap();
            prop_assert_eq!(ranges.len(), items.len());
            for (range, item) in ranges.into_iter().zip(&items) {
                prop_assert_eq!(&list[range], &encode(item)[..]);
            }
            // Every strict prefix is truncated: an error, never a panic or a wrong end.
            for cut in 0..list.len() {
                prop_assert!(value_end(&list[..cut], 0).is_err());
            }
        }
    }

    #[test]
    fn unknown_extensions_are_opaque_and_exact() {
        // fixext1, fixext16, ext8 (3 bytes), ext16 (300 bytes) with various type ids.
        let mut bytes = vec![0x94, 0xd4, 0x05, 0xaa, 0xd8, 0x7f];
        bytes.extend([1u8; 16]);
        bytes.extend([0xc7, 0x03, 0x80, 1, 2, 3]);
        bytes.extend([0xc8, 0x01, 0x2c, 0x02]);
        bytes.extend([9u8; 300]);
        let v = decode_msgpack(&bytes, &DecodeLimits::default()).unwrap();
        let Value::Array(items) = &v else {
            panic!("{v:?}")
        };
        assert_eq!(items[0], Value::Ext(5, vec![0xaa]));
        assert_eq!(items[2], Value::Ext(-128, vec![1, 2, 3]));
        assert_eq!(encode(&v), bytes);
    }

    #[test]
    fn huge_declared_lengths_fail_without_allocating() {
        let limits = DecodeLimits::default();
        for bytes in [
            vec![0xdd, 0xff, 0xff, 0xff, 0xff],       // array32 of 4 Gi items
            vec![0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0], // map32
            vec![0xdb, 0xff, 0xff, 0xff, 0xff, b'a'], // str32
            vec![0xc6, 0xff, 0xff, 0xff, 0xff],       // bin32
            vec![0xc9, 0xff, 0xff, 0xff, 0xff, 0x01], // ext32
        ] {
            assert!(
                matches!(
                    decode_msgpack(&bytes, &limits),
                    Err(Error::Serialization { .. })
                ),
                "{bytes:x?}"
            );
        }
    }

    #[test]
    fn deep_nesting_hits_the_depth_limit() {
        let bytes = vec![0x91; 1_000_000]; // a million nested one-element arrays, truncated
        let err = decode_msgpack(&bytes, &DecodeLimits::default()).unwrap_err();
        assert!(
            matches!(err, Error::LimitExceeded { limit: "depth", .. }),
            "{err}"
        );
    }

    #[test]
    fn element_limit_applies() {
        let v = Value::Array(vec![Value::Nil; 1000]);
        let limits = DecodeLimits::default().with_max_elements(100);
        let err = decode_msgpack(&encode(&v), &limits).unwrap_err();
        assert!(matches!(
            err,
            Error::LimitExceeded {
                limit: "elements",
                ..
            }
        ));
    }

    #[test]
    fn walkers_reject_impossible_counts_and_non_arrays() {
        assert!(value_end(&[0xdd, 0xff, 0xff, 0xff, 0xff], 0).is_err());
        assert!(value_end(&[0xdf, 0x00, 0x00, 0x00, 0x01, 0xc0], 0).is_err()); // key without value
        assert!(value_end(&[0xc1], 0).is_err());
        assert!(array_header(&[0xdc, 0x00, 0x05, 0xc0]).is_err());
        assert_eq!(array_header(&[0x80]).unwrap(), None);
        assert_eq!(array_header(&[]).unwrap(), None);
        assert_eq!(array_header(&[0x92, 0xc0, 0xc0]).unwrap(), Some((2, 1)));
        assert!(array_elements(&[0x91, 0xc0, 0xc0]).is_err()); // trailing byte
        // A million nested arrays: no stack, just a count (truncated: an error).
        assert!(value_end(&vec![0x91; 1_000_000], 0).is_err());
    }

    #[test]
    fn trailing_bytes_and_reserved_marker_are_rejected() {
        let limits = DecodeLimits::default();
        assert!(decode_msgpack(&[0xc0, 0xc0], &limits).is_err());
        assert!(decode_msgpack(&[0xc1], &limits).is_err());
        assert!(decode_msgpack(&[], &limits).is_err());
        assert!(decode_msgpack(&[0xa2, 0xff, 0xfe], &limits).is_err()); // invalid UTF-8
    }
}
