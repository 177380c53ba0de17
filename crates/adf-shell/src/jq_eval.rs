//! jq's evaluation (jaq), as the jq worker process runs it: the options and input the shell
//! sends, the filter compiled and run, the output printed as jq prints it. It runs only in
//! the worker (`crate::worker`), never in the process that holds agents: jaq evaluates
//! recursively and cannot be interrupted, so its stack, memory and time are bounded by the
//! worker process around it.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, unwrap_valr};
use jaq_json::Val;
use jaq_std::input::{HasInputs, Inputs, RcIter};
use serde_json::{Value, json};

/// The exit status of an evaluation whose output passed `max_output` (the worker stops it).
pub(crate) const EXIT_OUTPUT: i32 = 92;

/// One `--arg` / `--argjson`: the variable name (with its `$`), its text, and whether the text
/// is JSON.
#[derive(Debug, Clone)]
pub(crate) struct JqArg {
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) json: bool,
}

/// What one `jq` command asks: the filter, jq's options, and the bounds the worker keeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct JqRequest {
    pub(crate) filter: String,
    pub(crate) raw: bool,
    pub(crate) join: bool,
    pub(crate) compact: bool,
    pub(crate) null_input: bool,
    pub(crate) slurp: bool,
    pub(crate) exit_status: bool,
    pub(crate) sort_keys: bool,
    pub(crate) tab: bool,
    pub(crate) raw_input: bool,
    pub(crate) args: Vec<JqArg>,
    /// Bytes of output after which the evaluation stops ([`EXIT_OUTPUT`]).
    pub(crate) max_output: usize,
    /// The deepest nesting of `[`/`{` an input (or `--argjson`) may have.
    pub(crate) max_depth: usize,
}

impl JqRequest {
    /// The request as the worker reads it (one JSON line).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "filter": self.filter,
            "raw": self.raw, "join": self.join, "compact": self.compact,
            "null_input": self.null_input, "slurp": self.slurp,
            "exit_status": self.exit_status, "sort_keys": self.sort_keys, "tab": self.tab,
            "raw_input": self.raw_input,
            "args": self.args.iter().map(|a| json!([a.name, a.text, a.json])).collect::<Vec<_>>(),
            "max_output": self.max_output,
            "max_depth": self.max_depth,
        })
    }

    /// The request from its JSON line; `None` when it is not one.
    pub(crate) fn from_json(value: &Value) -> Option<JqRequest> {
        let flag = |key: &str| value.get(key).and_then(Value::as_bool).unwrap_or(false);
        let count = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
        };
        let mut args = Vec::new();
        for arg in value.get("args")?.as_array()? {
            args.push(JqArg {
                name: arg.get(0)?.as_str()?.to_owned(),
                text: arg.get(1)?.as_str()?.to_owned(),
                json: arg.get(2)?.as_bool()?,
            });
        }
        Some(JqRequest {
            filter: value.get("filter")?.as_str()?.to_owned(),
            raw: flag("raw"),
            join: flag("join"),
            compact: flag("compact"),
            null_input: flag("null_input"),
            slurp: flag("slurp"),
            exit_status: flag("exit_status"),
            sort_keys: flag("sort_keys"),
            tab: flag("tab"),
            raw_input: flag("raw_input"),
            args,
            max_output: count("max_output")?,
            max_depth: count("max_depth")?,
        })
    }
}

/// What an evaluation printed and its exit status.
#[derive(Debug, Default)]
pub(crate) struct Evaluated {
    pub(crate) out: String,
    pub(crate) err: String,
    pub(crate) code: i32,
}

/// The deepest nesting of arrays and objects in JSON text, counted over its bytes before any
/// parse (strings skipped), so a parser that recurses per level never sees deeper input.
/// Stops counting once `limit` is passed.
pub(crate) fn json_depth(text: &[u8], limit: usize) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in text {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > deepest {
                    deepest = depth;
                    if deepest > limit {
                        return deepest;
                    }
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Runs one request over `input` (the concatenated input files or stdin).
pub(crate) fn evaluate(options: &JqRequest, input: &str) -> Evaluated {
    let mut io = Evaluated::default();
    io.code = evaluate_into(options, input, &mut io);
    io
}

fn too_deep(limit: usize) -> String {
    format!("it nests deeper than {limit} levels of arrays and objects")
}

fn evaluate_into(options: &JqRequest, input: &str, io: &mut Evaluated) -> i32 {
    let mut globals = Vec::new();
    for arg in &options.args {
        if !arg.json {
            globals.push(Val::from(arg.text.clone()));
            continue;
        }
        let parsed = if json_depth(arg.text.as_bytes(), options.max_depth) > options.max_depth {
            Err(too_deep(options.max_depth))
        } else {
            jaq_json::read::parse_single(arg.text.as_bytes()).map_err(|e| e.to_string())
        };
        match parsed {
            Ok(value) => globals.push(value),
            Err(_) => {
                io.err.push_str(&format!(
                    "jq: invalid JSON text passed to --argjson: {}\n",
                    arg.text
                ));
                return 2;
            }
        }
    }
    if !options.raw_input && json_depth(input.as_bytes(), options.max_depth) > options.max_depth {
        io.err.push_str(&format!(
            "jq: error (at <stdin>:0): {CANNOT_PARSE}: {}\n",
            too_deep(options.max_depth)
        ));
        return 2;
    }
    let text = input;
    let values: Box<dyn Iterator<Item = Result<Val, String>> + '_> = if options.raw_input {
        if options.slurp {
            Box::new(std::iter::once(Ok(Val::from(text.to_owned()))))
        } else {
            Box::new(
                crate::commands::text::lines(text)
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
                    return 2;
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
    run_filter(options, globals, values, io)
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
    options: &JqRequest,
    globals: Vec<Val>,
    values: Box<dyn Iterator<Item = Result<Val, String>> + '_>,
    io: &mut Evaluated,
) -> i32 {
    let filter = options.filter.as_str();
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
            return 3;
        }
    };
    let compiled = match Compiler::default()
        .with_funs(funs)
        .with_global_vars(options.args.iter().map(|arg| arg.name.as_str()))
        .compile(modules)
    {
        Ok(filter) => filter,
        Err(errors) => {
            io.err.push_str(&format!(
                "jq: error: {}\njq: 1 compile error\n",
                describe(&errors)
            ));
            return 3;
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
                    return 2;
                }
                None => break,
            }
        };
        let ctx = Ctx::<ShellData>::new(&data, Vars::new(globals.iter().cloned()));
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
                    if io.out.len() > options.max_output {
                        return EXIT_OUTPUT;
                    }
                }
                Err(error) => {
                    io.err
                        .push_str(&format!("jq: error (at <stdin>:0): {error}\n"));
                    status = 5;
                    if io.err.len() > options.max_output {
                        return EXIT_OUTPUT;
                    }
                }
            }
        }
    }
    if status != 0 {
        return status;
    }
    if options.exit_status {
        return match last {
            None => 4,
            Some(Val::Null | Val::Bool(false)) => 1,
            Some(_) => 0,
        };
    }
    0
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
