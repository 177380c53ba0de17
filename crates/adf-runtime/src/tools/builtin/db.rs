//! Built-in tools: `db_query` and `db_execute` (spec §3.4, §10.3, tools guide "Database Tools").
//!
//! The statement itself runs in `adf_store::sql`, whose authorizer decides what an agent's SQL
//! may touch; this module turns arguments into bound values and results into JSON.
//!
//! - `db_query {sql, params?}` → `{columns, rows, row_count, total_rows, truncated, footer?}`.
//!   `rows` are objects keyed by column name (a repeated name gets a `:2`, `:3` … suffix, and
//!   `columns` lists the keys as used), because both a model and code read `row.status` more
//!   reliably than a position. At most 500 rows are returned; `total_rows` and the `footer`
//!   give the full count. Code may pass `_full: true` for every row.
//! - `db_execute {sql, params?}` → `{changes, last_insert_rowid}`.
//!
//! Values: `params` bind positionally (`?`, `?NNN`); `null`, booleans (0/1), numbers and
//! strings bind as themselves, `{"$blob": "<base64>"}` binds a BLOB, and any other array or
//! object binds as its JSON text (what `vec0` accepts as a vector). Result BLOBs come back to
//! code as `{"$blob": "<base64>"}` and to the model as `{"$blob_bytes": n}`: base64 of an
//! embedding is only noise in a context window. Non-finite reals come back as strings.
//!
//! A statement runs for at most `limits.execution_timeout_ms` (60000), the budget of one code
//! execution, under the store's agent SQL limits (values of at most 8 MiB, 100 columns, a
//! 64 MiB result, …: `adf_store::sql::AGENT_SQLITE_LIMITS`); reaching one is an
//! `INVALID_INPUT` error naming the limit.

use std::sync::Arc;
use std::time::Duration;

use adf_store::sql::{SqlError, SqlLimits, SqlValue};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use crate::tools::{ErrorCode, Tool, ToolContext, ToolError};

/// Rows `db_query` returns unless code asks for `_full` (tools guide).
pub const MAX_QUERY_ROWS: usize = 500;

/// Default of `limits.execution_timeout_ms` (§5.7).
const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(DbQuery), Arc::new(DbExecute)]
}

fn sql_parameters(sql_description: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "sql": { "type": "string", "minLength": 1, "description": sql_description },
            "params": {
                "type": "array",
                "description": "Values for the ? placeholders, in order. {\"$blob\": \"<base64>\"} binds a BLOB; arrays bind as JSON text (vec0 vectors)."
            }
        },
        "required": ["sql"],
        "additionalProperties": false
    })
}

#[derive(Debug)]
struct DbQuery;

impl Tool for DbQuery {
    declare_tool! {
        name: "db_query",
        description: "Run one read-only SELECT on local_* tables or adf_loop, adf_inbox, adf_outbox, adf_timers, adf_files, adf_audit, adf_logs, adf_tasks. At most 500 rows are returned; add LIMIT/OFFSET for more.",
        parameters: sql_parameters("One SELECT (or WITH … SELECT, VALUES) statement"),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let max_rows = (!cx.full).then_some(MAX_QUERY_ROWS);
        let (sql, params, limits) = sql_request(cx, &args, max_rows)?;
        let output = cx
            .file
            .sql_query(sql, &params, &limits)
            .map_err(tool_error)?;
        let inline_blobs = !cx.caller.is_model();
        let columns = unique_keys(&output.columns);
        let rows: Vec<Value> = output
            .rows
            .iter()
            .map(|row| {
                let object: Map<String, Value> = columns
                    .iter()
                    .zip(row)
                    .map(|(column, value)| (column.clone(), to_json(value, inline_blobs)))
                    .collect();
                Value::Object(object)
            })
            .collect();
        let mut result = json!({
            "columns": columns,
            "row_count": rows.len(),
            "total_rows": output.total_rows,
            "truncated": output.truncated,
            "rows": rows,
        });
        if output.truncated {
            result["footer"] = Value::String(format!(
                "Showing {} of {} rows. Add LIMIT/OFFSET to read the rest, or pass _full: true from code.",
                output.rows.len(),
                output.total_rows
            ));
        }
        Ok(result)
    }
}

#[derive(Debug)]
struct DbExecute;

impl Tool for DbExecute {
    declare_tool! {
        name: "db_execute",
        description: "Run one INSERT, UPDATE, DELETE, CREATE TABLE, CREATE INDEX, CREATE VIRTUAL TABLE (vec0) or DROP TABLE on local_* tables. System adf_* tables cannot be changed.",
        parameters: sql_parameters("One statement on local_* tables"),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let caller = cx.store_caller();
        let (sql, params, limits) = sql_request(cx, &args, None)?;
        let output = cx
            .file
            .sql_execute(caller, sql, &params, &limits)
            .map_err(tool_error)?;
        Ok(json!({
            "changes": output.changes,
            "last_insert_rowid": output.last_insert_rowid,
        }))
    }
}

/// The statement, its parameters and the limits it runs under (`max_rows`, and the agent's
/// `execution_timeout_ms`).
fn sql_request<'a>(
    cx: &ToolContext<'_>,
    args: &'a Value,
    max_rows: Option<usize>,
) -> Result<(&'a str, Vec<SqlValue>, SqlLimits), ToolError> {
    let (sql, params) = sql_and_params(args)?;
    let limits = SqlLimits {
        max_rows,
        timeout: Some(Duration::from_millis(
            cx.limit("execution_timeout_ms", DEFAULT_TIMEOUT_MS),
        )),
        ..SqlLimits::default()
    };
    Ok((sql, params, limits))
}

fn sql_and_params(args: &Value) -> Result<(&str, Vec<SqlValue>), ToolError> {
    let sql = args
        .get("sql")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid("'sql' is required"))?;
    let params = match args.get("params") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(values)) => values
            .iter()
            .enumerate()
            .map(|(index, value)| {
                to_sql(value).map_err(|e| ToolError::invalid(format!("params[{index}]: {e}")))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ToolError::invalid("'params' must be an array")),
    };
    Ok((sql, params))
}

fn to_sql(value: &Value) -> Result<SqlValue, String> {
    Ok(match value {
        Value::Null => SqlValue::Null,
        Value::Bool(flag) => SqlValue::Integer(i64::from(*flag)),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => SqlValue::Integer(integer),
            None => SqlValue::Real(number.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => SqlValue::Text(text.clone()),
        Value::Object(object) if object.len() == 1 && object.contains_key("$blob") => {
            let encoded = object
                .get("$blob")
                .and_then(Value::as_str)
                .ok_or("$blob must be a base64 string")?;
            SqlValue::Blob(
                BASE64
                    .decode(encoded)
                    .map_err(|e| format!("$blob is not valid base64: {e}"))?,
            )
        }
        other => SqlValue::Text(other.to_string()),
    })
}

fn to_json(value: &SqlValue, inline_blobs: bool) -> Value {
    match value {
        SqlValue::Null => Value::Null,
        SqlValue::Integer(integer) => json!(integer),
        SqlValue::Real(real) => serde_json::Number::from_f64(*real)
            .map_or_else(|| Value::String(real.to_string()), Value::Number),
        SqlValue::Text(text) => Value::String(text.clone()),
        SqlValue::Blob(bytes) if inline_blobs => json!({ "$blob": BASE64.encode(bytes) }),
        SqlValue::Blob(bytes) => json!({ "$blob_bytes": bytes.len() }),
    }
}

/// Column names made unique, so no value is lost when rows become objects.
fn unique_keys(columns: &[String]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(columns.len());
    for column in columns {
        let mut key = column.clone();
        let mut suffix = 2;
        while keys.contains(&key) {
            key = format!("{column}:{suffix}");
            suffix += 1;
        }
        keys.push(key);
    }
    keys
}

fn tool_error(error: SqlError) -> ToolError {
    let message = error.to_string();
    match error {
        SqlError::Refused { write: false, .. }
        | SqlError::Invalid(_)
        | SqlError::LimitExceeded(_) => ToolError::new(ErrorCode::InvalidInput, message),
        SqlError::Refused { write: true, .. } | SqlError::Protected { .. } => {
            // Table protections are hard refusals (§5.6), not owner-approvable overrides, so
            // the error carries no protection hit.
            ToolError::new(ErrorCode::WriteError, message)
        }
        SqlError::RequiresAuthorizedCode { .. } => {
            ToolError::new(ErrorCode::RequiresAuthorizedCode, message)
        }
        SqlError::Timeout(_) => ToolError::new(ErrorCode::Timeout, message),
        SqlError::Store(store) => ToolError::from(store),
        _ => ToolError::failed(message),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn repeated_column_names_get_suffixes() {
        let columns = ["id", "id", "name", "id"].map(String::from);
        assert_eq!(unique_keys(&columns), ["id", "id:2", "name", "id:3"]);
    }

    #[test]
    fn params_convert_by_json_type() {
        assert_eq!(to_sql(&json!(true)).unwrap(), SqlValue::Integer(1));
        assert_eq!(to_sql(&json!(1.5)).unwrap(), SqlValue::Real(1.5));
        assert_eq!(
            to_sql(&json!([0.5, 1])).unwrap(),
            SqlValue::Text("[0.5,1]".into())
        );
        assert_eq!(
            to_sql(&json!({"$blob": "AAE="})).unwrap(),
            SqlValue::Blob(vec![0, 1])
        );
        assert!(to_sql(&json!({"$blob": "%%"})).is_err());
    }

    #[test]
    fn blobs_render_for_code_and_model() {
        let blob = SqlValue::Blob(vec![1, 2, 3]);
        assert_eq!(to_json(&blob, true), json!({"$blob": "AQID"}));
        assert_eq!(to_json(&blob, false), json!({"$blob_bytes": 3}));
        assert_eq!(to_json(&SqlValue::Real(f64::INFINITY), true), json!("inf"));
    }
}
