//! Repairs every fixture list with both policies and writes the results to a directory, for
//! `fixtures/verify.py` to load with the real Python libraries:
//!
//! ```sh
//! cargo run -p checkpoint-sanitize --example dump_repaired -- repaired
//! .venv-sanitize/bin/python checkpoint-sanitize/fixtures/verify.py repaired
//! ```

use std::path::{Path, PathBuf};

use checkpoint_core::{TypedValue, ValueType};
use checkpoint_sanitize::messages::{MessageList, OrphanCallPolicy, RepairOptions};

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: dump_repaired OUT_DIR")?,
    );
    std::fs::create_dir_all(&out)?;
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cases");
    let mut written = 0;
    for entry in std::fs::read_dir(cases)? {
        let path = entry?.path();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let tag = ValueType::from(doc["type"].as_str().ok_or("type")?);
        let bytes = hex_decode(doc["hex"].as_str().ok_or("hex")?).ok_or("bad hex")?;
        let Some(list) = MessageList::decode(&TypedValue::new(tag, bytes))? else {
            return Err(format!("{} is not a message list", path.display()).into());
        };
        for (name, policy) in [
            ("placeholder", OrphanCallPolicy::InsertPlaceholder),
            ("remove", OrphanCallPolicy::RemoveCalls),
        ] {
            let repaired = list.repair(&RepairOptions::default().orphan_calls(policy))?;
            let Some(value) = repaired.value else {
                continue;
            };
            let stem = path.file_stem().and_then(|s| s.to_str()).ok_or("name")?;
            let record = serde_json::json!({
                "case": stem,
                "form": doc["form"],
                "policy": name,
                "type": value.type_tag.as_str(),
                "hex": hex_encode(&value.bytes),
            });
            std::fs::write(
                out.join(format!("{stem}.{name}.json")),
                serde_json::to_vec_pretty(&record)?,
            )?;
            written += 1;
        }
    }
    println!("wrote {written} repaired lists to {}", out.display());
    Ok(())
}
