//! Fuzzes frame decoding followed by per-channel content assembly, the path every publish takes:
//! no panic on any frame sequence; assembled bodies are exactly as long as their header said
//! (checked by the assembler's invariant); errors are connection errors or 406 on the channel.
#![no_main]

use std::collections::HashMap;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wharf_protocol::{self as protocol, Assembled, ContentAssembler, Frame, reply_code};

fuzz_target!(|data: &[u8]| {
    let (limit, stream) = match data {
        [a, b, rest @ ..] => (u32::from(u16::from_be_bytes([*a, *b])), rest),
        _ => (1024, data),
    };
    let mut buf = BytesMut::from(stream);
    let mut assemblers: HashMap<_, ContentAssembler> = HashMap::new();
    while let Ok(Some(frame)) = protocol::decode(&mut buf, 4096) {
        if frame == Frame::Heartbeat {
            continue;
        }
        let channel = frame.channel();
        let a = assemblers
            .entry(channel)
            .or_insert_with(|| ContentAssembler::new(channel, limit));
        match a.push(frame) {
            Ok(Some(Assembled::Content(c))) => assert!(c.body.len() <= limit as usize),
            Ok(_) => {}
            Err(e) => assert!(
                e.is_connection_error() || e.reply_code() == reply_code::PRECONDITION_FAILED
            ),
        }
    }
});
