//! Fuzzes the definitions import (`POST /api/definitions`, RabbitMQ's JSON): the input is the
//! request body, sent to an in-process server's management API (`common_server.rs`) as
//! guest. The server must answer (any status) and never panic (a panic aborts); afterwards
//! the export still answers 200 and is JSON.
#![no_main]

#[path = "common_server.rs"]
mod common_server;

use std::time::Duration;

use libfuzzer_sys::fuzz_target;

/// An import applies every definition and waits for it to be durable, and the export lists
/// everything every earlier input imported into the one server: on a loaded machine late in
/// a long run that takes a while; an answer later than this is a hang. (The early stops once
/// blamed on a 10 s bound were libFuzzer's SIGALRM ending a read, see `common_server::exchange`.)
const WAIT: Duration = Duration::from_secs(60);

fn request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// How the reading of an answer ended.
fn ended(reply: &common_server::Reply) -> String {
    match &reply.error {
        None => "the server closed the connection".to_owned(),
        Some(e) => format!("the read failed: {e}"),
    }
}

/// What the process holds when an answer does not come: open descriptors, and whether the
/// API still answers a cheap request.
fn diagnosis(fx: &common_server::Fixture) -> String {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
    let began = common_server::now();
    let overview = common_server::exchange(
        fx.mgmt,
        &request("GET", "/api/overview", &[]),
        &[],
        Duration::from_secs(10),
    );
    format!(
        "{fds} open descriptors; GET /api/overview answered {:?} after {:?}",
        String::from_utf8_lossy(&overview.bytes[..overview.bytes.len().min(40)]),
        began.elapsed()
    )
}

fuzz_target!(|data: &[u8]| {
    let fx = common_server::fixture();
    let began = common_server::now();
    let reply = common_server::exchange(
        fx.mgmt,
        &request("POST", "/api/definitions", data),
        &[],
        WAIT,
    );
    assert!(
        reply.bytes.starts_with(b"HTTP/1.1 "),
        "no HTTP answer to an import after {:?} ({} bytes read, then {}): {}",
        began.elapsed(),
        reply.bytes.len(),
        ended(&reply),
        diagnosis(fx)
    );
    let export =
        common_server::exchange(fx.mgmt, &request("GET", "/api/definitions", &[]), &[], WAIT);
    assert!(
        export.bytes.starts_with(b"HTTP/1.1 200"),
        "the export fails after an import ({}): {}",
        ended(&export),
        String::from_utf8_lossy(&export.bytes[..export.bytes.len().min(200)])
    );
});
