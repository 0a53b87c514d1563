//! Typed instructions: encode a command for an id, parse a received instruction packet back into
//! one (the emulator's side). Pure: no I/O.
//!
//! Parameter layouts follow the e-manual's "Instruction Details": addresses and lengths are
//! little-endian u16; SYNC_READ lists ids; SYNC_WRITE lists `id, data[length]` per device.

use super::error::{CodecError, CodecErrorKind};
use super::packet::{encode_instruction, Instruction, Packet, BROADCAST_ID, MAX_DEVICE_ID};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Ping,
    Read {
        address: u16,
        length: u16,
    },
    Write {
        address: u16,
        data: Vec<u8>,
    },
    RegWrite {
        address: u16,
        data: Vec<u8>,
    },
    Action,
    FactoryReset {
        option: u8,
    },
    Reboot,
    SyncRead {
        address: u16,
        length: u16,
        ids: Vec<u8>,
    },
    SyncWrite {
        address: u16,
        length: u16,
        entries: Vec<(u8, Vec<u8>)>,
    },
    /// Any other instruction (CLEAR, BULK_*, unknown bytes): carried, not interpreted.
    Other {
        instruction: u8,
        params: Vec<u8>,
    },
}

fn usage(message: impl Into<String>) -> CodecError {
    CodecError::new(CodecErrorKind::UsageBadArgument, message)
}

fn malformed(message: impl Into<String>) -> CodecError {
    CodecError::new(CodecErrorKind::CommandMalformed, message)
}

fn u16_at(params: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([params[at], params[at + 1]])
}

fn check_device_ids(ids: impl Iterator<Item = u8>) -> Result<(), CodecError> {
    let mut seen = [false; 256];
    for id in ids {
        if id > MAX_DEVICE_ID {
            return Err(CodecError::new(
                CodecErrorKind::UsageBadId,
                format!("device id {id} is not 0..=252"),
            ));
        }
        if std::mem::replace(&mut seen[usize::from(id)], true) {
            return Err(usage(format!("device id {id} listed twice")));
        }
    }
    Ok(())
}

impl Command {
    /// The instruction byte this command is sent with.
    #[must_use]
    pub fn instruction(&self) -> u8 {
        match self {
            Self::Ping => Instruction::Ping as u8,
            Self::Read { .. } => Instruction::Read as u8,
            Self::Write { .. } => Instruction::Write as u8,
            Self::RegWrite { .. } => Instruction::RegWrite as u8,
            Self::Action => Instruction::Action as u8,
            Self::FactoryReset { .. } => Instruction::FactoryReset as u8,
            Self::Reboot => Instruction::Reboot as u8,
            Self::SyncRead { .. } => Instruction::SyncRead as u8,
            Self::SyncWrite { .. } => Instruction::SyncWrite as u8,
            Self::Other { instruction, .. } => *instruction,
        }
    }

    /// Stable snake_case name ("other" for uninterpreted instructions).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Other { .. } => "other",
            _ => Instruction::from_byte(self.instruction()).map_or("other", Instruction::name),
        }
    }

    /// Parameter bytes (unstuffed).
    ///
    /// # Errors
    /// `UsageBadArgument` for an empty read/write, a SYNC_WRITE entry of the wrong size, or an
    /// empty id list; `UsageBadId` for a listed id outside 0..=252.
    pub fn params(&self) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        match self {
            Self::Ping | Self::Action | Self::Reboot => {}
            Self::Read { address, length } => {
                if *length == 0 {
                    return Err(usage("READ of zero bytes"));
                }
                out.extend(address.to_le_bytes());
                out.extend(length.to_le_bytes());
            }
            Self::Write { address, data } | Self::RegWrite { address, data } => {
                if data.is_empty() {
                    return Err(usage("WRITE of zero bytes"));
                }
                out.extend(address.to_le_bytes());
                out.extend(data);
            }
            Self::FactoryReset { option } => out.push(*option),
            Self::SyncRead {
                address,
                length,
                ids,
            } => {
                if *length == 0 || ids.is_empty() {
                    return Err(usage("SYNC_READ needs a length and at least one id"));
                }
                check_device_ids(ids.iter().copied())?;
                out.extend(address.to_le_bytes());
                out.extend(length.to_le_bytes());
                out.extend(ids);
            }
            Self::SyncWrite {
                address,
                length,
                entries,
            } => {
                if *length == 0 || entries.is_empty() {
                    return Err(usage("SYNC_WRITE needs a length and at least one entry"));
                }
                check_device_ids(entries.iter().map(|(id, _)| *id))?;
                out.extend(address.to_le_bytes());
                out.extend(length.to_le_bytes());
                for (id, data) in entries {
                    if data.len() != usize::from(*length) {
                        return Err(usage(format!(
                            "SYNC_WRITE entry for id {id} has {} bytes, expected {length}",
                            data.len()
                        )));
                    }
                    out.push(*id);
                    out.extend(data);
                }
            }
            Self::Other { params, .. } => out.extend(params),
        }
        Ok(out)
    }

    /// Encode for one id (SYNC_* must go to the broadcast id 254).
    ///
    /// # Errors
    /// As [`Command::params`] and [`encode_instruction`].
    pub fn encode(&self, id: u8) -> Result<Vec<u8>, CodecError> {
        if matches!(self, Self::SyncRead { .. } | Self::SyncWrite { .. }) && id != BROADCAST_ID {
            return Err(usage(format!(
                "{} is sent to the broadcast id 254, not {id}",
                self.name()
            )));
        }
        encode_instruction(id, self.instruction(), &self.params()?)
    }

    /// Interpret a received instruction packet.
    ///
    /// # Errors
    /// `CommandMalformed` when the parameters do not fit the instruction, or for a status packet.
    pub fn parse(packet: &Packet) -> Result<Command, CodecError> {
        let p = packet.params.as_slice();
        let Some(instruction) = Instruction::from_byte(packet.instruction) else {
            return Ok(Self::Other {
                instruction: packet.instruction,
                params: p.to_vec(),
            });
        };
        let no_params = |cmd: Command| {
            if p.is_empty() {
                Ok(cmd)
            } else {
                Err(malformed(format!(
                    "{} takes no parameters, got {}",
                    instruction.name(),
                    p.len()
                )))
            }
        };
        match instruction {
            Instruction::Ping => no_params(Self::Ping),
            Instruction::Action => no_params(Self::Action),
            Instruction::Reboot => no_params(Self::Reboot),
            Instruction::Read => {
                if p.len() != 4 {
                    return Err(malformed(format!(
                        "READ takes 4 parameter bytes, got {}",
                        p.len()
                    )));
                }
                Ok(Self::Read {
                    address: u16_at(p, 0),
                    length: u16_at(p, 2),
                })
            }
            Instruction::Write | Instruction::RegWrite => {
                if p.len() < 3 {
                    return Err(malformed(format!(
                        "{} needs an address and data",
                        instruction.name()
                    )));
                }
                let (address, data) = (u16_at(p, 0), p[2..].to_vec());
                Ok(if instruction == Instruction::Write {
                    Self::Write { address, data }
                } else {
                    Self::RegWrite { address, data }
                })
            }
            Instruction::FactoryReset => {
                if p.len() != 1 {
                    return Err(malformed("FACTORY_RESET takes one option byte"));
                }
                Ok(Self::FactoryReset { option: p[0] })
            }
            Instruction::SyncRead => {
                if p.len() < 5 {
                    return Err(malformed(
                        "SYNC_READ needs address, length and at least one id",
                    ));
                }
                Ok(Self::SyncRead {
                    address: u16_at(p, 0),
                    length: u16_at(p, 2),
                    ids: p[4..].to_vec(),
                })
            }
            Instruction::SyncWrite => {
                if p.len() < 4 {
                    return Err(malformed("SYNC_WRITE needs address and length"));
                }
                let (address, length) = (u16_at(p, 0), u16_at(p, 2));
                let stride = usize::from(length) + 1;
                let rest = &p[4..];
                if length == 0 || rest.is_empty() || rest.len() % stride != 0 {
                    return Err(malformed(format!(
                        "SYNC_WRITE body of {} bytes is not a whole number of {stride}-byte entries",
                        rest.len()
                    )));
                }
                let entries = rest
                    .chunks_exact(stride)
                    .map(|c| (c[0], c[1..].to_vec()))
                    .collect();
                Ok(Self::SyncWrite {
                    address,
                    length,
                    entries,
                })
            }
            Instruction::Status => Err(malformed("a status packet is not a command")),
            Instruction::Clear | Instruction::BulkRead | Instruction::BulkWrite => {
                Ok(Self::Other {
                    instruction: packet.instruction,
                    params: p.to_vec(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decoder::decode_frame;

    #[test]
    fn every_command_round_trips_through_the_wire() {
        let commands = [
            (1, Command::Ping),
            (
                1,
                Command::Read {
                    address: 132,
                    length: 4,
                },
            ),
            (
                2,
                Command::Write {
                    address: 116,
                    data: vec![0, 2, 0, 0],
                },
            ),
            (
                3,
                Command::RegWrite {
                    address: 116,
                    data: vec![0xFF, 0xFF, 0xFD, 0],
                },
            ),
            (BROADCAST_ID, Command::Action),
            (1, Command::Reboot),
            (1, Command::FactoryReset { option: 1 }),
            (
                BROADCAST_ID,
                Command::SyncRead {
                    address: 132,
                    length: 4,
                    ids: vec![1, 2],
                },
            ),
            (
                BROADCAST_ID,
                Command::SyncWrite {
                    address: 116,
                    length: 4,
                    entries: vec![(1, vec![1, 0, 0, 0]), (2, vec![2, 0, 0, 0])],
                },
            ),
            (
                1,
                Command::Other {
                    instruction: 0x10,
                    params: vec![1, 0x44, 0x58, 0x4C, 0x22],
                },
            ),
        ];
        for (id, cmd) in commands {
            let frame = cmd.encode(id).unwrap();
            let packet = decode_frame(&frame).unwrap();
            assert_eq!(packet.id, id);
            assert_eq!(Command::parse(&packet).unwrap(), cmd);
        }
    }

    #[test]
    fn misuse_is_a_usage_error() {
        let sync = Command::SyncRead {
            address: 132,
            length: 4,
            ids: vec![1],
        };
        assert_eq!(
            sync.encode(1).unwrap_err().kind,
            CodecErrorKind::UsageBadArgument
        );
        let dup = Command::SyncRead {
            address: 132,
            length: 4,
            ids: vec![1, 1],
        };
        assert_eq!(
            dup.encode(BROADCAST_ID).unwrap_err().kind,
            CodecErrorKind::UsageBadArgument
        );
        let bad = Command::SyncWrite {
            address: 116,
            length: 4,
            entries: vec![(1, vec![0; 3])],
        };
        assert_eq!(
            bad.encode(BROADCAST_ID).unwrap_err().kind,
            CodecErrorKind::UsageBadArgument
        );
        let big = Command::SyncRead {
            address: 132,
            length: 4,
            ids: vec![253],
        };
        assert_eq!(
            big.encode(BROADCAST_ID).unwrap_err().kind,
            CodecErrorKind::UsageBadId
        );
        assert!(Command::Read {
            address: 0,
            length: 0
        }
        .encode(1)
        .is_err());
    }

    #[test]
    fn malformed_parameters_are_typed() {
        let packet = |instruction: u8, params: &[u8]| Packet {
            id: 1,
            instruction,
            params: params.to_vec(),
        };
        for (inst, params) in [
            (0x01u8, &[0u8][..]),
            (0x02, &[0, 0, 4]),
            (0x03, &[0, 0]),
            (0x83, &[116, 0, 4, 0, 1, 0]),
        ] {
            assert_eq!(
                Command::parse(&packet(inst, params)).unwrap_err().kind,
                CodecErrorKind::CommandMalformed
            );
        }
        assert!(Command::parse(&packet(0x55, &[0])).is_err());
        assert_eq!(
            Command::parse(&packet(0x77, &[1])).unwrap(),
            Command::Other {
                instruction: 0x77,
                params: vec![1]
            }
        );
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics_and_round_trips_what_it_accepts(
            inst in proptest::sample::select(vec![0x01u8, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x10, 0x55, 0x82, 0x83, 0x92, 0x93, 0x77]),
            params in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            let packet = Packet { id: 0xFE, instruction: inst, params };
            if let Ok(cmd) = Command::parse(&packet) {
                // Whatever parses re-encodes to the same parameter bytes (when it is encodable).
                if let Ok(bytes) = cmd.params() {
                    proptest::prop_assert_eq!(bytes, packet.params);
                }
            }
        }
    }
}
