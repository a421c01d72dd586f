//! Fuzzes the store codec (`wharf_store::codec`): the first octet is the record kind, the rest
//! its payload. No decoder recovery or the read-back path uses may panic, and a record that
//! decodes re-encodes to the same bytes (the encoding is canonical, so a record read back is
//! the record written).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_store::codec::{self, StoreRecord};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, payload)) = data.split_first() else {
        return;
    };
    let _ = codec::decode_stored(kind, payload, 0);
    if let Ok(part) = codec::message_part(kind, payload) {
        let _ = codec::message_part_id(part);
        let _ = codec::decode_message_part(kind, part);
    }
    let _ = codec::decode_carried(payload);
    let _ = codec::decode_carried_stored(payload, 0);
    if let Ok(r) = codec::decode_referenced(payload) {
        let mut again = Vec::new();
        codec::encode_referenced(&r, &mut again).expect("a decoded reference encodes");
        assert_eq!(again, payload, "the encoding is not canonical");
    }
    let _ = wharf_store::checkpoint::decode_record(kind, payload);
    if let Ok(record) = codec::decode(kind, payload) {
        match record {
            StoreRecord::Event(event) => {
                let mut again = Vec::new();
                let k2 = codec::encode_event(&event, &mut again).expect("a decoded event encodes");
                assert_eq!(k2 as u8, kind, "kind changed on re-encoding");
                assert_eq!(again, payload, "the encoding is not canonical");
            }
            StoreRecord::Format { version } => assert_eq!(version.to_le_bytes(), payload),
            StoreRecord::Copied { vhost, .. } => {
                let part = codec::message_part(kind, payload).expect("a copy holds a message");
                let mut again = Vec::new();
                codec::encode_copied(&vhost, part, &mut again).expect("a decoded copy encodes");
                assert_eq!(again, payload, "the encoding is not canonical");
            }
        }
    }
});
