//! Byte framing: one JSON event, NDJSON (or any whitespace-separated JSON values), or an SSE
//! capture, fed in arbitrary chunks. Sans-I/O: `push` takes bytes, `next_value` gives one parsed
//! JSON value, `Ok(None)` meaning "need more data".
//!
//! The format is chosen once, from the first byte that is not a BOM or whitespace: `{` or `[`
//! selects JSON, anything else SSE (`data:` lines, events ended by a blank line; comments and
//! the `event`/`id`/`retry` fields are ignored, several `data` lines join with `\n`).

use serde_json::Value;

use super::error::{AguiError, INVALID_JSON, TRUNCATED_STREAM};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Sse,
}

/// Splits a byte stream into JSON values. Single owner; keeps only the unconsumed tail.
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    pos: usize,
    format: Option<Format>,
    bom_checked: bool,
    /// After a JSON syntax error: discard bytes up to the next newline.
    skipping: bool,
    /// SSE: the data lines of the event being assembled.
    sse_data: Vec<u8>,
    sse_has_data: bool,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

impl Framer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes; call `next_value` until it returns `Ok(None)`.
    pub fn push(&mut self, data: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that do not yet form a complete value.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos + self.sse_data.len()
    }

    /// The next complete value, `Ok(None)` if more bytes are needed. A decode error consumes
    /// the offending frame (line or SSE event), so the caller may go on reading after it.
    pub fn next_value(&mut self) -> Result<Option<Value>, AguiError> {
        self.next_value_inner(false)
    }

    /// End of input: returns the last value if the input ends with one; an incomplete value
    /// left over is a `truncated_stream` error (and is discarded).
    pub fn finish(&mut self) -> Result<Option<Value>, AguiError> {
        let out = self.next_value_inner(true)?;
        if out.is_some() {
            return Ok(out);
        }
        let rest = &self.buf[self.pos..];
        let leftover = rest.iter().any(|b| !is_ws(*b)) || self.sse_has_data;
        let n = self.pending();
        self.buf.clear();
        self.pos = 0;
        self.sse_data.clear();
        self.sse_has_data = false;
        self.skipping = false;
        if leftover {
            return Err(AguiError::decode(
                TRUNCATED_STREAM,
                format!("the stream ends inside an event ({n} bytes left over)"),
            ));
        }
        Ok(None)
    }

    fn next_value_inner(&mut self, eof: bool) -> Result<Option<Value>, AguiError> {
        if !self.bom_checked {
            if self.buf.len() - self.pos < 3
                && !eof
                && b"\xEF\xBB\xBF".starts_with(&self.buf[self.pos..])
            {
                return Ok(None);
            }
            if self.buf[self.pos..].starts_with(b"\xEF\xBB\xBF") {
                self.pos += 3;
            }
            self.bom_checked = true;
        }
        let format = match self.format {
            Some(f) => f,
            None => {
                let Some(first) = self.buf[self.pos..].iter().find(|b| !is_ws(**b)) else {
                    return Ok(None);
                };
                let f = if matches!(first, b'{' | b'[') {
                    Format::Json
                } else {
                    Format::Sse
                };
                self.format = Some(f);
                f
            }
        };
        match format {
            Format::Json => self.next_json(eof),
            Format::Sse => self.next_sse(eof),
        }
    }

    fn next_json(&mut self, eof: bool) -> Result<Option<Value>, AguiError> {
        if self.skipping {
            match memchr::memchr(b'\n', &self.buf[self.pos..]) {
                Some(i) => {
                    self.pos += i + 1;
                    self.skipping = false;
                }
                None => {
                    self.pos = self.buf.len();
                    return Ok(None);
                }
            }
        }
        while self.pos < self.buf.len() && is_ws(self.buf[self.pos]) {
            self.pos += 1;
        }
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let rest = &self.buf[self.pos..];
        let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                self.pos += stream.byte_offset();
                Ok(Some(v))
            }
            Some(Err(e)) if e.is_eof() && !eof => Ok(None),
            Some(Err(e)) if e.is_eof() => {
                self.pos = self.buf.len();
                Err(AguiError::decode(
                    TRUNCATED_STREAM,
                    format!("the stream ends inside an event: {e}"),
                ))
            }
            Some(Err(e)) => {
                // Resynchronise at the next line: NDJSON frames end with a newline.
                match memchr::memchr(b'\n', rest) {
                    Some(i) => self.pos += i + 1,
                    None => {
                        self.pos = self.buf.len();
                        self.skipping = !eof;
                    }
                }
                Err(AguiError::decode(
                    INVALID_JSON,
                    format!("invalid JSON: {e}"),
                ))
            }
            None => Ok(None),
        }
    }

    fn next_sse(&mut self, eof: bool) -> Result<Option<Value>, AguiError> {
        loop {
            let rest = &self.buf[self.pos..];
            let (line_end, next) = match memchr::memchr2(b'\n', b'\r', rest) {
                Some(i) if rest[i] == b'\r' => {
                    if i + 1 == rest.len() && !eof {
                        return Ok(None); // a '\n' may follow in the next chunk
                    }
                    let skip = if rest.get(i + 1) == Some(&b'\n') {
                        2
                    } else {
                        1
                    };
                    (i, i + skip)
                }
                Some(i) => (i, i + 1),
                None if eof && !rest.is_empty() => (rest.len(), rest.len()),
                None if eof && self.sse_has_data => {
                    // End of input counts as the blank line that ends the last event.
                    return self.dispatch_sse();
                }
                None => return Ok(None),
            };
            let line_start = self.pos;
            self.pos += next;
            let line = &self.buf[line_start..line_start + line_end];
            if line.is_empty() {
                if self.sse_has_data {
                    return self.dispatch_sse();
                }
                continue;
            }
            if line[0] == b':' {
                continue;
            }
            let (field, value) = match memchr::memchr(b':', line) {
                Some(c) => {
                    let v = &line[c + 1..];
                    (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (line, &line[line.len()..]),
            };
            if field == b"data" {
                if self.sse_has_data {
                    self.sse_data.push(b'\n');
                }
                self.sse_data.extend_from_slice(value);
                self.sse_has_data = true;
            }
        }
    }

    fn dispatch_sse(&mut self) -> Result<Option<Value>, AguiError> {
        self.sse_has_data = false;
        let parsed = serde_json::from_slice::<Value>(&self.sse_data);
        self.sse_data.clear();
        match parsed {
            Ok(v) => Ok(Some(v)),
            Err(e) => Err(AguiError::decode(
                INVALID_JSON,
                format!("invalid JSON in SSE data: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn drain(f: &mut Framer) -> Vec<Value> {
        let mut out = vec![];
        while let Some(v) = f.next_value().unwrap() {
            out.push(v);
        }
        out
    }

    fn all_splits(input: &[u8]) -> Vec<Vec<Value>> {
        (0..=input.len())
            .map(|cut| {
                let mut f = Framer::new();
                f.push(&input[..cut]);
                let mut out = drain(&mut f);
                f.push(&input[cut..]);
                out.extend(drain(&mut f));
                if let Some(v) = f.finish().unwrap() {
                    out.push(v);
                }
                out
            })
            .collect()
    }

    #[test]
    fn ndjson_any_split_gives_the_same_values() {
        let input = b"{\"a\":1}\n{\"b\":[1,2]}\r\n\n{\"c\":\"x\\ny\"}\n";
        for got in all_splits(input) {
            assert_eq!(
                got,
                vec![json!({"a":1}), json!({"b":[1,2]}), json!({"c":"x\ny"})]
            );
        }
    }

    #[test]
    fn single_pretty_json_event() {
        let input = b"\xEF\xBB\xBF {\n  \"type\": \"RUN_STARTED\"\n}";
        for got in all_splits(input) {
            assert_eq!(got, vec![json!({"type":"RUN_STARTED"})]);
        }
    }

    #[test]
    fn sse_any_split_gives_the_same_values() {
        let input = b": comment\r\nevent: x\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:{\"b\":2}\n\nid: 3\rdata: {\"c\":3}\r\r";
        for got in all_splits(input) {
            assert_eq!(got, vec![json!({"a":1}), json!({"b":2}), json!({"c":3})]);
        }
    }

    #[test]
    fn sse_last_event_without_blank_line_is_taken_at_finish() {
        let mut f = Framer::new();
        f.push(b"data: {\"a\":1}");
        assert_eq!(f.next_value().unwrap(), None);
        assert_eq!(f.finish().unwrap(), Some(json!({"a":1})));
    }

    #[test]
    fn bad_json_line_is_an_error_and_the_stream_goes_on() {
        let mut f = Framer::new();
        f.push(b"{\"a\":1}\n{oops}\n{\"b\":2}\n");
        assert_eq!(f.next_value().unwrap(), Some(json!({"a":1})));
        assert_eq!(f.next_value().unwrap_err().code, INVALID_JSON);
        assert_eq!(f.next_value().unwrap(), Some(json!({"b":2})));
    }

    #[test]
    fn truncated_stream_is_reported_at_finish() {
        let mut f = Framer::new();
        f.push(b"{\"a\":");
        assert_eq!(f.next_value().unwrap(), None);
        assert_eq!(f.finish().unwrap_err().code, TRUNCATED_STREAM);
        let mut f = Framer::new();
        f.push(b"data: {\"a\":");
        assert_eq!(f.next_value().unwrap(), None);
        assert_eq!(f.finish().unwrap_err().code, INVALID_JSON);
    }
}
