//! The error byte of a status packet: bit 7 is Alert (check Hardware Error Status), bits 0-6 the
//! error number (e-manual, Protocol 2.0 "Error"). Pure: no I/O.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusErrorCode {
    None,
    ResultFail,
    Instruction,
    Crc,
    DataRange,
    DataLength,
    DataLimit,
    Access,
    /// An error number the e-manual does not define (kept, never dropped).
    Unknown(u8),
}

impl StatusErrorCode {
    /// The defined codes in wire order 0..=7 (drift tests compare this with Python).
    pub const DEFINED: [StatusErrorCode; 8] = [
        Self::None,
        Self::ResultFail,
        Self::Instruction,
        Self::Crc,
        Self::DataRange,
        Self::DataLength,
        Self::DataLimit,
        Self::Access,
    ];

    #[must_use]
    pub fn from_number(number: u8) -> Self {
        match number {
            0 => Self::None,
            1 => Self::ResultFail,
            2 => Self::Instruction,
            3 => Self::Crc,
            4 => Self::DataRange,
            5 => Self::DataLength,
            6 => Self::DataLimit,
            7 => Self::Access,
            other => Self::Unknown(other),
        }
    }

    #[must_use]
    pub fn number(self) -> u8 {
        match self {
            Self::None => 0,
            Self::ResultFail => 1,
            Self::Instruction => 2,
            Self::Crc => 3,
            Self::DataRange => 4,
            Self::DataLength => 5,
            Self::DataLimit => 6,
            Self::Access => 7,
            Self::Unknown(n) => n,
        }
    }

    /// Stable snake_case code.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ResultFail => "result_fail",
            Self::Instruction => "instruction",
            Self::Crc => "crc",
            Self::DataRange => "data_range",
            Self::DataLength => "data_length",
            Self::DataLimit => "data_limit",
            Self::Access => "access",
            Self::Unknown(_) => "unknown",
        }
    }
}

/// A decoded status error byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusError {
    pub alert: bool,
    pub code: StatusErrorCode,
}

impl StatusError {
    #[must_use]
    pub fn from_byte(byte: u8) -> Self {
        Self {
            alert: byte & 0x80 != 0,
            code: StatusErrorCode::from_number(byte & 0x7F),
        }
    }

    #[must_use]
    pub fn to_byte(self) -> u8 {
        (if self.alert { 0x80 } else { 0 }) | (self.code.number() & 0x7F)
    }

    /// True when the instruction was processed without an error number (alert may still be set).
    #[must_use]
    pub fn is_ok(self) -> bool {
        self.code == StatusErrorCode::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_and_number_are_independent() {
        let e = StatusError::from_byte(0x84);
        assert!(e.alert);
        assert_eq!(e.code, StatusErrorCode::DataRange);
        assert_eq!(e.to_byte(), 0x84);
        assert_eq!(
            StatusError::from_byte(0x09).code,
            StatusErrorCode::Unknown(9)
        );
        for (n, c) in StatusErrorCode::DEFINED.iter().enumerate() {
            assert_eq!(usize::from(c.number()), n);
        }
    }
}
