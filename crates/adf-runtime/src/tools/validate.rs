//! Argument validation against a tool's JSON Schema.
//!
//! Tool schemas use a small, fixed subset of JSON Schema (`type` as a name or a list, `properties`,
//! `required`, `enum`, `minimum`/`maximum`, `minLength`/`maxLength`, `items`,
//! `additionalProperties: false`, `oneOf` of such objects). Checking that subset by hand keeps a
//! heavy validator out of the build; a schema keyword outside it is ignored, never guessed at.

use serde_json::Value;

/// Checks `value` against `schema`; the error names the first offending parameter.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "")
}

fn type_matches(kind: &str, value: &Value) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn describe(path: &str) -> String {
    if path.is_empty() {
        "the arguments".to_owned()
    } else {
        format!("'{path}'")
    }
}

fn check(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let errors: Vec<String> = options
            .iter()
            .filter_map(|option| check(option, value, path).err())
            .collect();
        if errors.len() == options.len() {
            return Err(errors
                .into_iter()
                .next()
                .unwrap_or_else(|| format!("{} matches no allowed form", describe(path))));
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) if !type_matches(kind, value) => {
            return Err(format!("{} must be of type {kind}", describe(path)));
        }
        Some(Value::Array(kinds))
            if !kinds
                .iter()
                .filter_map(Value::as_str)
                .any(|k| type_matches(k, value)) =>
        {
            let names: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
            return Err(format!(
                "{} must be of type {}",
                describe(path),
                names.join(" or ")
            ));
        }
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let names: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(format!(
            "{} must be one of {}",
            describe(path),
            names.join(", ")
        ));
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && number < min
        {
            return Err(format!("{} must be at least {min}", describe(path)));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && number > max
        {
            return Err(format!("{} must be at most {max}", describe(path)));
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && length < min
        {
            return Err(format!(
                "{} must be at least {min} characters",
                describe(path)
            ));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && length > max
        {
            return Err(format!(
                "{} must be at most {max} characters",
                describe(path)
            ));
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (index, item) in array.iter().enumerate() {
            check(items, item, &format!("{path}[{index}]"))?;
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = required.as_str()
                && object.get(name).is_none_or(Value::is_null)
            {
                return Err(format!("missing required parameter '{}'", join(path, name)));
            }
        }
        for (key, item) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(property) => check(property, item, &join(path, key))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("unknown parameter '{}'", join(path, key)));
                }
                None => {}
            }
        }
    }
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_the_subset() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "minLength": 1 },
                "mode": { "type": "string", "enum": ["write", "append"] },
                "n": { "type": "integer", "minimum": 1 },
                "tags": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["path"],
            "additionalProperties": false
        });
        assert!(
            validate(
                &schema,
                &json!({ "path": "a", "mode": "write", "n": 2, "tags": ["x"] })
            )
            .is_ok()
        );
        assert!(validate(&schema, &json!({})).unwrap_err().contains("path"));
        assert!(validate(&schema, &json!({ "path": "a", "mode": "x" })).is_err());
        assert!(validate(&schema, &json!({ "path": "a", "n": 0 })).is_err());
        assert!(
            validate(&schema, &json!({ "path": "a", "tags": [1] }))
                .unwrap_err()
                .contains("tags[0]")
        );
        assert!(
            validate(&schema, &json!({ "path": "a", "zzz": 1 }))
                .unwrap_err()
                .contains("zzz")
        );
        assert!(validate(&schema, &json!("not an object")).is_err());
    }
}
