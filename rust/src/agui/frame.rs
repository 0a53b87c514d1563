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
    /// The event handed out was ended by the end of input, not by its blank line.
    sse_unterminated: bool,
    /// Where the last `Frame::Line` started, and whether to parse from there as a stream.
    line_start: usize,
    force_stream: bool,
    /// A JSON value that started at `Wait::start` and was still incomplete when last parsed.
    wait: Option<Wait>,
    /// A line still incomplete when last looked at: it starts at `Seen::start` and holds no
    /// line end before `Seen::end`, so the next look searches only the bytes after it (a long
    /// line arriving in small chunks is then scanned once, not once per chunk).
    seen: Option<Seen>,
}

/// See `Framer::seen`; offsets are absolute in `buf` (kept valid across `push`'s drain).
#[derive(Debug, Clone, Copy)]
struct Seen {
    start: usize,
    end: usize,
}

/// Keeps an incomplete JSON value from being parsed again from its start on every small chunk
/// (which costs time quadratic in its size). A string-aware bracket scan over the new bytes
/// says when the value may be complete; until then it is parsed again only once the pending
/// bytes have doubled, which still finds a syntax error within a bounded delay.
#[derive(Debug, Default)]
struct Wait {
    /// Absolute offset of the value's first byte in `buf` (kept valid across `push`'s drain).
    start: usize,
    /// Pending bytes when the parser last hit the end of the input.
    tried: usize,
    /// Bytes from `start` the scan has read, and its state there.
    scanned: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// False when the value is not an object or array: then it is parsed on every call.
    scannable: bool,
}

impl Wait {
    /// Scans `bytes` (the ones after `scanned`); true when the value's outer brackets closed.
    fn scan(&mut self, bytes: &[u8]) -> bool {
        for (i, &b) in bytes.iter().enumerate() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        self.scanned += i + 1;
                        return true;
                    }
                }
                _ => {}
            }
        }
        self.scanned += bytes.len();
        false
    }
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
            match &mut self.wait {
                // A value that started before `pos` was consumed (as a line) meanwhile.
                Some(w) if w.start < self.pos => self.wait = None,
                Some(w) => w.start -= self.pos,
                None => {}
            }
            self.seen = match self.seen {
                Some(Seen { start, end }) if start >= self.pos => Some(Seen {
                    start: start - self.pos,
                    end: end - self.pos,
                }),
                _ => None,
            };
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
                Some(Frame::Data(text)) => {
                    let parsed = parse_data(text);
                    return parsed.map(Some).map_err(|e| self.data_error(e));
                }
                Some(Frame::Line(text)) => match serde_json::from_slice::<Value>(text) {
                    Ok(v) => return Ok(Some(v)),
                    Err(_) => self.rewind_to_stream(),
                },
            }
        }
    }

    /// `e`, the error of the last `Frame::Data`'s data, as said: `truncated_stream` where that
    /// event was ended by the end of input (its blank line never came: cut short, not
    /// malformed), else `e` itself.
    pub fn data_error(&self, e: AguiError) -> AguiError {
        if !self.sse_unterminated {
            return e;
        }
        let n = self.sse_data.len();
        AguiError::decode(
            TRUNCATED_STREAM,
            format!("the stream ends inside an event ({n} bytes left over)"),
        )
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
        self.sse_unterminated = false;
        self.skipping = false;
        self.force_stream = false;
        self.wait = None;
        self.seen = None;
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
            let from = self.seen_from(start);
            let (mut end, next) = match memchr::memchr(b'\n', &self.buf[from..]) {
                Some(i) => (from + i, from + i + 1),
                None => (self.buf.len(), self.buf.len()),
            };
            while end > start && is_ws(self.buf[end - 1]) {
                end -= 1;
            }
            let complete_line = next < self.buf.len() || eof || self.buf.last() == Some(&b'\n');
            if self.buf[end - 1] == b'}' && self.buf[start] == b'{' && complete_line {
                self.line_start = start;
                self.pos = next;
                self.wait = None;
                return Ok(Some(Frame::Line(&self.buf[start..end])));
            }
            if !complete_line && self.buf[end - 1] != b'}' {
                self.seen = Some(Seen {
                    start,
                    end: self.buf.len(),
                });
                return Ok(None); // an object can only end with '}': wait for more
            }
        }
        if !eof {
            if let Some(w) = self.wait.as_mut().filter(|w| w.start == self.pos) {
                let pending = self.buf.len() - self.pos;
                let complete =
                    !w.scannable || w.scan(&self.buf[self.pos + w.scanned.min(pending)..]);
                if !complete && pending < w.tried.saturating_mul(2) {
                    return Ok(None);
                }
            }
        }
        let rest = &self.buf[self.pos..];
        let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
        let next = stream.next();
        if !matches!(&next, Some(Err(e)) if e.is_eof() && !eof) {
            self.wait = None;
        }
        match next {
            Some(Ok(v)) => {
                self.pos += stream.byte_offset();
                self.force_stream = false;
                Ok(Some(Frame::Value(v)))
            }
            Some(Err(e)) if e.is_eof() && !eof => {
                let (start, pending) = (self.pos, rest.len());
                let w = match &mut self.wait {
                    Some(w) if w.start == start => w,
                    slot => {
                        let mut w = Wait {
                            start,
                            scannable: matches!(rest.first(), Some(b'{' | b'[')),
                            ..Wait::default()
                        };
                        if w.scannable {
                            w.scan(rest);
                        }
                        slot.insert(w)
                    }
                };
                w.tried = pending;
                Ok(None)
            }
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

    /// Where to search `buf` for the end of the line that starts at `start`.
    fn seen_from(&self, start: usize) -> usize {
        match self.seen {
            Some(s) if s.start == start && s.end <= self.buf.len() => s.end,
            _ => start,
        }
    }

    fn next_sse(&mut self, eof: bool) -> Result<Option<Frame<'_>>, AguiError> {
        loop {
            let from = self.seen_from(self.pos) - self.pos;
            let rest = &self.buf[self.pos..];
            let found = memchr::memchr2(b'\n', b'\r', &rest[from..]).map(|i| i + from);
            let (line_end, next) = match found {
                Some(i) if rest[i] == b'\r' => {
                    if i + 1 == rest.len() && !eof {
                        self.seen = Some(Seen {
                            start: self.pos,
                            end: self.pos + i,
                        });
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
                    // End of input counts as the blank line that ends the last event: one
                    // whose data is not JSON was cut short (`next_value_at`).
                    return self.dispatch_sse(true);
                }
                None => {
                    self.seen = Some(Seen {
                        start: self.pos,
                        end: self.buf.len(),
                    });
                    return Ok(None);
                }
            };
            let line_start = self.pos;
            self.pos += next;
            let line = &self.buf[line_start..line_start + line_end];
            if line.is_empty() {
                if self.sse_has_data {
                    return self.dispatch_sse(false);
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

    fn dispatch_sse(&mut self, unterminated: bool) -> Result<Option<Frame<'_>>, AguiError> {
        self.sse_has_data = false;
        self.sse_unterminated = unterminated;
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

    /// Every value of `input` pushed `chunk` bytes at a time.
    fn chunked(input: &[u8], chunk: usize) -> Vec<Value> {
        let mut f = Framer::new();
        let mut out = vec![];
        for part in input.chunks(chunk) {
            f.push(part);
            out.extend(drain(&mut f));
        }
        while let Some(v) = f.next_value_at(true).unwrap() {
            out.push(v);
        }
        f.finish().unwrap();
        out
    }

    #[test]
    fn long_lines_in_small_chunks_frame_as_whole_ones() {
        // A line longer than many chunks is searched for its end once (`Framer::seen`): the
        // values are the same whatever the chunking, CR, CRLF and LF line ends at chunk
        // boundaries included.
        let long = "x".repeat(10_000);
        let event = format!("{{\"type\":\"T\",\"s\":\"{long}\"}}");
        let want = vec![
            serde_json::from_str::<Value>(&event).unwrap(),
            json!({"type": "U"}),
        ];
        let sse_lf = format!("data: {event}\n\ndata: {{\"type\":\"U\"}}\n\n");
        let sse_crlf = sse_lf.replace('\n', "\r\n");
        let sse_cr = sse_lf.replace('\n', "\r");
        let ndjson = format!("{event}\n{{\"type\":\"U\"}}\n");
        let split = format!("data: {{\"type\":\"T\",\ndata: \"s\":\"{long}\"}}\n\n");
        for input in [&sse_lf, &sse_crlf, &sse_cr, &ndjson] {
            for chunk in [1, 7, 4096, 10_007, input.len()] {
                assert_eq!(chunked(input.as_bytes(), chunk), want, "chunk {chunk}");
            }
        }
        for chunk in [1, 13, 4096] {
            assert_eq!(chunked(split.as_bytes(), chunk), want[..1].to_vec());
        }
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
    fn a_big_pretty_value_in_small_chunks_is_parsed_a_bounded_number_of_times() {
        let items: Vec<Value> = (0..20_000)
            .map(|i| json!({"i": i, "s": "}{][\"\\", "n": [i, {"d": i}]}))
            .collect();
        let value = json!({"type": "X", "items": items});
        let text = serde_json::to_vec_pretty(&value).unwrap();
        let mut f = Framer::new();
        let mut got = vec![];
        let mut parses = 0;
        for chunk in text.chunks(512) {
            f.push(chunk);
            let tried = f.wait.as_ref().map(|w| w.tried);
            while let Some(v) = f.next_value().unwrap() {
                got.push(v);
            }
            if f.wait.as_ref().map(|w| w.tried) != tried {
                parses += 1;
            }
        }
        assert_eq!(got, vec![value]);
        // Doubling: about log2(len / 512) re-parses, not one per chunk.
        assert!(
            parses < 20,
            "{parses} parses for {} chunks",
            text.len() / 512
        );
    }

    #[test]
    fn waiting_never_delays_a_complete_value() {
        // A line that ends in '}' before it is complete, then completed and consumed as a line:
        // the next value must not inherit the first one's wait.
        let mut f = Framer::new();
        f.push(b"{\"a\": {\"b\": 1}");
        assert_eq!(f.next_value().unwrap(), None);
        f.push(b"}\n");
        assert_eq!(f.next_value().unwrap(), Some(json!({"a": {"b": 1}})));
        f.push(b"{\"c\":\n1}");
        assert_eq!(f.next_value().unwrap(), Some(json!({"c": 1})));
        // A broken value is still reported once enough input arrives.
        let mut g = Framer::new();
        g.push(b"{\"a\": [1,\n");
        assert_eq!(g.next_value().unwrap(), None);
        g.push(b"2, {\n");
        assert_eq!(g.next_value().unwrap(), None);
        g.push(b"oops}]}\n{\"ok\": true}\n");
        assert_eq!(g.next_value().unwrap_err().code, INVALID_JSON);
        // Resynchronised at a newline, the framer reads on to the good event.
        let mut rest = vec![];
        while let Some(v) = g.next_value().unwrap_or(Some(Value::Null)) {
            rest.push(v);
        }
        assert_eq!(rest.last(), Some(&json!({"ok": true})));
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
        assert_eq!(f.next_value_at(true).unwrap_err().code, TRUNCATED_STREAM);
        // An unterminated last event whose data is whole is still dispatched at the end.
        let mut f = Framer::new();
        f.push(b"data: {\"a\": 1}\n");
        assert_eq!(f.next_value().unwrap(), None);
        assert_eq!(f.next_value_at(true).unwrap(), Some(json!({"a": 1})));
        // A terminated event that is not JSON stays `invalid_json`, at the end too.
        let mut f = Framer::new();
        f.push(b"data: {\"a\":\n\n");
        assert_eq!(f.next_value_at(true).unwrap_err().code, INVALID_JSON);
    }
}
