//! Streaming frame decoder: bytes in (`feed`), packets out (`next_packet`). Pure: no I/O.
//!
//! Rules, from the e-manual's "Processing Order of Reception":
//! - Bytes before a header `FF FF FD 00` are garbage: they are dropped and counted
//!   (`discarded`), never reported as packets.
//! - A candidate frame whose id, length or CRC is wrong yields one typed error, and the decoder
//!   skips just the first header byte and scans again, because the real frame may begin inside
//!   the rejected one. A CRC-valid frame with bad stuffing is skipped whole.
//! - An incomplete candidate that already holds a header after its length field is rejected
//!   at once (`FrameBadStuffing`: stuffing keeps headers out of every valid payload), so a cut
//!   header such as `FF FF FD 00 01 FF 0F` cannot make the decoder deaf to the frames after it.
//! - `Ok(None)` means "need more data": a split read leaves the partial frame buffered.
//! - No error is fatal: the decoder stays usable after every error (a serial line must resync).
//!   `resync` abandons a partial frame, e.g. after a read timeout.
//!
//! Any input gives a packet, "need more data" or a [`CodecError`]; a property test checks that
//! no input panics.

use super::crc::crc16;
use super::error::{CodecError, CodecErrorKind};
use super::packet::{unstuff, Packet, HEADER, PREFIX_LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The largest LEN field accepted. Bigger candidates are rejected at once instead of
    /// waiting for bytes that a garbage length claims are coming.
    pub max_length: usize,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        Self { max_length: 4096 }
    }
}

/// Single owner: holds the bytes received so far.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    config: DecoderConfig,
    buf: Vec<u8>,
    start: usize,
    discarded: u64,
}

impl Decoder {
    #[must_use]
    pub fn new(config: DecoderConfig) -> Self {
        Self {
            config,
            buf: Vec::new(),
            start: 0,
            discarded: 0,
        }
    }

    /// Append received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered and not yet turned into a packet.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Garbage bytes dropped so far (outside any frame, or a rejected frame's first byte).
    #[must_use]
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Drop everything buffered.
    pub fn clear(&mut self) {
        self.discarded += self.buffered() as u64;
        self.buf.clear();
        self.start = 0;
    }

    /// Abandon a partial frame: skip its first header byte and scan again on the next call.
    pub fn resync(&mut self) {
        if self.buffered() > 0 {
            self.skip(1);
        }
    }

    fn skip(&mut self, n: usize) {
        let n = n.min(self.buffered());
        self.start += n;
        self.discarded += n as u64;
    }

    fn reject(
        &mut self,
        kind: CodecErrorKind,
        message: String,
    ) -> Result<Option<Packet>, CodecError> {
        self.skip(1);
        Err(CodecError::new(kind, message))
    }

    /// The next complete packet, `Ok(None)` when more bytes are needed, or a typed error for one
    /// rejected candidate frame (call again to continue).
    ///
    /// # Errors
    /// `FrameBadId`, `FrameLengthTooShort`, `FrameLengthTooLong`, `FrameCrcMismatch`,
    /// `FrameBadStuffing`, `FrameStatusTooShort`.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, CodecError> {
        let view = &self.buf[self.start..];
        let Some(offset) = find_header(view) else {
            // Keep a tail that may be the start of a header split across reads.
            let keep = partial_header_suffix(view);
            let drop = view.len() - keep;
            self.skip(drop);
            return Ok(None);
        };
        self.skip(offset);
        let view = &self.buf[self.start..];
        if view.len() < PREFIX_LEN {
            return Ok(None);
        }
        let id = view[4];
        if id == 0xFD || id == 0xFF {
            return self.reject(
                CodecErrorKind::FrameBadId,
                format!("frame addressed to reserved id {id}"),
            );
        }
        let length = usize::from(u16::from_le_bytes([view[5], view[6]]));
        if length < 3 {
            return self.reject(
                CodecErrorKind::FrameLengthTooShort,
                format!("length field {length} is below 3 (instruction + CRC)"),
            );
        }
        if length > self.config.max_length {
            return self.reject(
                CodecErrorKind::FrameLengthTooLong,
                format!(
                    "length field {length} exceeds the maximum {}",
                    self.config.max_length
                ),
            );
        }
        let total = PREFIX_LEN + length;
        if view.len() < total {
            // Stuffing turns every `FF FF FD` of a payload into `FF FF FD FD`, so no valid
            // frame holds a header from its instruction byte on. One there proves this
            // candidate is garbage (a cut-off header whose length field would otherwise make
            // the decoder wait for, and swallow, the frames that follow it).
            if let Some(at) = find_header(&view[PREFIX_LEN..]) {
                return self.reject(
                    CodecErrorKind::FrameBadStuffing,
                    format!(
                        "frame for id {id} declares {length} bytes but a new header starts \
                         {} bytes in",
                        PREFIX_LEN + at
                    ),
                );
            }
            return Ok(None);
        }
        let body_end = total - 2;
        let expected = u16::from_le_bytes([view[body_end], view[body_end + 1]]);
        let actual = crc16(&view[..body_end]);
        if expected != actual {
            return self.reject(
                CodecErrorKind::FrameCrcMismatch,
                format!(
                    "frame for id {id} carries CRC 0x{expected:04X}, bytes give 0x{actual:04X}"
                ),
            );
        }
        let raw = match unstuff(&view[PREFIX_LEN..body_end]) {
            Ok(raw) => raw,
            Err(e) => {
                self.skip(total);
                return Err(e);
            }
        };
        self.start += total;
        // `raw` holds at least the instruction byte: length >= 3 and unstuffing never empties it.
        let Some((&instruction, params)) = raw.split_first() else {
            return Err(CodecError::new(
                CodecErrorKind::FrameLengthTooShort,
                "empty frame body",
            ));
        };
        let packet = Packet {
            id,
            instruction,
            params: params.to_vec(),
        };
        if packet.is_status() && packet.params.is_empty() {
            return Err(CodecError::new(
                CodecErrorKind::FrameStatusTooShort,
                format!("status packet from id {id} without an error byte"),
            ));
        }
        Ok(Some(packet))
    }
}

fn find_header(view: &[u8]) -> Option<usize> {
    view.windows(HEADER.len()).position(|w| w == HEADER)
}

/// Length of the longest suffix of `view` that is a proper prefix of the header.
fn partial_header_suffix(view: &[u8]) -> usize {
    (1..HEADER.len())
        .rev()
        .find(|&n| view.len() >= n && view[view.len() - n..] == HEADER[..n])
        .unwrap_or(0)
}

/// Decode exactly one complete frame (no leading garbage, nothing after it).
///
/// # Errors
/// Any frame error, or `FrameLengthTooShort` when the bytes end before the frame does and
/// `CommandMalformed` when bytes follow it.
pub fn decode_frame(frame: &[u8]) -> Result<Packet, CodecError> {
    let mut decoder = Decoder::new(DecoderConfig {
        max_length: usize::from(u16::MAX),
    });
    decoder.feed(frame);
    let discarded_before = decoder.discarded();
    match decoder.next_packet()? {
        Some(p) if decoder.buffered() == 0 && decoder.discarded() == discarded_before => Ok(p),
        Some(_) => Err(CodecError::new(
            CodecErrorKind::CommandMalformed,
            "bytes around the frame",
        )),
        None => Err(CodecError::new(
            CodecErrorKind::FrameLengthTooShort,
            "incomplete frame",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::packet::{encode_instruction, encode_status};
    use proptest::prelude::*;

    fn drain(d: &mut Decoder) -> (Vec<Packet>, Vec<CodecErrorKind>) {
        let mut packets = Vec::new();
        let mut errors = Vec::new();
        loop {
            match d.next_packet() {
                Ok(Some(p)) => packets.push(p),
                Ok(None) => break,
                Err(e) => errors.push(e.kind),
            }
        }
        (packets, errors)
    }

    #[test]
    fn garbage_before_and_between_frames_is_skipped() {
        let a = encode_status(1, 0, &[0xA6, 0, 0, 0]).unwrap();
        let b = encode_status(2, 0x80, &[]).unwrap();
        let mut stream = vec![0x00, 0xFF, 0x13, 0xFF, 0xFF];
        stream.extend(&a);
        stream.extend([0xFF, 0xFD, 0x00]);
        stream.extend(&b);
        let mut d = Decoder::default();
        d.feed(&stream);
        let (packets, errors) = drain(&mut d);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(packets.len(), 2);
        assert_eq!(packets[0].status_data(), &[0xA6, 0, 0, 0]);
        assert!(packets[1].status_error().unwrap().alert);
        assert_eq!(d.discarded(), 8);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn split_reads_need_more_data_then_complete() {
        let frame = encode_instruction(7, 0x02, &[0x84, 0, 4, 0]).unwrap();
        for cut in 0..frame.len() {
            let mut d = Decoder::default();
            d.feed(&frame[..cut]);
            assert_eq!(d.next_packet(), Ok(None), "cut {cut}");
            d.feed(&frame[cut..]);
            let p = d.next_packet().unwrap().unwrap();
            assert_eq!(
                (p.id, p.instruction, p.params.as_slice()),
                (7, 2, &[0x84, 0, 4, 0][..])
            );
        }
    }

    #[test]
    fn a_corrupt_frame_is_reported_and_the_next_one_survives() {
        let mut bad = encode_status(1, 0, &[1, 2]).unwrap();
        let n = bad.len();
        bad[n - 1] ^= 0x55;
        let good = encode_status(2, 0, &[3]).unwrap();
        let mut d = Decoder::default();
        d.feed(&bad);
        d.feed(&good);
        let (packets, errors) = drain(&mut d);
        assert_eq!(errors, vec![CodecErrorKind::FrameCrcMismatch]);
        assert_eq!(packets.len(), 1);
        assert_eq!(packets[0].id, 2);
    }

    #[test]
    fn resync_abandons_a_partial_frame_after_a_timeout() {
        // A header with a large (but allowed) length and a few bytes that hold no header: the
        // decoder waits for the rest; after the caller's read timeout, resync drops it.
        let mut d = Decoder::default();
        d.feed(&[0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x00, 0x01, 0x03, 0x10, 0x20]);
        assert_eq!(d.next_packet(), Ok(None));
        assert_eq!(d.buffered(), 10);
        d.resync();
        assert_eq!(d.next_packet(), Ok(None));
        assert_eq!(d.buffered(), 0);
        let good = encode_status(3, 0, &[9]).unwrap();
        d.feed(&good);
        assert_eq!(d.next_packet().unwrap().unwrap().id, 3);
    }

    #[test]
    fn a_cut_header_with_a_huge_length_does_not_swallow_the_next_frame() {
        // `FF FF FD 00 01 FF 0F`: a header for id 1 claiming 4095 more bytes, then a PING.
        let ping = encode_instruction(1, 0x01, &[]).unwrap();
        let mut stream = vec![0xFF, 0xFF, 0xFD, 0x00, 0x01, 0xFF, 0x0F];
        stream.extend(&ping);
        let mut d = Decoder::default();
        d.feed(&stream);
        let (packets, errors) = drain(&mut d);
        assert_eq!(errors, vec![CodecErrorKind::FrameBadStuffing]);
        assert_eq!(packets.len(), 1);
        assert_eq!((packets[0].id, packets[0].instruction), (1, 0x01));
        assert_eq!(d.buffered(), 0);
        // The same bytes one at a time: need-more-data until the PING's header is complete.
        let mut d = Decoder::default();
        let mut found = Vec::new();
        for b in &stream {
            d.feed(&[*b]);
            let (p, _) = drain(&mut d);
            found.extend(p);
        }
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, 1);
    }

    #[test]
    fn bad_fields_are_typed() {
        let cases: [(&[u8], CodecErrorKind); 4] = [
            (
                &[0xFF, 0xFF, 0xFD, 0x00, 0xFD, 3, 0, 1, 0, 0],
                CodecErrorKind::FrameBadId,
            ),
            (
                &[0xFF, 0xFF, 0xFD, 0x00, 0x01, 2, 0, 1, 0],
                CodecErrorKind::FrameLengthTooShort,
            ),
            (
                &[0xFF, 0xFF, 0xFD, 0x00, 0x01, 0xFF, 0xFF],
                CodecErrorKind::FrameLengthTooLong,
            ),
            (
                &[0xFF, 0xFF, 0xFD, 0x00, 0x01, 3, 0, 1, 0, 0],
                CodecErrorKind::FrameCrcMismatch,
            ),
        ];
        for (bytes, kind) in cases {
            let mut d = Decoder::default();
            d.feed(bytes);
            assert_eq!(d.next_packet().unwrap_err().kind, kind);
        }
        // A CRC-valid status frame without an error byte.
        let mut frame = vec![0xFF, 0xFF, 0xFD, 0x00, 0x01, 3, 0, 0x55];
        let crc = crc16(&frame);
        frame.extend(crc.to_le_bytes());
        assert_eq!(
            decode_frame(&frame).unwrap_err().kind,
            CodecErrorKind::FrameStatusTooShort
        );
    }

    fn check_invariants(chunks: &[Vec<u8>]) {
        let mut d = Decoder::new(DecoderConfig { max_length: 300 });
        let mut total = 0usize;
        for chunk in chunks {
            total += chunk.len();
            d.feed(chunk);
            // Each call either consumes bytes, or reports need-more-data: it cannot loop forever.
            for _ in 0..=total + 1 {
                match d.next_packet() {
                    Ok(None) => break,
                    Ok(Some(p)) => assert!(p.id != 0xFD && p.id != 0xFF),
                    Err(e) => assert!(!e.kind.is_usage()),
                }
            }
        }
        assert!(d.buffered() <= total);
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_arbitrary_bytes(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8)) {
            check_invariants(&chunks);
        }

        #[test]
        fn decode_never_panics_on_header_heavy_bytes(
            chunks in prop::collection::vec(prop::collection::vec(prop::sample::select(vec![0x00u8, 0x01, 0x03, 0x55, 0xFD, 0xFF]), 0..64), 0..8)
        ) {
            check_invariants(&chunks);
        }

        #[test]
        fn a_cut_header_never_hides_the_frame_after_it(
            id in 0u8..=252, len in 3u16..=4096, junk in prop::collection::vec(0u8..0xFD, 0..20),
            params in prop::collection::vec(any::<u8>(), 1..40), cut in 0usize..120,
        ) {
            // A cut-off header whose length field reaches past everything that follows: only
            // the header rule can end the wait (the bytes never complete the bogus frame).
            let frame = encode_instruction(2, 0x03, &params).unwrap();
            let mut stream = HEADER.to_vec();
            stream.push(id);
            stream.extend(len.to_le_bytes());
            stream.extend(&junk);
            prop_assume!(PREFIX_LEN + usize::from(len) > stream.len() + frame.len());
            stream.extend(&frame);
            let cut = cut.min(stream.len());
            let mut d = Decoder::default();
            d.feed(&stream[..cut]);
            let (mut found, _) = drain(&mut d);
            d.feed(&stream[cut..]);
            found.extend(drain(&mut d).0);
            let expected = Packet { id: 2, instruction: 0x03, params };
            prop_assert_eq!(found, vec![expected]);
        }

        #[test]
        fn any_encoded_frame_survives_noise_and_any_split(
            id in 0u8..=252, inst in any::<u8>(), params in prop::collection::vec(any::<u8>(), 1..40),
            noise in prop::collection::vec(0u8..0xFD, 0..20), cut in 0usize..100,
        ) {
            // Noise without FD cannot hold a header; params are non-empty so a 0x55 frame is a
            // valid status packet.
            let frame = encode_instruction(id, inst, &params).unwrap();
            let mut stream = noise.clone();
            stream.extend(&frame);
            let cut = cut.min(stream.len());
            let mut d = Decoder::default();
            d.feed(&stream[..cut]);
            let mut found = Vec::new();
            loop { match d.next_packet() { Ok(Some(p)) => found.push(p), Ok(None) => break, Err(_) => {} } }
            d.feed(&stream[cut..]);
            loop { match d.next_packet() { Ok(Some(p)) => found.push(p), Ok(None) => break, Err(_) => {} } }
            let expected = Packet { id, instruction: inst, params };
            prop_assert!(found.contains(&expected));
        }
    }
}
