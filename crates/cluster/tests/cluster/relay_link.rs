//! Relayed streams on the TCP cluster link (S-CLU-70, S-CLU-76; docs/CLUSTER-WIRE.md
//! "Relayed streams"): a session ends with the link connection its caller used, so the
//! relayed connection behind it closes at once (its consumers' unacked messages go back to
//! their queues) rather than after `IDLE_MAX`.

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wharf_cluster::RelayStream;
use wharf_cluster::net::wire::{self, Kind};
use wharf_cluster::net::{Groups, read_frame, serve};

/// S-CLU-76: a caller's link connection ends (its node was killed) right after it opened a
/// relay session: the served end of the stream sees its end at once, well within `IDLE_MAX`.
#[tokio::test]
async fn s_clu_76_a_relay_session_ends_with_its_link_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let groups = Groups::new(1, addr.to_string());
    // The door hands the session one end of a stream; the test keeps the other (the side a
    // server's relayed connection reads).
    let served: Arc<Mutex<Option<RelayStream>>> = Arc::default();
    let keep = Arc::clone(&served);
    groups.relays().set_door(Arc::new(move || {
        let (ours, theirs) = tokio::io::duplex(1024);
        *keep.lock().unwrap() = Some(theirs);
        Some(ours)
    }));
    let serving = tokio::spawn(serve(listener, groups));

    let mut link = TcpStream::connect(addr).await.unwrap();
    let hello = wire::frame(Kind::Hello, 0, 0, wire::ANY_MEMBER, wire::hello(2).into())
        .unwrap()
        .to_vec();
    link.write_all(&hello).await.unwrap();
    let open = wire::frame(Kind::RelayOpen, 1, 0, wire::ANY_MEMBER, Bytes::new())
        .unwrap()
        .to_vec();
    link.write_all(&open).await.unwrap();
    let reply = read_frame(&mut link, wire::FRAME_BYTES_MAX)
        .await
        .unwrap()
        .expect("the open is answered");
    let (header, _) = wire::split(&reply).unwrap();
    assert_eq!(header.kind, Kind::Reply);
    let mut stream = served.lock().unwrap().take().expect("a session was opened");
    drop(link);
    // The bound is the test's patience, far below IDLE_MAX (30 s): the end comes at once.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
        .await
        .expect("the session ended with its link connection");
    assert_eq!(read.unwrap(), 0, "the stream ended");
    serving.abort();
}
