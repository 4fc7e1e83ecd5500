//! Core's bounded MessagePack decoder and the raw scanners the backends use on stored
//! values: any bytes give a value or a typed error, within the limits, never a panic.
#![no_main]

use checkpoint_core::{TypedValue, ValueType, msgpack};
use libfuzzer_sys::fuzz_target;

#[path = "limits.rs"]
mod limits;

fuzz_target!(|data: &[u8]| {
    let limits = limits::limits();
    let _ = msgpack::decode_msgpack(data, &limits);
    let _ = msgpack::value_end(data, 0);
    let _ = msgpack::array_header(data);
    let _ = msgpack::array_elements(data);
    let value = TypedValue::new(ValueType::Msgpack, data.to_vec());
    let _ = value.to_dynamic_with(&limits);
});
