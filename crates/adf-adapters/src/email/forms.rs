//! Form answers read from a reply to a questionnaire (`crate::forms::questionnaire_text`):
//! lines such as `1 a`, `1) b`, `2. Fish` or `3 free words` answer the numbered question; a
//! letter, an option number or an option's label picks a choice. Quoted lines (`>`) and
//! everything after the usual "On … wrote:" are the questionnaire itself, not answers. A form
//! of one question also takes the first unquoted line as its answer.

use serde_json::{Value, json};

use crate::forms::{Form, FormQuestion};

/// One answer found in a reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) question_id: String,
    pub(crate) answer_id: Option<String>,
    pub(crate) answer_value: Value,
}

/// The line a mail client puts above the quoted original.
fn is_quote_intro(line: &str) -> bool {
    (line.starts_with("On ") && line.ends_with("wrote:"))
        || line.starts_with("-----Original Message")
}

/// The reply's own lines: not quoted, before the quoted original.
fn own_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .take_while(|line| !is_quote_intro(line))
        .filter(|line| !line.is_empty() && !line.starts_with('>'))
}

fn choose(question: &FormQuestion, answer: &str) -> Answer {
    let answer = answer.trim();
    let lower = answer.to_lowercase();
    let picked = question.options.iter().enumerate().find(|(a, option)| {
        let letter = u8::try_from(*a)
            .ok()
            .filter(|a| *a < 26)
            .map(|a| char::from(b'a' + a).to_string());
        letter.as_deref() == Some(lower.trim_end_matches(')'))
            || lower == (a + 1).to_string()
            || lower == option.label.to_lowercase()
    });
    match picked {
        Some((_, option)) => Answer {
            question_id: question.id.clone(),
            answer_id: Some(option.id.clone()),
            answer_value: option.value.clone(),
        },
        None => Answer {
            question_id: question.id.clone(),
            answer_id: None,
            answer_value: json!(answer),
        },
    }
}

/// The answers in `reply` to `form`, in question order, one per question at most.
pub(crate) fn parse_answers(form: &Form, reply: &str) -> Vec<Answer> {
    let mut found: Vec<Option<Answer>> = vec![None; form.questions.len()];
    for line in own_lines(reply) {
        let digits: String = line.chars().take_while(char::is_ascii_digit).collect();
        let Ok(number) = digits.parse::<usize>() else {
            continue;
        };
        let rest = line
            .get(digits.len()..)
            .unwrap_or_default()
            .trim_start_matches(['.', ')', ':', '-', ' ', '\t']);
        if rest.is_empty() {
            continue;
        }
        if let Some(question) = number.checked_sub(1).and_then(|q| form.questions.get(q))
            && let Some(slot) = found.get_mut(number - 1)
            && slot.is_none()
        {
            *slot = Some(choose(question, rest));
        }
    }
    if form.questions.len() == 1
        && found.first().is_some_and(Option::is_none)
        && let (Some(question), Some(line)) = (form.questions.first(), own_lines(reply).next())
    {
        found[0] = Some(choose(question, line));
    }
    found.into_iter().flatten().collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn msg_46_numbered_lines_answer_questions_and_quoted_lines_do_not() {
        let form = Form::parse(
            r#"{"form_id":"lunch","questions":[{"id":"main","text":"Main?","options":["Fish",{"id":"veg","label":"Vegetables","value":"v"}]},{"id":"note","text":"Anything else?"}]}"#,
            "out-1",
        )
        .unwrap();
        let reply = "1 b\n2) no nuts please\n\nOn Mon, agent wrote:\n> 1. Main?\n> 1 a\n";
        let answers = parse_answers(&form, reply);
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0].question_id, "main");
        assert_eq!(answers[0].answer_id.as_deref(), Some("veg"));
        assert_eq!(answers[0].answer_value, json!("v"));
        assert_eq!(answers[1].question_id, "note");
        assert_eq!(answers[1].answer_id, None);
        assert_eq!(answers[1].answer_value, json!("no nuts please"));
        let by_label = parse_answers(&form, "1. fish\n");
        assert_eq!(by_label[0].answer_value, json!("Fish"));
        let single = Form::parse(
            r#"{"questions":[{"text":"Ok?","options":["yes","no"]}]}"#,
            "f",
        )
        .unwrap();
        assert_eq!(
            parse_answers(&single, "no\n> 1. Ok?")[0].answer_value,
            json!("no")
        );
    }
}
