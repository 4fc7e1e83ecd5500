//! `SanitizeOnLoad` emits one `WARN` tracing event per repair.
//!
//! The subscriber is this test thread's default (`set_default`), so repairs made by other
//! tests of the binary on their own threads never reach it. Creating it registers a new
//! dispatcher, which makes tracing recompute every callsite's cached interest, so a
//! callsite other tests reached first (without a subscriber) still reports here.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use checkpoint_core::{
    Checkpoint, CheckpointConfig, CheckpointMetadata, InMemorySaver, PutOptions, Saver,
};
use checkpoint_sanitize::messages::{LangChainMessage, ToolCall};
use checkpoint_sanitize::{SanitizeConfig, SanitizeOnLoad};

/// Collects the level and fields of every tracing event.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(format!("{} ", event.metadata().level()));
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn repairs_are_emitted_through_tracing() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let _default = tracing::subscriber::set_default(Capture(Arc::clone(&events)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let inner = InMemorySaver::new();
        let mut cp = Checkpoint::new();
        let crashed = LangChainMessage::message_list(&[
            LangChainMessage::human("h1", "look it up"),
            LangChainMessage::ai(
                "a1",
                "",
                vec![ToolCall {
                    id: Some("call_1".into()),
                    name: Some("search".into()),
                    args: Some(serde_json::json!({"q": "call_1"})),
                }],
            ),
        ])
        .unwrap();
        let v = cp.set_typed("messages", crashed);
        let at = inner
            .put(
                &CheckpointConfig::new("traced-thread"),
                cp,
                CheckpointMetadata::new(),
                [("messages".to_owned(), v)].into(),
                PutOptions::new(),
            )
            .await
            .unwrap();
        let s = SanitizeOnLoad::new(inner, SanitizeConfig::default());
        s.get_tuple(&at).await.unwrap();
    });
    let events = events.lock().unwrap();
    let repair = events
        .iter()
        .find(|e| e.contains("repaired message list on load"))
        .unwrap_or_else(|| panic!("no repair event in {events:?}"));
    assert!(repair.starts_with("WARN"), "{repair}");
    assert!(repair.contains("traced-thread"), "{repair}");
    assert!(repair.contains("changes=1"), "{repair}");
}
