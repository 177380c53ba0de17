//! Data commands: `jq` (the jq language through jaq, run synchronously: its values are `Rc`)
//! and `sqlite3` over `db_query` / `db_execute`.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, unwrap_valr};
use jaq_json::Val;
use jaq_std::input::{HasInputs, Inputs, RcIter};
use serde_json::{Value, json};

use crate::commands::fs;
use crate::exec::{Abort, Io, Shell};

struct JqOptions {
    raw: bool,
    join: bool,
    compact: bool,
    null_input: bool,
    slurp: bool,
    exit_status: bool,
    sort_keys: bool,
    tab: bool,
    raw_input: bool,
    names: Vec<String>,
    values: Vec<Val>,
}

pub(crate) fn jq(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut options = JqOptions {
        raw: false,
        join: false,
        compact: false,
        null_input: false,
        slurp: false,
        exit_status: false,
        sort_keys: false,
        tab: false,
        raw_input: false,
        names: Vec::new(),
        values: Vec::new(),
    };
    let mut filter: Option<String> = None;
    let mut files = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        match arg.as_str() {
            "--raw-output" => options.raw = true,
            "--join-output" => {
                options.raw = true;
                options.join = true;
            }
            "--compact-output" => options.compact = true,
            "--null-input" => options.null_input = true,
            "--slurp" => options.slurp = true,
            "--exit-status" => options.exit_status = true,
            "--sort-keys" => options.sort_keys = true,
            "--raw-input" => options.raw_input = true,
            "--tab" => options.tab = true,
            "--arg" | "--argjson" => {
                let (Some(name), Some(value)) = (args.get(index + 1), args.get(index + 2)) else {
                    io.err.push_str(&format!(
                        "jq: {arg} takes two parameters (e.g. {arg} name value)\n"
                    ));
                    return Ok(2);
                };
                let value = if arg == "--arg" {
                    Val::from(value.clone())
                } else {
                    match jaq_json::read::parse_single(value.as_bytes()) {
                        Ok(value) => value,
                        Err(_) => {
                            io.err.push_str(&format!(
                                "jq: invalid JSON text passed to --argjson: {value}\n"
                            ));
                            return Ok(2);
                        }
                    }
                };
                options.names.push(format!("${name}"));
                options.values.push(value);
                index += 2;
            }
            flags if flags.len() > 1 && flags.starts_with('-') && !flags.starts_with("--") => {
                for flag in flags[1..].chars() {
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
                        other => {
                            io.err.push_str(&format!("jq: unknown option -{other} (supported: -r -j -c -n -s -e -S -R --tab --arg --argjson)\n"));
                            return Ok(2);
                        }
                    }
                }
            }
            _ if filter.is_none() => filter = Some(arg.clone()),
            _ => files.push(arg.clone()),
        }
        index += 1;
    }
    let filter = filter.unwrap_or_else(|| ".".into());

    // Read even under -n: `input` and `inputs` take from the same stream as jq's main loop.
    let (texts, status) = fs::inputs(shell, "jq", &files, io);
    if status != 0 {
        return Ok(2);
    }
    let text: String = texts.into_iter().map(|(_, t)| t).collect();
    let values: Box<dyn Iterator<Item = Result<Val, String>> + '_> = if options.raw_input {
        if options.slurp {
            Box::new(std::iter::once(Ok(Val::from(text.clone()))))
        } else {
            Box::new(
                super::text::lines(&text)
                    .into_iter()
                    .map(|l| Ok(Val::from(l.to_owned()))),
            )
        }
    } else if options.slurp {
        let mut values = Vec::new();
        for value in jaq_json::read::parse_many(text.as_bytes()) {
            match value {
                Ok(value) => values.push(value),
                Err(error) => {
                    io.err.push_str(&format!(
                        "jq: error (at <stdin>:0): {CANNOT_PARSE}: {error}\n"
                    ));
                    return Ok(2);
                }
            }
        }
        Box::new(std::iter::once(Ok(values.into_iter().collect::<Val>())))
    } else {
        // Parsed as consumed, like jq: values before a malformed one are still processed,
        // and the stream ends at the first error.
        let mut failed = false;
        Box::new(
            jaq_json::read::parse_many(text.as_bytes()).map_while(move |value| {
                if failed {
                    return None;
                }
                failed = value.is_err();
                Some(value.map_err(|error| format!("{CANNOT_PARSE}: {error}")))
            }),
        )
    };
    run_filter(&filter, &options, values, io)
}

/// `inputs` from jaq's standard library, and `input` as jq has it: past the last input it is
/// the error "No more inputs" (jaq's yields nothing).
fn input_funs() -> impl Iterator<Item = jaq_core::native::Fun<ShellData>> {
    let input: jaq_core::native::Filter<jaq_core::RunPtr<ShellData>> =
        ("input", jaq_core::native::v(0), |cv| {
            let next = cv.0.data().inputs().next();
            jaq_core::box_iter::box_once(match next {
                Some(Ok(value)) => Ok(value),
                Some(Err(error)) => Err(jaq_core::Exn::from(jaq_core::Error::str(error))),
                None => Err(jaq_core::Exn::from(jaq_core::Error::str("No more inputs"))),
            })
        });
    let mut filters: Vec<jaq_core::native::Filter<jaq_core::RunPtr<ShellData>>> =
        jaq_std::input::funs::<ShellData>().into_vec();
    filters.retain(|(name, ..)| *name == "inputs");
    filters.push(input);
    filters.into_iter().map(jaq_core::native::run::<ShellData>)
}

/// How an input that is not JSON is reported.
const CANNOT_PARSE: &str = "cannot parse the input as JSON";

/// jaq's run-time data for the shell's filters: the lookup table and the input stream that
/// the main loop, `input` and `inputs` share.
struct ShellData;

impl jaq_core::DataT for ShellData {
    type V<'a> = Val;
    type Data<'a> = &'a InputData<'a>;
}

struct InputData<'a> {
    lut: &'a jaq_core::Lut<ShellData>,
    inputs: Inputs<'a, Val>,
}

impl<'a> jaq_core::data::HasLut<'a, ShellData> for &'a InputData<'a> {
    fn lut(&self) -> &'a jaq_core::Lut<ShellData> {
        self.lut
    }
}

impl<'a> HasInputs<'a, Val> for &'a InputData<'a> {
    fn inputs(&self) -> Inputs<'a, Val> {
        self.inputs
    }
}

/// jq formats jaq's standard library lacks, defined in jq itself (jq manual "Format strings").
const EXTRA_DEFS: &str = r#"def @csv: map(if type == "string" then "\"" + gsub("\""; "\"\"") + "\"" elif type == "null" then "" else tostring end) | join(",");
def @tsv: map(if type == "string" then gsub("\\\\"; "\\\\") | gsub("\t"; "\\t") | gsub("\n"; "\\n") | gsub("\r"; "\\r") elif type == "null" then "" else tostring end) | join("\t");
"#;

fn run_filter(
    filter: &str,
    options: &JqOptions,
    values: Box<dyn Iterator<Item = Result<Val, String>> + '_>,
    io: &mut Io,
) -> Result<i32, Abort> {
    let code = format!("{EXTRA_DEFS}{filter}");
    let program = File {
        code: code.as_str(),
        path: (),
    };
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(input_funs())
        .chain(jaq_json::funs());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = match loader.load(&arena, program) {
        Ok(modules) => modules,
        Err(errors) => {
            io.err.push_str(&format!(
                "jq: error: syntax error in the filter {filter:?}: {}\njq: 1 compile error\n",
                describe(&errors)
            ));
            return Ok(3);
        }
    };
    let compiled = match Compiler::default()
        .with_funs(funs)
        .with_global_vars(options.names.iter().map(String::as_str))
        .compile(modules)
    {
        Ok(filter) => filter,
        Err(errors) => {
            io.err.push_str(&format!(
                "jq: error: {}\njq: 1 compile error\n",
                describe(&errors)
            ));
            return Ok(3);
        }
    };
    let indent = if options.compact {
        None
    } else if options.tab {
        Some("\t")
    } else {
        Some("  ")
    };
    let mut last: Option<Val> = None;
    let mut status = 0;
    let stream = RcIter::new(values);
    let data = InputData {
        lut: &compiled.lut,
        inputs: &stream,
    };
    let mut main: Inputs<'_, Val> = &stream;
    let mut null_once = options.null_input.then_some(Val::Null);
    loop {
        let input = if options.null_input {
            match null_once.take() {
                Some(null) => null,
                None => break,
            }
        } else {
            match main.next() {
                Some(Ok(value)) => value,
                Some(Err(error)) => {
                    io.err
                        .push_str(&format!("jq: error (at <stdin>:0): {error}\n"));
                    return Ok(2);
                }
                None => break,
            }
        };
        let ctx = Ctx::<ShellData>::new(&data, Vars::new(options.values.iter().cloned()));
        for result in compiled.id.run((ctx, input)).map(unwrap_valr) {
            match result {
                Ok(value) => {
                    match &value {
                        Val::TStr(bytes) if options.raw => {
                            io.out.push_str(&String::from_utf8_lossy(bytes));
                        }
                        other => write_json(&mut io.out, other, indent, options.sort_keys, 0),
                    }
                    if !options.join {
                        io.out.push('\n');
                    }
                    last = Some(value);
                }
                Err(error) => {
                    io.err
                        .push_str(&format!("jq: error (at <stdin>:0): {error}\n"));
                    status = 5;
                }
            }
        }
    }
    if status != 0 {
        return Ok(status);
    }
    if options.exit_status {
        return Ok(match last {
            None => 4,
            Some(Val::Null | Val::Bool(false)) => 1,
            Some(_) => 0,
        });
    }
    Ok(0)
}

/// Writes a value as jq prints it: integral numbers without a fraction, `": "` and the
/// indent in pretty mode, nothing between tokens in compact mode.
fn write_json(out: &mut String, value: &Val, indent: Option<&str>, sort_keys: bool, level: usize) {
    let newline = |out: &mut String, level: usize| {
        if let Some(indent) = indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    };
    match value {
        Val::Null => out.push_str("null"),
        Val::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Val::Num(number) => out.push_str(&number_text(number)),
        Val::TStr(bytes) | Val::BStr(bytes) => write_string(out, &String::from_utf8_lossy(bytes)),
        Val::Arr(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (at, item) in items.iter().enumerate() {
                if at > 0 {
                    out.push(',');
                }
                newline(out, level + 1);
                write_json(out, item, indent, sort_keys, level + 1);
            }
            newline(out, level);
            out.push(']');
        }
        Val::Obj(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(String, &Val)> = map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Val::TStr(bytes) | Val::BStr(bytes) => {
                            String::from_utf8_lossy(bytes).into_owned()
                        }
                        other => other.to_string(),
                    };
                    (key, v)
                })
                .collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (at, (key, item)) in entries.into_iter().enumerate() {
                if at > 0 {
                    out.push(',');
                }
                newline(out, level + 1);
                write_string(out, &key);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_json(out, item, indent, sort_keys, level + 1);
            }
            newline(out, level);
            out.push('}');
        }
    }
}

fn number_text(number: &jaq_json::Num) -> String {
    match number {
        jaq_json::Num::Int(i) => i.to_string(),
        jaq_json::Num::BigInt(i) => i.to_string(),
        jaq_json::Num::Float(f) => float_text(*f),
        jaq_json::Num::Dec(text) => match text.parse::<i64>() {
            Ok(i) => i.to_string(),
            Err(_) => text
                .parse::<f64>()
                .map(float_text)
                .unwrap_or_else(|_| text.to_string()),
        },
    }
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        return "null".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "1.7976931348623157e+308".into()
        } else {
            "-1.7976931348623157e+308".into()
        };
    }
    if f.fract() == 0.0 && f.abs() < 1e17 {
        return format!("{}", f as i64);
    }
    if f.abs() >= 1e17 || f.abs() < 1e-5 {
        let text = format!("{f:e}");
        return match text.split_once('e') {
            Some((mantissa, exponent)) => {
                let (sign, digits) = match exponent.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exponent),
                };
                format!("{mantissa}e{sign}{digits:0>2}")
            }
            None => text,
        };
    }
    format!("{f}")
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn describe<T: std::fmt::Debug>(errors: &T) -> String {
    let text = format!("{errors:?}");
    if text.len() > 300 {
        let mut end = 300;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text
    }
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
