//! The codec's one error type. Pure: no I/O.
//!
//! Kinds split "you used it wrong" (`Usage*`: an argument the caller can fix) from "the peer or
//! the line sent garbage" (`Frame*` and `Command*`: bytes received from a device or a host).
//! Every kind has a stable snake_case code, listed by [`CodecErrorKind::ALL`].

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodecErrorKind {
    /// An id that cannot be sent (253 and 255 collide with the header; > 255 is not a byte).
    UsageBadId,
    /// Parameters longer than one packet can carry.
    UsageTooLong,
    /// An argument that makes no sense for the instruction (empty id list, wrong data size).
    UsageBadArgument,
    /// A frame whose CRC does not match its bytes.
    FrameCrcMismatch,
    /// A length field below the minimum (instruction + CRC).
    FrameLengthTooShort,
    /// A length field above the decoder's configured maximum.
    FrameLengthTooLong,
    /// A frame addressed to id 253 or 255, which Protocol 2.0 never uses.
    FrameBadId,
    /// `FF FF FD` inside the payload not followed by the stuffing byte `FD`.
    FrameBadStuffing,
    /// A status packet without its error byte.
    FrameStatusTooShort,
    /// A packet whose parameters do not fit its instruction.
    CommandMalformed,
}

impl CodecErrorKind {
    /// Every kind, in a stable order (drift tests compare this with the Python side).
    pub const ALL: [CodecErrorKind; 10] = [
        Self::UsageBadId,
        Self::UsageTooLong,
        Self::UsageBadArgument,
        Self::FrameCrcMismatch,
        Self::FrameLengthTooShort,
        Self::FrameLengthTooLong,
        Self::FrameBadId,
        Self::FrameBadStuffing,
        Self::FrameStatusTooShort,
        Self::CommandMalformed,
    ];

    /// Stable snake_case code.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::UsageBadId => "bad_id",
            Self::UsageTooLong => "too_long",
            Self::UsageBadArgument => "bad_argument",
            Self::FrameCrcMismatch => "crc_mismatch",
            Self::FrameLengthTooShort => "length_too_short",
            Self::FrameLengthTooLong => "length_too_long",
            Self::FrameBadId => "frame_bad_id",
            Self::FrameBadStuffing => "bad_stuffing",
            Self::FrameStatusTooShort => "status_too_short",
            Self::CommandMalformed => "command_malformed",
        }
    }

    /// True when the caller passed a bad argument; false when received bytes were bad.
    #[must_use]
    pub fn is_usage(self) -> bool {
        matches!(
            self,
            Self::UsageBadId | Self::UsageTooLong | Self::UsageBadArgument
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    pub kind: CodecErrorKind,
    pub message: String,
}

impl CodecError {
    pub(crate) fn new(kind: CodecErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.code(), self.message)
    }
}

impl std::error::Error for CodecError {}
