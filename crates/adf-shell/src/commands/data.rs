//! Data commands: `jq` (the jq language through jaq, evaluated in the bounded jq worker
//! process, `crate::worker`) and `sqlite3` over `db_query` / `db_execute`.

use serde_json::{Value, json};

use crate::commands::fs;
use crate::exec::{Abort, Io, Shell};
use crate::jq_eval::{JqArg, JqRequest};

/// The letter of a long jq option that has one.
fn long_flag(option: &str) -> Option<char> {
    Some(match option {
        "--raw-output" => 'r',
        "--join-output" => 'j',
        "--compact-output" => 'c',
        "--null-input" => 'n',
        "--slurp" => 's',
        "--exit-status" => 'e',
        "--sort-keys" => 'S',
        "--raw-input" => 'R',
        _ => return None,
    })
}

/// Sets what the option letter `flag` asks for; false for a letter jq here does not know.
fn set_flag(options: &mut JqRequest, flag: char) -> bool {
    match flag {
        'r' => options.raw = true,
        'j' => {
            options.raw = true;
            options.join = true;
        }
        'c' => options.compact = true,
        'n' => options.null_input = true,
        's' => options.slurp = true,
        'e' => options.exit_status = true,
        'S' => options.sort_keys = true,
        'R' => options.raw_input = true,
        _ => return false,
    }
    true
}

pub(crate) fn jq(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut options = JqRequest {
        max_output: shell.limits.max_buffer,
        max_depth: shell.limits.max_json_depth,
        ..JqRequest::default()
    };
    let mut filter: Option<String> = None;
    let mut files = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        match arg.as_str() {
            "--tab" => options.tab = true,
            long if let Some(flag) = long_flag(long) => {
                set_flag(&mut options, flag);
            }
            "--arg" | "--argjson" => {
                let (Some(name), Some(value)) = (args.get(index + 1), args.get(index + 2)) else {
                    io.err.push_str(&format!(
                        "jq: {arg} takes two parameters (e.g. {arg} name value)\n"
                    ));
                    return Ok(2);
                };
                options.args.push(JqArg {
                    name: format!("${name}"),
                    text: value.clone(),
                    json: arg == "--argjson",
                });
                index += 2;
            }
            flags if flags.len() > 1 && flags.starts_with('-') && !flags.starts_with("--") => {
                for flag in flags[1..].chars() {
                    if !set_flag(&mut options, flag) {
                        io.err.push_str(&format!("jq: unknown option -{flag} (supported: -r -j -c -n -s -e -S -R --tab --arg --argjson)\n"));
                        return Ok(2);
                    }
                }
            }
            _ if filter.is_none() => filter = Some(arg.clone()),
            _ => files.push(arg.clone()),
        }
        index += 1;
    }
    options.filter = filter.unwrap_or_else(|| ".".into());

    // Read even under -n: `input` and `inputs` take from the same stream as jq's main loop.
    let (texts, status) = fs::inputs(shell, "jq", &files, io);
    if status != 0 {
        return Ok(2);
    }
    let text: String = texts.into_iter().map(|(_, t)| t).collect();
    let run = crate::worker::run_jq(shell, &options, &text)?;
    io.out.push_str(&run.out);
    io.err.push_str(&run.err);
    Ok(run.code)
}

// ---------------------------------------------------------------------------------------------
// sqlite3

pub(crate) fn sqlite3(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut mode = "list";
    let mut header = false;
    let mut separator = "|".to_owned();
    let mut operands = Vec::new();
    let mut index = 0;
    while index < args.len() {
        match args[index].as_str() {
            "-json" | "--json" => mode = "json",
            "-csv" | "--csv" => {
                mode = "csv";
                separator = ",".into();
            }
            "-header" | "--header" | "-headers" => header = true,
            "-noheader" => header = false,
            "-line" => mode = "line",
            "-separator" => {
                index += 1;
                separator = args.get(index).cloned().unwrap_or_else(|| "|".into());
            }
            other if other.starts_with('-') => {
                return Ok(io.fail(
                    "sqlite3",
                    format!("unsupported option '{other}' (use -json, -csv, -header, -separator)"),
                ));
            }
            other => operands.push(other.to_owned()),
        }
        index += 1;
    }
    // `sqlite3 [DB] [SQL]`: the database is always the agent's own; a lone operand ending in
    // .db/.sqlite/.adf names it, otherwise it is the SQL.
    let sql = match operands.as_slice() {
        [] => std::mem::take(&mut io.stdin),
        [only] if is_db_name(only) => std::mem::take(&mut io.stdin),
        [only] => only.clone(),
        [_, rest @ ..] => rest.join(" "),
    };
    let mut status = 0;
    for statement in split_statements(&sql) {
        let upper = statement.trim_start().to_ascii_uppercase();
        let reads = ["SELECT", "WITH", "VALUES", "PRAGMA", "EXPLAIN"]
            .iter()
            .any(|k| upper.starts_with(k));
        let tool = if reads { "db_query" } else { "db_execute" };
        match shell.host.call(tool, json!({ "sql": statement })) {
            Ok(result) if reads => print_rows(&result, mode, header, &separator, io),
            Ok(_) => {}
            Err(error) => {
                io.err.push_str(&format!("Error: {}\n", error.message));
                status = 1;
                break;
            }
        }
    }
    Ok(status)
}

fn is_db_name(text: &str) -> bool {
    [".db", ".sqlite", ".sqlite3", ".adf"]
        .iter()
        .any(|e| text.ends_with(e))
        && !text.contains(' ')
}

/// Statements split on `;` outside quotes.
fn split_statements(sql: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                current.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                current.push(c);
            }
            (None, ';') => {
                if !current.trim().is_empty() {
                    statements.push(std::mem::take(&mut current).trim().to_owned());
                }
                current.clear();
            }
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        statements.push(current.trim().to_owned());
    }
    statements
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_rows(result: &Value, mode: &str, header: bool, separator: &str, io: &mut Io) {
    let columns: Vec<String> = result
        .get("columns")
        .and_then(Value::as_array)
        .map(|c| c.iter().map(cell).collect())
        .unwrap_or_default();
    let rows = result
        .get("rows")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match mode {
        "json" => {
            if !rows.is_empty() {
                io.out.push_str(&Value::Array(rows.clone()).to_string());
                io.out.push('\n');
            }
        }
        "line" => {
            let width = columns.iter().map(String::len).max().unwrap_or(0);
            for (at, row) in rows.iter().enumerate() {
                if at > 0 {
                    io.out.push('\n');
                }
                for column in &columns {
                    let value = row.get(column).map(cell).unwrap_or_default();
                    io.out.push_str(&format!("{column:>width$} = {value}\n"));
                }
            }
        }
        _ => {
            let quote = |text: String| {
                if mode == "csv"
                    && (text.contains(',') || text.contains('"') || text.contains('\n'))
                {
                    format!("\"{}\"", text.replace('"', "\"\""))
                } else {
                    text
                }
            };
            if header && !rows.is_empty() {
                io.out.push_str(
                    &columns
                        .iter()
                        .cloned()
                        .map(quote)
                        .collect::<Vec<_>>()
                        .join(separator),
                );
                io.out.push('\n');
            }
            for row in &rows {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|c| quote(row.get(c).map(cell).unwrap_or_default()))
                    .collect();
                io.out.push_str(&cells.join(separator));
                io.out.push('\n');
            }
        }
    }
    if let Some(footer) = result.get("footer").and_then(Value::as_str) {
        io.err.push_str(footer);
        io.err.push('\n');
    }
}
