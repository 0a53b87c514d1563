//! Packets, instructions, byte stuffing and the frame encoder. Pure: no I/O.
//!
//! The encoder stuffs the instruction and parameter bytes (a `FF FF FD` run in the data gets an
//! extra `FD`), then sets LEN and the CRC over the stuffed frame, in the order the e-manual's
//! "Processing Order of Transmission" gives.

use super::crc::crc16;
use super::error::{CodecError, CodecErrorKind};
use super::status::StatusError;

pub const HEADER: [u8; 4] = [0xFF, 0xFF, 0xFD, 0x00];
pub const BROADCAST_ID: u8 = 0xFE;
/// The largest id a single device may have (0..=252).
pub const MAX_DEVICE_ID: u8 = 0xFC;
/// Bytes before the instruction: header (4), id (1), length (2).
pub const PREFIX_LEN: usize = 7;
/// LEN is a u16 and counts instruction (1) + stuffed params + CRC (2).
pub const MAX_LENGTH_FIELD: usize = u16::MAX as usize;

/// Instruction byte values (e-manual, Protocol 2.0 "Instruction").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Instruction {
    Ping = 0x01,
    Read = 0x02,
    Write = 0x03,
    RegWrite = 0x04,
    Action = 0x05,
    FactoryReset = 0x06,
    Reboot = 0x08,
    Clear = 0x10,
    Status = 0x55,
    SyncRead = 0x82,
    SyncWrite = 0x83,
    BulkRead = 0x92,
    BulkWrite = 0x93,
}

impl Instruction {
    pub const ALL: [Instruction; 13] = [
        Self::Ping,
        Self::Read,
        Self::Write,
        Self::RegWrite,
        Self::Action,
        Self::FactoryReset,
        Self::Reboot,
        Self::Clear,
        Self::Status,
        Self::SyncRead,
        Self::SyncWrite,
        Self::BulkRead,
        Self::BulkWrite,
    ];

    #[must_use]
    pub fn from_byte(byte: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|i| *i as u8 == byte)
    }

    /// Stable snake_case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Read => "read",
            Self::Write => "write",
            Self::RegWrite => "reg_write",
            Self::Action => "action",
            Self::FactoryReset => "factory_reset",
            Self::Reboot => "reboot",
            Self::Clear => "clear",
            Self::Status => "status",
            Self::SyncRead => "sync_read",
            Self::SyncWrite => "sync_write",
            Self::BulkRead => "bulk_read",
            Self::BulkWrite => "bulk_write",
        }
    }
}

/// One decoded frame with its parameters unstuffed. A status packet has instruction 0x55 and its
/// error byte as the first parameter (see [`Packet::status_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub id: u8,
    pub instruction: u8,
    pub params: Vec<u8>,
}

impl Packet {
    #[must_use]
    pub fn is_status(&self) -> bool {
        self.instruction == Instruction::Status as u8
    }

    /// The decoded error byte of a status packet.
    ///
    /// # Errors
    /// `FrameStatusTooShort` when a status packet has no error byte, `CommandMalformed` when the
    /// packet is not a status packet at all.
    pub fn status_error(&self) -> Result<StatusError, CodecError> {
        if !self.is_status() {
            return Err(CodecError::new(
                CodecErrorKind::CommandMalformed,
                format!(
                    "instruction 0x{:02X} is not a status packet",
                    self.instruction
                ),
            ));
        }
        match self.params.first() {
            Some(&b) => Ok(StatusError::from_byte(b)),
            None => Err(CodecError::new(
                CodecErrorKind::FrameStatusTooShort,
                "status packet without an error byte",
            )),
        }
    }

    /// Data of a status packet (parameters after the error byte); empty for other packets.
    #[must_use]
    pub fn status_data(&self) -> &[u8] {
        if self.is_status() && !self.params.is_empty() {
            &self.params[1..]
        } else {
            &[]
        }
    }
}

fn check_id(id: u8) -> Result<(), CodecError> {
    if id <= MAX_DEVICE_ID || id == BROADCAST_ID {
        Ok(())
    } else {
        Err(CodecError::new(
            CodecErrorKind::UsageBadId,
            format!("id {id} is not 0..=252 or broadcast 254"),
        ))
    }
}

/// Append `byte` to a frame under construction; `run` counts how far the unstuffed stream has
/// matched `FF FF FD` so far.
#[inline]
fn push_stuffed(out: &mut Vec<u8>, run: &mut u8, byte: u8) {
    out.push(byte);
    *run = match (*run, byte) {
        (0, 0xFF) | (1, 0xFF) => *run + 1,
        (2, 0xFF) => 2,
        (2, 0xFD) => {
            out.push(0xFD);
            0
        }
        _ => 0,
    };
}

/// Build a frame from id, instruction byte and the raw (unstuffed) parameter bytes.
///
/// # Errors
/// `UsageBadId` for an id that is neither 0..=252 nor broadcast; `UsageTooLong` when the stuffed
/// frame does not fit the 16-bit length field.
pub fn encode_instruction(id: u8, instruction: u8, params: &[u8]) -> Result<Vec<u8>, CodecError> {
    check_id(id)?;
    encode_frame(id, instruction, &[], params)
}

/// Build a status packet (what a device answers), as the emulator does.
///
/// # Errors
/// As [`encode_instruction`]; broadcast is not a valid status id.
pub fn encode_status(id: u8, error: u8, params: &[u8]) -> Result<Vec<u8>, CodecError> {
    if id > MAX_DEVICE_ID {
        return Err(CodecError::new(
            CodecErrorKind::UsageBadId,
            format!("status id {id} is not 0..=252"),
        ));
    }
    encode_frame(id, Instruction::Status as u8, &[error], params)
}

/// `lead` and `params` are stuffed as one stream after the instruction byte.
pub(crate) fn encode_frame(
    id: u8,
    instruction: u8,
    lead: &[u8],
    params: &[u8],
) -> Result<Vec<u8>, CodecError> {
    let raw = lead.len() + params.len();
    if raw + 3 > MAX_LENGTH_FIELD {
        return Err(CodecError::new(
            CodecErrorKind::UsageTooLong,
            format!("{raw} parameter bytes do not fit one packet"),
        ));
    }
    // Room for the worst case (one stuffing byte per three data bytes) without reallocating.
    let mut out = Vec::with_capacity(PREFIX_LEN + 3 + raw + raw / 3 + 1);
    out.extend_from_slice(&HEADER);
    out.push(id);
    out.extend_from_slice(&[0, 0]);
    let mut run = 0u8;
    push_stuffed(&mut out, &mut run, instruction);
    for &b in lead.iter().chain(params) {
        push_stuffed(&mut out, &mut run, b);
    }
    let length = out.len() - PREFIX_LEN + 2;
    if length > MAX_LENGTH_FIELD {
        return Err(CodecError::new(
            CodecErrorKind::UsageTooLong,
            format!("stuffed length {length} does not fit the 16-bit length field"),
        ));
    }
    let length = length as u16;
    out[5..7].copy_from_slice(&length.to_le_bytes());
    let crc = crc16(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Remove byte stuffing from the instruction..params region of a received frame.
///
/// # Errors
/// `FrameBadStuffing` when `FF FF FD` is followed by anything but `FD`.
pub fn unstuff(stuffed: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(stuffed.len());
    let mut run = 0u8;
    let mut expect_fd = false;
    for (i, &b) in stuffed.iter().enumerate() {
        if expect_fd {
            if b != 0xFD {
                return Err(CodecError::new(
                    CodecErrorKind::FrameBadStuffing,
                    format!(
                        "FF FF FD at offset {} not followed by FD",
                        i.saturating_sub(3)
                    ),
                ));
            }
            expect_fd = false;
            continue;
        }
        out.push(b);
        run = match (run, b) {
            (0, 0xFF) | (1, 0xFF) => run + 1,
            (2, 0xFF) => 2,
            (2, 0xFD) => {
                expect_fd = true;
                0
            }
            _ => 0,
        };
    }
    if expect_fd {
        return Err(CodecError::new(
            CodecErrorKind::FrameBadStuffing,
            "FF FF FD at the end of the payload without its stuffing byte",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stuffing_round_trips_and_adds_fd() {
        let params = [0xFF, 0xFF, 0xFD, 0x00, 0xFF, 0xFF, 0xFD];
        let frame = encode_instruction(1, 0x03, &params).unwrap();
        // inst + params with two stuffing bytes
        assert_eq!(
            &frame[7..frame.len() - 2],
            &[0x03, 0xFF, 0xFF, 0xFD, 0xFD, 0x00, 0xFF, 0xFF, 0xFD, 0xFD]
        );
        let length = u16::from_le_bytes([frame[5], frame[6]]) as usize;
        assert_eq!(length, frame.len() - 7);
        let region = &frame[7..frame.len() - 2];
        let raw = unstuff(region).unwrap();
        assert_eq!(&raw[1..], &params);
    }

    #[test]
    fn a_long_ff_run_before_fd_is_stuffed_once() {
        let params = [0xFF, 0xFF, 0xFF, 0xFD, 0xFD];
        let frame = encode_instruction(2, 0x03, &params).unwrap();
        let region = &frame[7..frame.len() - 2];
        assert_eq!(region, &[0x03, 0xFF, 0xFF, 0xFF, 0xFD, 0xFD, 0xFD]);
        assert_eq!(&unstuff(region).unwrap()[1..], &params);
    }

    #[test]
    fn bad_ids_and_bad_stuffing_are_typed() {
        assert_eq!(
            encode_instruction(253, 1, &[]).unwrap_err().kind,
            CodecErrorKind::UsageBadId
        );
        assert_eq!(
            encode_instruction(255, 1, &[]).unwrap_err().kind,
            CodecErrorKind::UsageBadId
        );
        assert_eq!(
            encode_status(254, 0, &[]).unwrap_err().kind,
            CodecErrorKind::UsageBadId
        );
        assert_eq!(
            unstuff(&[0xFF, 0xFF, 0xFD, 0x01]).unwrap_err().kind,
            CodecErrorKind::FrameBadStuffing
        );
        assert_eq!(
            unstuff(&[0x03, 0xFF, 0xFF, 0xFD]).unwrap_err().kind,
            CodecErrorKind::FrameBadStuffing
        );
        let huge = vec![0u8; 70_000];
        assert_eq!(
            encode_instruction(1, 3, &huge).unwrap_err().kind,
            CodecErrorKind::UsageTooLong
        );
    }

    #[test]
    fn instruction_bytes_round_trip() {
        for i in Instruction::ALL {
            assert_eq!(Instruction::from_byte(i as u8), Some(i));
        }
        assert_eq!(Instruction::from_byte(0x07), None);
    }
}
