//! Fuzzes `protocol::decode` (and the protocol header check) on arbitrary bytes: it must never
//! panic, never return a frame it did not consume, and every error must be a connection error.
//! The first two octets choose `frame_max` so the size checks are exercised too.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wharf_protocol as protocol;

fuzz_target!(|data: &[u8]| {
    let _ = protocol::check_protocol_header(data);
    let (frame_max, stream) = match data {
        [a, b, rest @ ..] => (u32::from(u16::from_be_bytes([*a, *b])) * 4, rest),
        _ => (0, data),
    };
    let mut buf = BytesMut::from(stream);
    loop {
        let before = buf.len();
        match protocol::decode(&mut buf, frame_max) {
            Ok(Some(_)) => assert!(buf.len() < before, "a frame must consume octets"),
            Ok(None) => {
                assert_eq!(buf.len(), before, "incomplete must consume nothing");
                break;
            }
            Err(e) => {
                assert!(e.is_connection_error(), "{e}");
                break;
            }
        }
    }
});
