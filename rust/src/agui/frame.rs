//! Byte framing: one JSON event, NDJSON (or any whitespace-separated JSON values), or an SSE
//! capture, fed in arbitrary chunks. Sans-I/O: `push` takes bytes; `next_frame` gives the text of
//! one event (or an already parsed value), `next_value` one parsed JSON value; `Ok(None)` means
//! "need more data".
//!
//! JSON input is cut at newlines first: a line that starts with `{` and ends with `}` is handed
//! out as text, so the consumer parses it once, straight into whatever shape it wants. If that
//! text turns out not to be exactly one value (a pretty-printed event, two values on a line),
//! the consumer calls `rewind_to_stream` and the framer parses from there as a JSON stream.
//!
//! The format is chosen once, from the first byte that is not a BOM or whitespace: `{` or `[`
//! selects JSON, anything else SSE (`data:` lines, events ended by a blank line; comments and
//! the `event`/`id`/`retry` fields are ignored, several `data` lines join with `\n`).

use serde_json::Value;

use super::error::{AguiError, INVALID_JSON, TRUNCATED_STREAM};

/// One event's worth of input.
#[derive(Debug)]
pub enum Frame<'a> {
    /// A line of JSON input that looks like one object; may be rewound if it is not.
    Line(&'a [u8]),
    /// The data of one SSE event: must be one JSON value.
    Data(&'a [u8]),
    /// A value the framer had to parse itself (JSON spanning lines).
    Value(Value),
}

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
    /// `sse_data` was handed out and is cleared on the next call.
    sse_dispatched: bool,
    /// Where the last `Frame::Line` started, and whether to parse from there as a stream.
    line_start: usize,
    force_stream: bool,
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
        if self.pos > 0 && !self.force_stream {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that do not yet form a complete value.
    pub fn pending(&self) -> usize {
        let sse = if self.sse_dispatched {
            0
        } else {
            self.sse_data.len()
        };
        self.buf.len() - self.pos + sse
    }

    /// The last `Frame::Line` was not exactly one JSON value: parse from its start as a stream.
    pub fn rewind_to_stream(&mut self) {
        self.pos = self.line_start;
        self.force_stream = true;
    }

    /// The next complete value, `Ok(None)` if more bytes are needed. A decode error consumes
    /// the offending frame (line or SSE event), so the caller may go on reading after it.
    pub fn next_value(&mut self) -> Result<Option<Value>, AguiError> {
        self.next_value_at(false)
    }

    /// `next_value`, with `eof` meaning no more bytes will come.
    pub fn next_value_at(&mut self, eof: bool) -> Result<Option<Value>, AguiError> {
        loop {
            match self.next_frame(eof)? {
                None => return Ok(None),
                Some(Frame::Value(v)) => return Ok(Some(v)),
                Some(Frame::Data(text)) => return parse_data(text).map(Some),
                Some(Frame::Line(text)) => match serde_json::from_slice::<Value>(text) {
                    Ok(v) => return Ok(Some(v)),
                    Err(_) => self.rewind_to_stream(),
                },
            }
        }
    }

    /// End of input: an incomplete value left over is a `truncated_stream` error (and is
    /// discarded). Call after `next_frame(true)` / `next_value_at(true)` gave `Ok(None)`.
    pub fn finish(&mut self) -> Result<(), AguiError> {
        let rest = &self.buf[self.pos..];
        let leftover = rest.iter().any(|b| !is_ws(*b)) || self.sse_has_data;
        let n = self.pending();
        self.buf.clear();
        self.pos = 0;
        self.sse_data.clear();
        self.sse_has_data = false;
        self.skipping = false;
        self.force_stream = false;
        if leftover {
            return Err(AguiError::decode(
                TRUNCATED_STREAM,
                format!("the stream ends inside an event ({n} bytes left over)"),
            ));
        }
        Ok(())
    }

    /// The next event's input, `Ok(None)` if more bytes are needed (`eof`: none will come).
    pub fn next_frame(&mut self, eof: bool) -> Result<Option<Frame<'_>>, AguiError> {
        if self.sse_dispatched {
            self.sse_data.clear();
            self.sse_dispatched = false;
        }
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

    fn next_json(&mut self, eof: bool) -> Result<Option<Frame<'_>>, AguiError> {
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
        if !self.force_stream {
            let start = self.pos;
            let (mut end, next) = match memchr::memchr(b'\n', &self.buf[start..]) {
                Some(i) => (start + i, start + i + 1),
                None => (self.buf.len(), self.buf.len()),
            };
            while end > start && is_ws(self.buf[end - 1]) {
                end -= 1;
            }
            let complete_line = next < self.buf.len() || eof || self.buf.last() == Some(&b'\n');
            if self.buf[end - 1] == b'}' && self.buf[start] == b'{' && complete_line {
                self.line_start = start;
                self.pos = next;
                return Ok(Some(Frame::Line(&self.buf[start..end])));
            }
            if !complete_line && self.buf[end - 1] != b'}' {
                return Ok(None); // an object can only end with '}': wait for more
            }
        }
        let rest = &self.buf[self.pos..];
        let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                self.pos += stream.byte_offset();
                self.force_stream = false;
                Ok(Some(Frame::Value(v)))
            }
            Some(Err(e)) if e.is_eof() && !eof => Ok(None),
            Some(Err(e)) if e.is_eof() => {
                self.pos = self.buf.len();
                self.force_stream = false;
                Err(AguiError::decode(
                    TRUNCATED_STREAM,
                    format!("the stream ends inside an event: {e}"),
                ))
            }
            Some(Err(e)) => {
                self.force_stream = false;
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

    fn next_sse(&mut self, eof: bool) -> Result<Option<Frame<'_>>, AguiError> {
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

    fn dispatch_sse(&mut self) -> Result<Option<Frame<'_>>, AguiError> {
        self.sse_has_data = false;
        self.sse_dispatched = true;
        Ok(Some(Frame::Data(&self.sse_data)))
    }
}

/// Parses the data of one SSE event.
pub fn parse_data(text: &[u8]) -> Result<Value, AguiError> {
    serde_json::from_slice::<Value>(text)
        .map_err(|e| AguiError::decode(INVALID_JSON, format!("invalid JSON in SSE data: {e}")))
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
                while let Some(v) = f.next_value_at(true).unwrap() {
                    out.push(v);
                }
                f.finish().unwrap();
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
        assert_eq!(f.next_value_at(true).unwrap(), Some(json!({"a":1})));
        f.finish().unwrap();
    }

    #[test]
    fn lines_that_are_not_one_value_are_reparsed_as_a_stream() {
        let input = b"{\"a\": {\"b\": 1}\n}\n{\"c\":1} {\"d\":2}\n{\"e\":\"}\"}";
        for got in all_splits(input) {
            assert_eq!(
                got,
                vec![
                    json!({"a":{"b":1}}),
                    json!({"c":1}),
                    json!({"d":2}),
                    json!({"e":"}"})
                ]
            );
        }
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
        assert_eq!(f.next_value_at(true).unwrap_err().code, TRUNCATED_STREAM);
        let mut f = Framer::new();
        f.push(b"{\"a\":");
        assert_eq!(f.next_value().unwrap(), None);
        assert_eq!(f.finish().unwrap_err().code, TRUNCATED_STREAM);
        let mut f = Framer::new();
        f.push(b"data: {\"a\":");
        assert_eq!(f.next_value().unwrap(), None);
        assert_eq!(f.next_value_at(true).unwrap_err().code, INVALID_JSON);
    }
}
