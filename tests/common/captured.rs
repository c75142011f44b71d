//! A `tracing` subscriber that keeps each event as one line of text: its level, its fields
//! (`name=value`, the message as `message=...`), for tests to search.

use std::sync::{Arc, Mutex};

/// Events captured, one line each.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut f = Fields(format!("{} ", event.metadata().level()));
        event.record(&mut f);
        self.0.lock().unwrap().push(f.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Captured {
    /// Whether one event's line holds every one of `words`.
    pub fn any(&self, words: &[&str]) -> bool {
        let lines = self.0.lock().unwrap();
        lines.iter().any(|l| words.iter().all(|w| l.contains(w)))
    }

    /// The lines captured so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}
