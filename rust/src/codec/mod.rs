//! DYNAMIXEL Protocol 2.0 wire codec (ROBOTIS e-manual, "Protocol 2.0").
//!
//! Pure: this module never opens a port, reads a clock or sleeps. It turns commands into bytes
//! (`packet`, `command`) and bytes into packets (`decoder`), and names what went wrong with a
//! stable snake_case code (`error`). Framing, from the e-manual:
//!
//! ```text
//! FF FF FD 00 | ID | LEN_L LEN_H | INST | PARAM ... | CRC_L CRC_H
//! ```
//! `LEN` counts INST + (stuffed) params + CRC; the CRC-16 (poly 0x8005, `crc`) covers every byte
//! from the header to the last parameter, after byte stuffing (`FF FF FD` -> `FF FF FD FD`).

pub mod command;
pub mod crc;
pub mod decoder;
pub mod error;
pub mod packet;
pub mod status;

pub use command::Command;
pub use crc::crc16;
pub use decoder::{Decoder, DecoderConfig};
pub use error::{CodecError, CodecErrorKind};
pub use packet::{encode_instruction, encode_status, Instruction, Packet};
pub use status::{StatusError, StatusErrorCode};

#[cfg(test)]
mod golden_tests;
