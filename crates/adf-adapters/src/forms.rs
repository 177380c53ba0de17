//! Forms (`application/vnd.adf.form+json`, §11.6): the form JSON read leniently, and its
//! plain-text questionnaire for platforms without native rendering (MSG-45).
//!
//! The shape read: `{form_id? | id?, title?, description?, questions: [{id?, text | question |
//! label, options | choices | answers?: [string | {id?, label | text, value?}]}]}`. Missing
//! ids are positional (`q1`, `a1`, …); a missing `form_id` is the outbox row's id. An answer's
//! `answer_value` is the option's `value`, else its label.

use serde_json::Value;

use crate::error::AdapterError;

/// The content type of a form.
pub const FORM_CONTENT_TYPE: &str = "application/vnd.adf.form+json";

/// A parsed form.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// `form_id`.
    pub form_id: String,
    /// `title`, shown first.
    pub title: Option<String>,
    /// `description`, shown under the title.
    pub description: Option<String>,
    /// The questions, in order.
    pub questions: Vec<FormQuestion>,
}

/// One question.
#[derive(Debug, Clone, PartialEq)]
pub struct FormQuestion {
    /// `question_id`.
    pub id: String,
    /// What is asked.
    pub text: String,
    /// The choices; empty for a free-text answer.
    pub options: Vec<FormOption>,
}

/// One choice of a question.
#[derive(Debug, Clone, PartialEq)]
pub struct FormOption {
    /// `answer_id`.
    pub id: String,
    /// What the button or line shows.
    pub label: String,
    /// `answer_value`.
    pub value: Value,
}

fn text_of(object: &Value, names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|name| object.get(*name).and_then(Value::as_str))
        .map(str::to_owned)
}

impl Form {
    /// Reads a form from its content; `default_id` names it when the content does not.
    pub fn parse(content: &str, default_id: &str) -> Result<Self, AdapterError> {
        let form: Value = serde_json::from_str(content)
            .map_err(|e| AdapterError::Invalid(format!("a form's content must be JSON: {e}")))?;
        let questions = form
            .get("questions")
            .and_then(Value::as_array)
            .filter(|q| !q.is_empty())
            .ok_or_else(|| {
                AdapterError::Invalid(
                    "a form is a JSON object with a non-empty 'questions' array".into(),
                )
            })?;
        let questions = questions
            .iter()
            .enumerate()
            .map(|(q, question)| {
                let text = match question {
                    Value::String(s) => s.clone(),
                    other => text_of(other, &["text", "question", "label", "title"]).ok_or_else(
                        || AdapterError::Invalid(format!("form question {} has no text", q + 1)),
                    )?,
                };
                let options = ["options", "choices", "answers"]
                    .iter()
                    .find_map(|name| question.get(*name).and_then(Value::as_array))
                    .map(|options| {
                        options
                            .iter()
                            .enumerate()
                            .filter_map(|(a, option)| {
                                let label = match option {
                                    Value::String(s) => s.clone(),
                                    Value::Number(n) => n.to_string(),
                                    other => text_of(other, &["label", "text", "title"])
                                        .or_else(|| text_of(other, &["value"]))?,
                                };
                                Some(FormOption {
                                    id: text_of(option, &["id"])
                                        .unwrap_or_else(|| format!("a{}", a + 1)),
                                    value: option
                                        .get("value")
                                        .cloned()
                                        .unwrap_or_else(|| Value::String(label.clone())),
                                    label,
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(FormQuestion {
                    id: text_of(question, &["id"]).unwrap_or_else(|| format!("q{}", q + 1)),
                    text,
                    options,
                })
            })
            .collect::<Result<_, AdapterError>>()?;
        Ok(Form {
            form_id: text_of(&form, &["form_id", "id"]).unwrap_or_else(|| default_id.to_owned()),
            title: text_of(&form, &["title"]),
            description: text_of(&form, &["description"]),
            questions,
        })
    }
}

/// The plain-text questionnaire of a form (MSG-45): the title, then each question numbered
/// with its options lettered, and how to answer.
pub fn questionnaire_text(form: &Form) -> String {
    let mut out = String::new();
    if let Some(title) = &form.title {
        out.push_str(title);
        out.push('\n');
    }
    if let Some(description) = &form.description {
        out.push_str(description);
        out.push('\n');
    }
    for (q, question) in form.questions.iter().enumerate() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("{}. {}\n", q + 1, question.text));
        for (a, option) in question.options.iter().enumerate() {
            out.push_str(&format!("   {}) {}\n", option_letter(a), option.label));
        }
    }
    out.push_str("\nReply with the question number and your answer, e.g. \"1 a\".");
    out
}

fn option_letter(index: usize) -> String {
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    match letters.get(index) {
        Some(letter) => char::from(*letter).to_string(),
        None => (index + 1).to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn msg_45_a_form_renders_as_a_plain_text_questionnaire() {
        let form = Form::parse(
            r#"{"title":"Lunch","questions":[{"id":"main","text":"Main course?","options":["Fish",{"id":"veg","label":"Vegetables","value":"v"}]},{"text":"Anything else?"}]}"#,
            "out-1",
        )
        .unwrap();
        assert_eq!(form.form_id, "out-1");
        assert_eq!(form.questions[0].options[1].id, "veg");
        assert_eq!(
            form.questions[0].options[1].value,
            Value::String("v".into())
        );
        assert_eq!(form.questions[1].id, "q2");
        let text = questionnaire_text(&form);
        for expected in [
            "Lunch",
            "1. Main course?",
            "a) Fish",
            "b) Vegetables",
            "2. Anything else?",
        ] {
            assert!(text.contains(expected), "{expected} missing from {text}");
        }
        assert!(Form::parse(r#"{"questions":[]}"#, "x").is_err());
    }
}
