//! Device wire codecs (CRC, framing). Pure: no I/O.
