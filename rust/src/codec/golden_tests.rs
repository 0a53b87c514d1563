//! Golden vectors: the example packets published in the ROBOTIS e-manual, "DYNAMIXEL Protocol
//! 2.0", section "Instruction Details" (XM430-W210 examples). The bytes below are copied from
//! those tables, never produced by this encoder; both directions are checked against them.

use super::command::Command;
use super::crc::crc16;
use super::decoder::{decode_frame, Decoder};
use super::packet::{encode_status, BROADCAST_ID};
use super::status::StatusErrorCode;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// (what, id, command, instruction packet) from the e-manual.
fn instruction_examples() -> Vec<(&'static str, u8, Command, Vec<u8>)> {
    vec![
        (
            "ping id 1",
            1,
            Command::Ping,
            hex("FF FF FD 00 01 03 00 01 19 4E"),
        ),
        (
            "ping broadcast",
            BROADCAST_ID,
            Command::Ping,
            hex("FF FF FD 00 FE 03 00 01 31 42"),
        ),
        (
            "read present position",
            1,
            Command::Read {
                address: 132,
                length: 4,
            },
            hex("FF FF FD 00 01 07 00 02 84 00 04 00 1D 15"),
        ),
        (
            "write goal position 512",
            1,
            Command::Write {
                address: 116,
                data: vec![0x00, 0x02, 0x00, 0x00],
            },
            hex("FF FF FD 00 01 09 00 03 74 00 00 02 00 00 CA 89"),
        ),
        (
            "reg write goal velocity 200",
            1,
            Command::RegWrite {
                address: 104,
                data: vec![0xC8, 0, 0, 0],
            },
            hex("FF FF FD 00 01 09 00 04 68 00 C8 00 00 00 AE 8E"),
        ),
        (
            "action",
            1,
            Command::Action,
            hex("FF FF FD 00 01 03 00 05 02 CE"),
        ),
        (
            "factory reset except id",
            1,
            Command::FactoryReset { option: 1 },
            hex("FF FF FD 00 01 04 00 06 01 A1 E6"),
        ),
        (
            "reboot",
            1,
            Command::Reboot,
            hex("FF FF FD 00 01 03 00 08 2F 4E"),
        ),
        (
            "clear multi-turn",
            1,
            Command::Other {
                instruction: 0x10,
                params: hex("01 44 58 4C 22"),
            },
            hex("FF FF FD 00 01 08 00 10 01 44 58 4C 22 B1 DC"),
        ),
        (
            "sync read present position ids 1,2",
            BROADCAST_ID,
            Command::SyncRead {
                address: 132,
                length: 4,
                ids: vec![1, 2],
            },
            hex("FF FF FD 00 FE 09 00 82 84 00 04 00 01 02 CE FA"),
        ),
        (
            "sync write goal position 150/170",
            BROADCAST_ID,
            Command::SyncWrite {
                address: 116,
                length: 4,
                entries: vec![(1, vec![0x96, 0, 0, 0]), (2, vec![0xAA, 0, 0, 0])],
            },
            hex("FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87"),
        ),
        (
            "bulk read",
            BROADCAST_ID,
            Command::Other {
                instruction: 0x92,
                params: hex("01 90 00 02 00 02 92 00 01 00"),
            },
            hex("FF FF FD 00 FE 0D 00 92 01 90 00 02 00 02 92 00 01 00 1A 05"),
        ),
        (
            "bulk write",
            BROADCAST_ID,
            Command::Other {
                instruction: 0x93,
                params: hex("01 20 00 02 00 A0 00 02 1F 00 01 00 50"),
            },
            hex("FF FF FD 00 FE 10 00 93 01 20 00 02 00 A0 00 02 1F 00 01 00 50 B7 68"),
        ),
    ]
}

/// (what, id, error byte, data, status packet) from the e-manual.
type StatusExample = (&'static str, u8, u8, Vec<u8>, Vec<u8>);

fn status_examples() -> Vec<StatusExample> {
    vec![
        (
            "ping reply id 1",
            1,
            0,
            hex("06 04 26"),
            hex("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D"),
        ),
        (
            "ping reply id 2",
            2,
            0,
            hex("06 04 26"),
            hex("FF FF FD 00 02 07 00 55 00 06 04 26 6F 6D"),
        ),
        (
            "read reply 166",
            1,
            0,
            hex("A6 00 00 00"),
            hex("FF FF FD 00 01 08 00 55 00 A6 00 00 00 8C C0"),
        ),
        (
            "sync read reply 2079",
            2,
            0,
            hex("1F 08 00 00"),
            hex("FF FF FD 00 02 08 00 55 00 1F 08 00 00 BA BE"),
        ),
        (
            "write/action/reboot reply",
            1,
            0,
            vec![],
            hex("FF FF FD 00 01 04 00 55 00 A1 0C"),
        ),
        (
            "bulk read reply voltage",
            1,
            0,
            hex("77 00"),
            hex("FF FF FD 00 01 06 00 55 00 77 00 C3 69"),
        ),
        (
            "bulk read reply temperature",
            2,
            0,
            hex("24"),
            hex("FF FF FD 00 02 05 00 55 00 24 8B A9"),
        ),
    ]
}

#[test]
fn encoder_reproduces_the_published_instruction_packets() {
    for (what, id, cmd, bytes) in instruction_examples() {
        assert_eq!(cmd.encode(id).unwrap(), bytes, "{what}");
    }
}

#[test]
fn decoder_reads_the_published_instruction_packets() {
    for (what, id, cmd, bytes) in instruction_examples() {
        let packet = decode_frame(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(packet.id, id, "{what}");
        assert_eq!(Command::parse(&packet).unwrap(), cmd, "{what}");
    }
}

#[test]
fn published_status_packets_round_trip() {
    for (what, id, error, data, bytes) in status_examples() {
        assert_eq!(encode_status(id, error, &data).unwrap(), bytes, "{what}");
        let packet = decode_frame(&bytes).unwrap();
        assert_eq!(packet.id, id);
        let status = packet.status_error().unwrap();
        assert!(
            !status.alert && status.code == StatusErrorCode::None,
            "{what}"
        );
        assert_eq!(packet.status_data(), data.as_slice(), "{what}");
    }
}

#[test]
fn crc_of_each_published_frame_matches_its_last_two_bytes() {
    let frames = instruction_examples()
        .into_iter()
        .map(|e| e.3)
        .chain(status_examples().into_iter().map(|e| e.4));
    for frame in frames {
        let n = frame.len();
        assert_eq!(
            crc16(&frame[..n - 2]),
            u16::from_le_bytes([frame[n - 2], frame[n - 1]])
        );
    }
}

#[test]
fn the_published_ping_exchange_streams_through_one_decoder_byte_by_byte() {
    // The broadcast ping example: two replies back to back, delivered one byte per read.
    let stream: Vec<u8> = [
        hex("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D"),
        hex("FF FF FD 00 02 07 00 55 00 06 04 26 6F 6D"),
    ]
    .concat();
    let mut d = Decoder::default();
    let mut ids = Vec::new();
    for b in stream {
        d.feed(&[b]);
        while let Some(p) = d.next_packet().unwrap() {
            assert_eq!(
                u16::from_le_bytes([p.status_data()[0], p.status_data()[1]]),
                1030
            );
            ids.push(p.id);
        }
    }
    assert_eq!(ids, vec![1, 2]);
}
