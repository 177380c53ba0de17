//! A structural scan of a JSON object's top level, for the zero-latency mode's request check.
//!
//! Deserializing a request of the runtime (about 20 KB of tool schemas and history) only to
//! read three small fields cost serde_json about 13 instructions a byte, more than the whole
//! client side of a turn: the mock stands in for the vendor, and its work inflates the figure
//! a benchmark of the runtime reports. This scan jumps through strings with `memchr` and
//! checks the structure (strings closed, brackets matched and nested, a key and a colon before
//! every top-level value, nothing after the object); it does not check the spelling of
//! numbers and literals, which the scripted modes (a full `serde_json` parse) still do.
//!
//! Most of a runtime's request repeats the last one: the tool list is the same bytes, and the
//! history is the last history plus a few messages. A value that starts with the bytes of the
//! same key's value in the last body that passed is not scanned again up to there (the
//! strings of a request are short, so even jumping through them with `memchr` left the scan
//! at about 7 instructions a byte).

use axum::body::Bytes;

/// The raw bytes of each top-level `(key, value)` of the JSON object in `body`, keys without
/// their quotes (escapes left as written), or `None` when `body` is not structurally a JSON
/// object. `prior` holds the fields of an earlier body that passed.
pub(crate) fn top_level_fields<'a>(
    body: &'a [u8],
    prior: &[(Bytes, Bytes)],
) -> Option<Vec<(&'a [u8], &'a [u8])>> {
    let mut at = skip_ws(body, 0);
    if body.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(body, at + 1);
    let mut fields = Vec::new();
    if body.get(at) == Some(&b'}') {
        return (skip_ws(body, at + 1) == body.len()).then_some(fields);
    }
    loop {
        if body.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(body, at + 1)?;
        let key = &body[at + 1..key_end - 1];
        at = skip_ws(body, key_end);
        if body.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_ws(body, at + 1);
        let before = prior
            .iter()
            .find(|(name, _)| name.as_ref() == key)
            .map(|(_, value)| value.as_ref());
        let end = match before.and_then(|value| known_value_end(body, start, value)) {
            Some(end) => end,
            None => value_end(body, start)?,
        };
        fields.push((key, &body[start..end]));
        at = skip_ws(body, end);
        match body.get(at) {
            Some(b',') => at = skip_ws(body, at + 1),
            Some(b'}') => {
                return (skip_ws(body, at + 1) == body.len()).then_some(fields);
            }
            _ => return None,
        }
    }
}

fn skip_ws(body: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = body.get(at) {
        at += 1;
    }
    at
}

/// The index just past the closing quote of the string whose contents start at `at`.
fn string_end(body: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let found = at + memchr::memchr2(b'"', b'\\', body.get(at..)?)?;
        if body[found] == b'"' {
            return Some(found + 1);
        }
        // An escape: the next byte is escaped, whatever it is (`\"` included).
        at = found + 2;
    }
}

/// Where the value at `at` ends when its bytes start with `value`, a value that passed: all
/// of it, followed by a delimiter, is that value again; an array's elements up to its closing
/// bracket are elements of this array, whose scan goes on from there.
fn known_value_end(body: &[u8], at: usize, value: &[u8]) -> Option<usize> {
    let here = body.get(at..)?;
    if here.starts_with(value) {
        let end = at + value.len();
        // A number could go on ("1" then "12"); every other value ends at its last byte.
        let delimited = matches!(
            body.get(end),
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
        );
        return delimited.then_some(end);
    }
    let elements = value.strip_prefix(b"[")?.strip_suffix(b"]")?;
    let continues =
        here.first() == Some(&b'[') && here.get(1..).is_some_and(|rest| rest.starts_with(elements));
    if elements.is_empty() || !continues {
        return None;
    }
    container_end_from(body, at + 1 + elements.len(), vec![b'['])
}

/// The index just past the value starting at `at`.
fn value_end(body: &[u8], at: usize) -> Option<usize> {
    match *body.get(at)? {
        b'"' => string_end(body, at + 1),
        b'{' | b'[' => container_end(body, at),
        _ => {
            // A number or literal runs to the next delimiter; it must not be empty.
            let len = body[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(body.len() - at);
            (len > 0 && !body[at..at + len].contains(&b'"')).then_some(at + len)
        }
    }
}

/// The index just past the object or array opening at `at`, each closer matching its opener.
fn container_end(body: &[u8], at: usize) -> Option<usize> {
    container_end_from(body, at + 1, vec![body[at]])
}

/// The index just past the containers `open` (innermost last), scanning from `i`.
fn container_end_from(body: &[u8], mut i: usize, mut open: Vec<u8>) -> Option<usize> {
    while let Some(&byte) = body.get(i) {
        match byte {
            b'"' => {
                i = string_end(body, i + 1)?;
                continue;
            }
            b'{' | b'[' => open.push(byte),
            b'}' | b']' => {
                let opener = open.pop()?;
                if (opener == b'{') != (byte == b'}') {
                    return None;
                }
                if open.is_empty() {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::body::Bytes;

    use super::top_level_fields;

    fn fields(body: &str) -> Option<Vec<(String, String)>> {
        fields_after(body, &[])
    }

    fn fields_after(body: &str, prior: &[(Bytes, Bytes)]) -> Option<Vec<(String, String)>> {
        top_level_fields(body.as_bytes(), prior).map(|fields| {
            fields
                .into_iter()
                .map(|(k, v)| {
                    (
                        String::from_utf8(k.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    )
                })
                .collect()
        })
    }

    #[test]
    fn top_level_values_come_back_raw_with_nested_strings_skipped() {
        let body = r#" { "model" : "m\"x" , "tools":[{"d":"a } ] \\"},[1,{}]],"stream":true,"n":-1.5e3,"o":{"include_usage":false} } "#;
        assert_eq!(
            fields(body).unwrap(),
            [
                ("model", r#""m\"x""#),
                ("tools", r#"[{"d":"a } ] \\"},[1,{}]]"#),
                ("stream", "true"),
                ("n", "-1.5e3"),
                ("o", r#"{"include_usage":false}"#),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(fields("{}").unwrap(), []);
    }

    #[test]
    fn bodies_that_are_not_structurally_objects_are_refused() {
        for body in [
            "",
            "[1]",
            "\"text\"",
            "null",
            "{",
            "{\"a\":1",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "{\"a\":}",
            "{\"a\":[1}",
            "{\"a\":{\"b\":1]}",
            "{\"a\":\"open}",
            "{\"a\":1} x",
            "{\"a\":1}{}",
        ] {
            assert_eq!(fields(body), None, "{body:?}");
        }
    }

    /// The prior fields of a body that passed save scanning, never the verdict: each body
    /// gets with them what it gets without.
    #[test]
    fn values_repeating_an_earlier_body_read_as_they_do_alone() {
        let first = r#"{"model":"m","messages":[{"a":"x"},[1]],"tools":[{"t":"]"}],"n":1}"#;
        let prior: Vec<(Bytes, Bytes)> = fields(first)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
            .collect();
        for body in [
            first,
            r#"{"model":"m","messages":[{"a":"x"},[1],{"b":"}"}],"tools":[{"t":"]"}],"n":12}"#,
            r#"{"model":"m","messages":[{"a":"x"},[1],{"b":"}"}}],"tools":[{"t":"]"}],"n":1}"#,
            r#"{"model":"m","messages":[{"a":"x"},[1],[}],"tools":[{"t":"]"}],"n":1}"#,
            r#"{"model":"m","messages":[{"a":"x"},[1]],"tools":[{"t":"]"}]x,"n":1}"#,
            r#"{"model":"m","messages":[{"a":"x"},[1]],"tools":[{"t":"]"}],"n":1"#,
            r#"{"model":"m","messages":[{"a":"x"},[1],"open],"tools":[],"n":1}"#,
            r#"{"messages":[{"a":"x"},[1]] ,"model" : "m","n":1 }"#,
        ] {
            assert_eq!(fields_after(body, &prior), fields(body), "{body}");
        }
        assert!(fields_after(first, &prior).is_some());
        assert!(
            fields_after(
                r#"{"model":"m","messages":[{"a":"x"},[1],{"b":"}"}}],"n":1}"#,
                &prior
            )
            .is_none()
        );
    }
}
