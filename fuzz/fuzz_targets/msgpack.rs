//! Core's bounded MessagePack decoder, the raw scanners the backends use on stored values,
//! and the readers of LangGraph's own layouts (a whole checkpoint, one `dumps_typed` value
//! as JSON): any bytes give a value or a typed error, within the limits, never a panic.
#![no_main]

use checkpoint_core::backend::langgraph::{decode_checkpoint, typed_json};
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
    let _ = decode_checkpoint("fuzz", Some("msgpack"), data);
    let _ = typed_json("fuzz", "msgpack", data);
});
