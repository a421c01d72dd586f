//! Fuzzes a stateful AMQP connection: an in-process server (`common_server.rs`) receives, on a
//! fresh in-memory connection (the server's socket-free door, S-NET-2), a complete handshake
//! as guest (unless the first input octet is odd: then the raw bytes alone), then the input as
//! a sequence of frames, then a `connection.close`, then the client hangs up. The server must
//! never panic (any panic aborts), and must still accept and open a clean connection
//! afterwards (malformed input never disturbs another connection).
#![no_main]

#[path = "common_server.rs"]
mod common_server;

use std::time::Duration;

use common_server::Ending;
use libfuzzer_sys::fuzz_target;

/// Protocol header, `start-ok` (PLAIN guest/guest), `tune-ok` (2047 channels, 128 KiB frames,
/// no heartbeat) and `open` of vhost `/`: a client's handshake, byte for byte.
const HANDSHAKE: &[u8] = include_bytes!("amqp_handshake.bin");
/// `connection.close` (200, "bye").
const CLOSE: &[u8] = &[
    1, 0, 0, 0, 0, 0, 14, 0, 10, 0, 50, 0, 200, 3, b'b', b'y', b'e', 0, 0, 0, 0, 0xce,
];

fuzz_target!(|data: &[u8]| {
    let fx = common_server::fixture();
    let (raw, frames) = match data.split_first() {
        Some((first, rest)) if first % 2 == 1 => (true, rest),
        Some((_, rest)) => (false, rest),
        None => (false, data),
    };
    let mut input = Vec::with_capacity(HANDSHAKE.len() + frames.len());
    if !raw {
        input.extend_from_slice(HANDSHAKE);
    }
    input.extend_from_slice(frames);
    let _ =
        common_server::exchange_amqp(fx, &input, CLOSE, Ending::HangUp, Duration::from_secs(10));
    // Another, clean connection still gets through the handshake to `open-ok` and its close.
    // It waits for the server to close: one that hangs up at once may lose frames still
    // waiting for the log (RabbitMQ drops a connection whose socket closed, too).
    let reply = common_server::exchange_amqp(
        fx,
        HANDSHAKE,
        CLOSE,
        Ending::AwaitClose,
        Duration::from_secs(10),
    );
    let open_ok = [0, 10, 0, 41];
    assert!(
        reply.windows(4).any(|w| w == open_ok),
        "a clean connection did not get connection.open-ok after a fuzzed one; it read {} bytes: {:?}",
        reply.len(),
        &reply[..reply.len().min(256)]
    );
});
