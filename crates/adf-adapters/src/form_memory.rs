//! What an adapter remembers of the forms it sent, so an answer coming back (a button press, a
//! select, a reply) maps to its form, question and choice: `forms.json` in the adapter's state
//! directory, numbered in sending order, the oldest forgotten first past a cap.

use serde_json::{Value, json};

use crate::error::AdapterError;
use crate::state_dir::StateDir;

/// The file in each adapter's state directory.
const FORMS_FILE: &str = "forms.json";

/// One remembered choice (or question answered in words) as the platform hands it back.
#[derive(Debug, Clone)]
pub(crate) struct FormButton {
    pub(crate) outbox_id: String,
    pub(crate) form_id: String,
    pub(crate) question_id: String,
    /// `None` for a question answered in words (a reply to the question's message).
    pub(crate) answer_id: Option<String>,
    pub(crate) answer_value: Value,
    pub(crate) label: String,
}

impl FormButton {
    /// The button an entry [`FormMemory::remember`] stored describes, if it has the ids.
    pub(crate) fn from_entry(entry: &Value) -> Option<Self> {
        let text = |name: &str| entry.get(name).and_then(Value::as_str).map(str::to_owned);
        Some(FormButton {
            outbox_id: text("outbox_id")?,
            form_id: text("form_id")?,
            question_id: text("question_id")?,
            answer_id: text("answer_id"),
            answer_value: entry.get("answer_value").cloned().unwrap_or(Value::Null),
            label: text("label").unwrap_or_default(),
        })
    }
}

/// The forms one adapter sent; writes are serialised, reads are plain file reads.
#[derive(Debug)]
pub(crate) struct FormMemory {
    state: StateDir,
    /// The object holding the entries; named per platform so state written before stays
    /// readable (`buttons`, `answers`, `forms`).
    entries_key: &'static str,
    cap: usize,
    writing: tokio::sync::Mutex<()>,
}

impl FormMemory {
    /// The memory in `state`'s `forms.json`, entries under `entries_key`, at most `cap`.
    pub(crate) fn new(state: StateDir, entries_key: &'static str, cap: usize) -> Self {
        FormMemory {
            state,
            entries_key,
            cap,
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// Adds entries: `make` gets the next free sequence number (a platform may put it in its
    /// button ids, advancing it for each it uses) and returns `(key, entry)` pairs; each entry
    /// gets its own `seq`, and the oldest past the cap are forgotten.
    pub(crate) async fn remember(
        &self,
        make: impl FnOnce(&mut u64) -> Vec<(String, Value)>,
    ) -> Result<(), AdapterError> {
        let _writing = self.writing.lock().await;
        let mut forms = self
            .state
            .read_json(FORMS_FILE)?
            .unwrap_or_else(|| json!({ "next": 1, self.entries_key: {} }));
        let mut next = forms.get("next").and_then(Value::as_u64).unwrap_or(1);
        let mut entries = forms
            .get(self.entries_key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (key, mut entry) in make(&mut next) {
            if let Some(object) = entry.as_object_mut() {
                object.insert("seq".into(), json!(next));
            }
            next += 1;
            entries.insert(key, entry);
        }
        if entries.len() > self.cap {
            let mut by_age: Vec<(u64, String)> = entries
                .iter()
                .map(|(k, v)| (v.get("seq").and_then(Value::as_u64).unwrap_or(0), k.clone()))
                .collect();
            by_age.sort();
            let excess = entries.len() - self.cap;
            for (_, key) in by_age.into_iter().take(excess) {
                entries.remove(&key);
            }
        }
        if let Some(object) = forms.as_object_mut() {
            object.insert("next".into(), json!(next));
            object.insert(self.entries_key.into(), Value::Object(entries));
        }
        self.state.write_json(FORMS_FILE, &forms)
    }

    /// The entry stored under `key`, if remembered (an unreadable file remembers nothing).
    pub(crate) fn recall(&self, key: &str) -> Option<Value> {
        let forms = self.state.read_json(FORMS_FILE).ok().flatten()?;
        forms.get(self.entries_key)?.get(key).cloned()
    }

    /// The button stored under `key`, if remembered.
    pub(crate) fn button(&self, key: &str) -> Option<FormButton> {
        FormButton::from_entry(&self.recall(key)?)
    }
}
