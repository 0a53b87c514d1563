//! CRC-16 of DYNAMIXEL Protocol 2.0: polynomial 0x8005 (x^16 + x^15 + x^2 + 1), initial value 0,
//! MSB first, no final XOR — the e-manual's "CRC calculation" page. Pure: no I/O.

/// Table for one byte at a time, built at compile time from the polynomial.
const TABLE: [u16; 256] = build_table();

const fn build_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x8005
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// Continue a CRC over more bytes (`crc16_update(0, data) == crc16(data)`).
#[must_use]
pub fn crc16_update(mut crc: u16, data: &[u8]) -> u16 {
    for &byte in data {
        let index = ((crc >> 8) as u8 ^ byte) as usize;
        crc = (crc << 8) ^ TABLE[index];
    }
    crc
}

/// CRC of a whole frame prefix (header through the last stuffed parameter).
#[must_use]
pub fn crc16(data: &[u8]) -> u16 {
    crc16_update(0, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_starts_like_the_published_one() {
        // The first entries of the e-manual's table: 0x0000, 0x8005, 0x800F, 0x000A.
        assert_eq!(&TABLE[..4], &[0x0000, 0x8005, 0x800F, 0x000A]);
        assert_eq!(TABLE[255], 0x0202);
    }

    #[test]
    fn update_is_incremental() {
        let data = b"\xff\xff\xfd\x00\x01\x03\x00\x01";
        assert_eq!(crc16_update(crc16(&data[..3]), &data[3..]), crc16(data));
    }
}
