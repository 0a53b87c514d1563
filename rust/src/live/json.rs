//! The strict JSON reader of the live contract: one value per message, UTF-8 only, nesting at
//! most `MAX_DEPTH`, duplicate object keys rejected, RFC 8259 grammar only (no NaN, no comments,
//! no byte order mark, no lone surrogate escapes). Errors name the JSON Pointer of the value
//! being read, built while unwinding so a valid message pays nothing for it.

use serde_json::{Map, Number, Value};

use crate::live::error::{Code, LiveError};

/// The deepest nesting accepted: the top-level value is depth 1.
pub const MAX_DEPTH: usize = 64;

/// Whether a value built elsewhere (from a Python dict, say) nests at most `MAX_DEPTH` deep,
/// as `parse` requires of text: `TooDeep` at the first value past it. Its recursion stops at
/// `MAX_DEPTH + 1`, however deep the value.
pub fn check_depth(v: &Value) -> Result<(), LiveError> {
    depth_at(v, 1)
}

fn depth_at(v: &Value, depth: usize) -> Result<(), LiveError> {
    let deeper = || {
        LiveError::new(
            Code::TooDeep,
            "",
            format!("nesting deeper than {MAX_DEPTH} levels"),
        )
    };
    match v {
        Value::Array(items) => {
            if depth > MAX_DEPTH {
                return Err(deeper());
            }
            for (i, item) in items.iter().enumerate() {
                depth_at(item, depth + 1).map_err(|e| e.under(&i.to_string()))?;
            }
        }
        Value::Object(m) => {
            if depth > MAX_DEPTH {
                return Err(deeper());
            }
            for (k, item) in m {
                depth_at(item, depth + 1).map_err(|e| e.under(k))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Parses exactly one JSON value; surrounding whitespace is allowed, anything else is not.
pub fn parse(bytes: &[u8]) -> Result<Value, LiveError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        LiveError::new(
            Code::InvalidUtf8,
            "",
            format!("byte {} is not valid UTF-8", e.valid_up_to()),
        )
    })?;
    parse_str(text)
}

/// Parses exactly one JSON value from text.
pub fn parse_str(text: &str) -> Result<Value, LiveError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.ws();
    if p.i == p.s.len() {
        return Err(LiveError::new(Code::InvalidJson, "", "empty message"));
    }
    let v = p.value(1)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(LiveError::new(
            Code::TrailingData,
            "",
            format!("data after the JSON value at byte {}", p.i),
        ));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn syntax(&self, what: &str) -> LiveError {
        LiveError::new(Code::InvalidJson, "", format!("{what} at byte {}", self.i))
    }

    fn value(&mut self, depth: usize) -> Result<Value, LiveError> {
        match self.s.get(self.i) {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("unexpected character")),
            None => Err(self.syntax("unexpected end of message")),
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, LiveError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.syntax("invalid literal"))
        }
    }

    fn enter(&self, depth: usize) -> Result<(), LiveError> {
        if depth > MAX_DEPTH {
            Err(LiveError::new(
                Code::TooDeep,
                "",
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ))
        } else {
            Ok(())
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, LiveError> {
        self.enter(depth)?;
        self.i += 1;
        let mut m = Map::new();
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Object(m));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.syntax("expected an object key"));
            }
            let key = self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.syntax("expected ':'").under(&key));
            }
            self.i += 1;
            self.ws();
            let v = self.value(depth + 1).map_err(|e| e.under(&key))?;
            if m.contains_key(&key) {
                return Err(LiveError::new(
                    Code::DuplicateKey,
                    "",
                    format!("key {key:?} appears twice in one object"),
                )
                .under(&key));
            }
            m.insert(key, v);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(m));
                }
                _ => return Err(self.syntax("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, LiveError> {
        self.enter(depth)?;
        self.i += 1;
        let mut a = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Value::Array(a));
        }
        loop {
            self.ws();
            let idx = a.len();
            let v = self
                .value(depth + 1)
                .map_err(|e| e.under(&idx.to_string()))?;
            a.push(v);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(a));
                }
                _ => return Err(self.syntax("expected ',' or ']'")),
            }
        }
    }

    fn string(&mut self) -> Result<String, LiveError> {
        self.i += 1;
        let start = self.i;
        // Fast path: no escape in the string.
        while let Some(&b) = self.s.get(self.i) {
            match b {
                b'"' => {
                    let out = self.text[start..self.i].to_owned();
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => break,
                0..=0x1f => return Err(self.syntax("unescaped control character in a string")),
                _ => self.i += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.i]);
        loop {
            let run = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.push_str(&self.text[run..self.i]);
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = match self.s.get(self.i) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.i += 1;
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi) {
                                if !self.s[self.i..].starts_with(b"\\u") {
                                    return Err(self.syntax("lone surrogate escape"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.syntax("lone surrogate escape"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.syntax("lone surrogate escape"));
                            } else {
                                hi
                            };
                            // Every non-surrogate code point below 0x110000 is a char.
                            out.push(char::from_u32(cp).ok_or_else(|| self.syntax("bad escape"))?);
                            continue;
                        }
                        _ => return Err(self.syntax("invalid escape")),
                    };
                    self.i += 1;
                    out.push(c);
                }
                Some(_) => return Err(self.syntax("unescaped control character in a string")),
                None => return Err(self.syntax("unterminated string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, LiveError> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.syntax("short \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let x = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.syntax("invalid \\u escape"))?;
            v = v * 16 + x;
        }
        self.i += 4;
        Ok(v)
    }

    fn number(&mut self) -> Result<Value, LiveError> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.s.get(self.i) {
                    self.i += 1;
                }
            }
            _ => return Err(self.syntax("invalid number")),
        }
        let mut integer = true;
        if self.s.get(self.i) == Some(&b'.') {
            integer = false;
            self.i += 1;
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return Err(self.syntax("invalid number"));
            }
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            integer = false;
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if !matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
                return Err(self.syntax("invalid number"));
            }
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
        }
        let text = &self.text[start..self.i];
        if integer {
            if let Ok(u) = text.parse::<u64>() {
                return Ok(Value::Number(u.into()));
            }
            if let Ok(n) = text.parse::<i64>() {
                return Ok(Value::Number(n.into()));
            }
        }
        // Arbitrary precision keeps the exact text of big integers and of every float.
        serde_json::from_str::<Number>(text)
            .map(Value::Number)
            .map_err(|e| self.syntax(&format!("invalid number ({e})")))
    }
}

/// How a JSON number reads as a JSON Schema `integer` (draft 2020-12: any number whose
/// fractional part is zero, so `1.0` and `1e3` are integers; Python's `json` reads a number with
/// a fraction or exponent as a double, so Tether does too).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IntegerValue {
    /// Exactly representable and within `0..=MAX_SAFE_INTEGER`.
    Safe(u64),
    /// An integer below zero (exact sign, any magnitude).
    Negative,
    /// An integer above `MAX_SAFE_INTEGER`.
    Huge,
    /// Not an integer: a fraction, or a double out of range (`1e400` reads as infinity).
    NotInteger,
}

/// 2^53 - 1: the largest integer every JSON reader (JavaScript's included) reads exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Classifies a number as an integer, or `NotInteger`.
pub fn integer_value(n: &Number) -> IntegerValue {
    let text = n.as_str();
    let is_literal_integer = !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
    if is_literal_integer {
        if let Some(digits) = text.strip_prefix('-') {
            return if digits.bytes().all(|b| b == b'0') {
                IntegerValue::Safe(0)
            } else {
                IntegerValue::Negative
            };
        }
        return match text.parse::<u64>() {
            Ok(u) if u <= MAX_SAFE_INTEGER => IntegerValue::Safe(u),
            _ => IntegerValue::Huge,
        };
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f.fract() == 0.0 => {
            if f < 0.0 {
                IntegerValue::Negative
            } else if f <= MAX_SAFE_INTEGER as f64 {
                IntegerValue::Safe(f as u64)
            } else {
                IntegerValue::Huge
            }
        }
        _ => IntegerValue::NotInteger,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: &str) -> Code {
        parse(s.as_bytes()).unwrap_err().code
    }

    #[test]
    fn reads_one_value() {
        let v = parse(br#" {"a": [1, -2, 3.5, "x\u00e9\ud83d\ude00", true, null]} "#).unwrap();
        assert_eq!(v["a"][3], "xé😀");
        assert_eq!(v["a"][1], -2);
    }

    #[test]
    fn rejects_what_strict_json_refuses() {
        assert_eq!(code(""), Code::InvalidJson);
        assert_eq!(code("  "), Code::InvalidJson);
        assert_eq!(code("{} {}"), Code::TrailingData);
        assert_eq!(code("1 2"), Code::TrailingData);
        assert_eq!(code("NaN"), Code::InvalidJson);
        assert_eq!(code("[1,]"), Code::InvalidJson);
        assert_eq!(code("01"), Code::TrailingData);
        assert_eq!(code("1."), Code::InvalidJson);
        assert_eq!(code("\"a\nb\""), Code::InvalidJson);
        assert_eq!(code(r#""\ud800""#), Code::InvalidJson);
        assert_eq!(code(r#""\udc00x""#), Code::InvalidJson);
        assert_eq!(code(r#""\ud800\u0041""#), Code::InvalidJson);
        assert_eq!(code("\u{feff}{}"), Code::InvalidJson);
        assert_eq!(parse(b"\xff").unwrap_err().code, Code::InvalidUtf8);
        assert_eq!(parse(b"\"\xc3\"").unwrap_err().code, Code::InvalidUtf8);
    }

    #[test]
    fn duplicate_keys_name_their_path() {
        let e = parse(br#"{"data": {"a": 1, "\u0061": 2}}"#).unwrap_err();
        assert_eq!(e.code, Code::DuplicateKey);
        assert_eq!(e.path, "/data/a");
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let e = parse(deep.as_bytes()).unwrap_err();
        assert_eq!(e.code, Code::TooDeep);
        assert_eq!(e.path.matches('/').count(), MAX_DEPTH);
        // Far deeper than the limit still ends in the typed error, not a stack overflow.
        let huge = "[".repeat(100_000);
        assert_eq!(parse(huge.as_bytes()).unwrap_err().code, Code::TooDeep);
    }

    #[test]
    fn a_built_value_is_bounded_as_text_is() {
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(check_depth(&parse(ok.as_bytes()).unwrap()).is_ok());
        let mut deep = Value::Null;
        for _ in 0..=MAX_DEPTH {
            let mut m = Map::new();
            m.insert("a".into(), deep);
            deep = Value::Object(m);
        }
        let e = check_depth(&deep).unwrap_err();
        assert_eq!(e.code, Code::TooDeep);
        assert_eq!(e.path, "/a".repeat(MAX_DEPTH));
    }

    #[test]
    fn integers_read_as_json_schema_does() {
        let n = |s: &str| integer_value(parse(s.as_bytes()).unwrap().as_number().unwrap());
        assert_eq!(n("7"), IntegerValue::Safe(7));
        assert_eq!(n("1.0"), IntegerValue::Safe(1));
        assert_eq!(n("1e3"), IntegerValue::Safe(1000));
        assert_eq!(n("-0"), IntegerValue::Safe(0));
        assert_eq!(n("-0.0"), IntegerValue::Safe(0));
        assert_eq!(n("-3"), IntegerValue::Negative);
        assert_eq!(n("-1e300"), IntegerValue::Negative);
        assert_eq!(n("1.5"), IntegerValue::NotInteger);
        assert_eq!(n("1e400"), IntegerValue::NotInteger);
        assert_eq!(n("9007199254740991"), IntegerValue::Safe(MAX_SAFE_INTEGER));
        assert_eq!(n("9007199254740992"), IntegerValue::Huge);
        assert_eq!(n("123456789012345678901234567890"), IntegerValue::Huge);
        assert_eq!(n("-123456789012345678901234567890"), IntegerValue::Negative);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_give_a_value_or_a_typed_error(data: Vec<u8>) {
            let _ = parse(&data);
        }

        #[test]
        fn serde_json_output_reads_back(s: String, n: i64, f in -1e12f64..1e12) {
            let v = serde_json::json!({"s": s, "n": n, "f": f, "a": [s.clone(), {"k": n}]});
            let text = serde_json::to_string(&v).unwrap();
            let back = parse(text.as_bytes()).unwrap();
            proptest::prop_assert_eq!(serde_json::to_string(&back).unwrap(), text);
        }
    }
}
