//! Canonical JSON exactly as the reference's `canonicalJsonStringify` produces it (Appendix A.4).
//!
//! This is *not* RFC 8785. The reference runs `JSON.stringify` with a replacer that rebuilds every
//! object with `Object.keys(v).sort()`, so JavaScript semantics leak into the signed bytes:
//! array-index keys (`"0"`..`"4294967294"`) come first in numeric order (JS own-property order),
//! other keys sort by UTF-16 code unit, a `__proto__` key vanishes (assigning it sets the
//! prototype), numbers pass through IEEE-754 doubles and print with ECMAScript
//! `Number::toString`, and strings are escaped the way `JSON.stringify` does it (U+2028 raw, lone
//! surrogates as `\udxxx`). Strings are handled as UTF-16 internally so lone surrogates survive
//! from [`canonicalize_json_text`].

use serde_json::Value;

use crate::error::{Error, Result};

/// Canonical form of a JSON value (as a string).
pub fn canonicalize(value: &Value) -> String {
    let mut out = String::new();
    write_value(&JsVal::from_serde(value), true, &mut out);
    out
}

/// The bytes that get signed: UTF-8 of [`canonicalize`].
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    canonicalize(value).into_bytes()
}

/// `canonicalJsonStringify(JSON.parse(text))`, with `JSON.parse` semantics: lone surrogate
/// escapes are kept, duplicate keys keep the last value, numbers become doubles.
pub fn canonicalize_json_text(text: &str) -> Result<String> {
    let v = Parser::new(text).parse_document()?;
    let mut out = String::new();
    write_value(&v, true, &mut out);
    Ok(out)
}

/// `JSON.stringify(value)` without sorting: insertion order (with JS's array-index-keys-first
/// rule), JS number formatting and escaping. Used for the level-2 ALF plaintext.
pub fn js_stringify(value: &Value) -> String {
    let mut out = String::new();
    write_value(&JsVal::from_serde(value), false, &mut out);
    out
}

/// ECMAScript `Number::toString(x)` for finite doubles; non-finite values print as `null`
/// because that is what `JSON.stringify` emits for them.
pub fn js_number_to_string(x: f64) -> String {
    if !x.is_finite() {
        return "null".into();
    }
    if x == 0.0 {
        return "0".into(); // covers -0
    }
    // `{:e}` gives the shortest round-trip digits, like the JS algorithm requires.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = match sci.split_once('e') {
        Some(p) => p,
        None => return sci,
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = exp + 1;
    let mut s = String::new();
    if x < 0.0 {
        s.push('-');
    }
    if k <= n && n <= 21 {
        s.push_str(&digits);
        s.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        s.push_str(&digits[..n as usize]);
        s.push('.');
        s.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        s.push_str("0.");
        s.extend(std::iter::repeat_n('0', (-n) as usize));
        s.push_str(&digits);
    } else {
        s.push_str(&digits[..1]);
        if k > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if n > 0 { '+' } else { '-' });
        s.push_str(&(n - 1).abs().to_string());
    }
    s
}

// ---------------------------------------------------------------------------------------------
// JS value model

#[derive(Debug, Clone)]
enum JsVal {
    Null,
    Bool(bool),
    Num(f64),
    Str(Vec<u16>),
    Arr(Vec<JsVal>),
    Obj(Vec<(Vec<u16>, JsVal)>),
}

impl JsVal {
    fn from_serde(v: &Value) -> JsVal {
        match v {
            Value::Null => JsVal::Null,
            Value::Bool(b) => JsVal::Bool(*b),
            Value::Number(n) => JsVal::Num(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => JsVal::Str(s.encode_utf16().collect()),
            Value::Array(a) => JsVal::Arr(a.iter().map(JsVal::from_serde).collect()),
            Value::Object(m) => JsVal::Obj(
                m.iter()
                    .map(|(k, v)| (k.encode_utf16().collect(), JsVal::from_serde(v)))
                    .collect(),
            ),
        }
    }
}

/// `Some(index)` when `key` is a canonical array index (JS orders those first, numerically).
fn array_index(key: &[u16]) -> Option<u32> {
    if key.is_empty() || key.len() > 10 {
        return None;
    }
    if key.len() > 1 && key[0] == u16::from(b'0') {
        return None;
    }
    let mut n: u64 = 0;
    for &c in key {
        if !(u16::from(b'0')..=u16::from(b'9')).contains(&c) {
            return None;
        }
        n = n * 10 + u64::from(c - u16::from(b'0'));
    }
    // 2^32 - 1 is not an array index.
    if n < 4_294_967_295 {
        Some(n as u32)
    } else {
        None
    }
}

const PROTO: [u16; 9] = [95, 95, 112, 114, 111, 116, 111, 95, 95]; // "__proto__"

/// JS own-property order of an object: array indices ascending, then the rest in `rest` order.
fn js_key_order(
    members: &[(Vec<u16>, JsVal)],
    sort_rest: bool,
    drop_proto: bool,
) -> Vec<&(Vec<u16>, JsVal)> {
    // Duplicate keys (possible only from our own parser) keep the last value, JS-style.
    let mut uniq: Vec<&(Vec<u16>, JsVal)> = Vec::with_capacity(members.len());
    for m in members {
        if drop_proto && m.0 == PROTO {
            continue;
        }
        if let Some(slot) = uniq.iter_mut().find(|e| e.0 == m.0) {
            *slot = m;
        } else {
            uniq.push(m);
        }
    }
    let (mut idx, mut rest): (Vec<_>, Vec<_>) =
        uniq.into_iter().partition(|m| array_index(&m.0).is_some());
    idx.sort_by_key(|m| array_index(&m.0));
    if sort_rest {
        // Vec<u16> ordering is exactly UTF-16 code-unit order.
        rest.sort_by(|a, b| a.0.cmp(&b.0));
    }
    idx.extend(rest);
    idx
}

fn write_value(v: &JsVal, sorted: bool, out: &mut String) {
    match v {
        JsVal::Null => out.push_str("null"),
        JsVal::Bool(true) => out.push_str("true"),
        JsVal::Bool(false) => out.push_str("false"),
        JsVal::Num(x) => out.push_str(&js_number_to_string(*x)),
        JsVal::Str(s) => write_string(s, out),
        JsVal::Arr(a) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(e, sorted, out);
            }
            out.push(']');
        }
        JsVal::Obj(m) => {
            out.push('{');
            // The sorting replacer drops `__proto__`; plain JSON.stringify keeps own properties.
            for (i, (k, val)) in js_key_order(m, sorted, sorted).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(val, sorted, out);
            }
            out.push('}');
        }
    }
}

fn write_string(units: &[u16], out: &mut String) {
    out.push('"');
    let mut i = 0;
    while i < units.len() {
        let c = units[i];
        match c {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x00..=0x1f => out.push_str(&format!("\\u{c:04x}")),
            0xd800..=0xdbff => {
                if let Some(&lo) = units.get(i + 1)
                    && (0xdc00..=0xdfff).contains(&lo)
                {
                    let cp = 0x10000 + ((u32::from(c) - 0xd800) << 10) + (u32::from(lo) - 0xdc00);
                    out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
                    i += 2;
                    continue;
                }
                out.push_str(&format!("\\u{c:04x}"));
            }
            0xdc00..=0xdfff => out.push_str(&format!("\\u{c:04x}")),
            _ => out.push(char::from_u32(u32::from(c)).unwrap_or('\u{fffd}')),
        }
        i += 1;
    }
    out.push('"');
}

// ---------------------------------------------------------------------------------------------
// A strict RFC 8259 parser with JSON.parse semantics for strings (UTF-16, lone surrogates kept).

const MAX_DEPTH: usize = 256;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            s: text.as_bytes(),
            text,
            pos: 0,
        }
    }

    fn err(&self, what: &str) -> Error {
        Error::Json(format!("{what} at byte {}", self.pos))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn parse_document(&mut self) -> Result<JsVal> {
        let v = self.value(0)?;
        self.ws();
        if self.pos != self.s.len() {
            return Err(self.err("trailing characters"));
        }
        Ok(v)
    }

    fn value(&mut self, depth: usize) -> Result<JsVal> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.ws();
        match self.s.get(self.pos) {
            None => Err(self.err("unexpected end")),
            Some(b'{') => {
                self.pos += 1;
                let mut members = Vec::new();
                self.ws();
                if self.s.get(self.pos) == Some(&b'}') {
                    self.pos += 1;
                    return Ok(JsVal::Obj(members));
                }
                loop {
                    self.ws();
                    if self.s.get(self.pos) != Some(&b'"') {
                        return Err(self.err("expected string key"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.s.get(self.pos) != Some(&b':') {
                        return Err(self.err("expected `:`"));
                    }
                    self.pos += 1;
                    let v = self.value(depth + 1)?;
                    members.push((k, v));
                    self.ws();
                    match self.s.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(JsVal::Obj(members));
                        }
                        _ => return Err(self.err("expected `,` or `}`")),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    return Ok(JsVal::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.s.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(JsVal::Arr(items));
                        }
                        _ => return Err(self.err("expected `,` or `]`")),
                    }
                }
            }
            Some(b'"') => Ok(JsVal::Str(self.string()?)),
            Some(b't') => self.literal("true", JsVal::Bool(true)),
            Some(b'f') => self.literal("false", JsVal::Bool(false)),
            Some(b'n') => self.literal("null", JsVal::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn literal(&mut self, word: &str, v: JsVal) -> Result<JsVal> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn number(&mut self) -> Result<JsVal> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let s = p.pos;
            while let Some(b'0'..=b'9') = p.s.get(p.pos) {
                p.pos += 1;
            }
            p.pos - s
        };
        if self.s.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        let n = digits(self);
        if n == 0 || (n > 1 && self.s[int_start] == b'0') {
            return Err(self.err("invalid number"));
        }
        if self.s.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.s.get(self.pos) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("invalid number"));
            }
        }
        let lit = &self.text[start..self.pos];
        // Rust's float parser is correctly rounded, like JSON.parse; overflow gives ±inf (JS: ±Infinity).
        lit.parse::<f64>()
            .map(JsVal::Num)
            .map_err(|_| self.err("invalid number"))
    }

    fn hex4(&mut self) -> Result<u16> {
        let h = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("truncated \\u escape"))?;
        let v = u16::from_str_radix(h, 16).map_err(|_| self.err("invalid \\u escape"))?;
        if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.err("invalid \\u escape"));
        }
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<Vec<u16>> {
        self.pos += 1; // opening quote
        let mut out = Vec::new();
        loop {
            let b = *self
                .s
                .get(self.pos)
                .ok_or_else(|| self.err("unterminated string"))?;
            match b {
                b'"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.pos += 1;
                    let e = *self.s.get(self.pos).ok_or_else(|| self.err("bad escape"))?;
                    self.pos += 1;
                    match e {
                        b'"' => out.push(0x22),
                        b'\\' => out.push(0x5c),
                        b'/' => out.push(0x2f),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(0x0a),
                        b'r' => out.push(0x0d),
                        b't' => out.push(0x09),
                        b'u' => out.push(self.hex4()?),
                        _ => return Err(self.err("bad escape")),
                    }
                }
                0x00..=0x1f => return Err(self.err("control character in string")),
                _ => {
                    // Copy one whole UTF-8 character (input is a &str, so boundaries are valid).
                    let ch = self.text[self.pos..]
                        .chars()
                        .next()
                        .ok_or_else(|| self.err("unterminated string"))?;
                    let mut buf = [0u16; 2];
                    out.extend_from_slice(ch.encode_utf16(&mut buf));
                    self.pos += ch.len_utf8();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn idn_39_number_formatting() {
        for (x, s) in [
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (-1.5e-10, "-1.5e-10"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (123.456, "123.456"),
            (-42.0, "-42"),
        ] {
            assert_eq!(js_number_to_string(x), s);
        }
    }

    #[test]
    fn idn_39_array_index_keys() {
        assert_eq!(
            array_index(&"0".encode_utf16().collect::<Vec<_>>()),
            Some(0)
        );
        assert_eq!(array_index(&"01".encode_utf16().collect::<Vec<_>>()), None);
        assert_eq!(
            array_index(&"4294967295".encode_utf16().collect::<Vec<_>>()),
            None
        );
        assert_eq!(
            array_index(&"4294967294".encode_utf16().collect::<Vec<_>>()),
            Some(4_294_967_294)
        );
    }
}
