//! Performance scaffolding for the dashboard (issue 16), one command, ignored by a plain
//! `cargo test` (it takes minutes and its figures mean something only on a quiet machine):
//!
//! ```text
//! cargo test --release --test ops ui_perf -- --ignored --nocapture
//! ```
//!
//! It starts the release `wharf` binary as a child process (stopped by its pid), declares
//! `WHARF_UI_PERF_QUEUES` queues (10,000 by default) and prints:
//!
//! - the queue list API's response time: the dashboard's request (page 1 of 100, its
//!   columns) and the whole unpaged list, median and worst of `WHARF_UI_PERF_ROUNDS` (20);
//! - in Chromium: the dashboard's first contentful paint (the browser's Paint Timing), and the
//!   time from clicking "Queues" until the first page of the 10,000 is in the table;
//! - the broker's CPU (utime + stime of its process, from `/proc/<pid>/stat`) over
//!   `WHARF_UI_PERF_SECONDS` (60) each: no page open, the overview open, the queue list open
//!   (each polling every 5 s), as a share of one core.
//!
//! `ui_perf_browse_a_million_messages` (the same command runs it; `ui_perf_browse` alone)
//! fills one durable queue with `WHARF_UI_PERF_MESSAGES` (1,000,000) persistent messages of
//! 100 bytes, with `message_memory_bytes` of `WHARF_UI_PERF_MEMORY` (`16MB`: most of them are
//! paged out), and prints the browse API's response time for page 1 and for a page in the
//! middle (50 messages each, median and worst of the rounds), and the broker's CPU over the
//! window with the queue page's polls (overview and the queue, every 5 s).
//!
//! It asserts only that each step worked, never a figure. Without Chromium the browser steps
//! are skipped, saying so.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use wharf_clock::Stopwatch;

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use serde_json::json;

use crate::support::binary::{Broker, field};
use crate::ui_browser::{browser, browser_missing, click, login, until};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The broker's CPU seconds so far (utime + stime, in `USER_HZ` = 100 ticks a second).
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    let ticks: Vec<f64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|t| t.parse().unwrap())
        .collect();
    (ticks[0] + ticks[1]) / 100.0
}

/// The share of one core the broker used over `window`.
async fn cpu_share(pid: u32, window: Duration) -> f64 {
    let before = cpu_s(pid);
    tokio::time::sleep(window).await;
    (cpu_s(pid) - before) / window.as_secs_f64()
}

/// `(median, worst)` in ms of `rounds` timed GETs of `path`.
async fn timed_gets(api: &wharf_ctl::Client, path: &str, rounds: u64) -> (f64, f64) {
    let mut ms = Vec::new();
    for _ in 0..rounds {
        let (api, path) = (api.clone(), path.to_owned());
        let took = tokio::task::spawn_blocking(move || {
            let start = Stopwatch::start();
            let a = api.request("GET", &path, None).unwrap();
            assert_eq!(a.status, 200, "{path}: {}", a.body);
            start.elapsed().as_secs_f64() * 1000.0
        })
        .await
        .unwrap();
        ms.push(took);
    }
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() - 1])
}

async fn declare_durable(ch: &lapin::Channel, queue: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn declare_queues(broker: &Broker, n: u64) {
    const CHANNELS: u64 = 8;
    let (conn, _) = broker.channel().await;
    let mut tasks = Vec::new();
    for c in 0..CHANNELS {
        let ch = conn.create_channel().await.unwrap();
        tasks.push(tokio::spawn(async move {
            for i in (c..n).step_by(usize::try_from(CHANNELS).unwrap()) {
                declare_durable(&ch, &format!("perf-{i:05}")).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    conn.close(200, "declared".into()).await.unwrap();
}

/// The management listener's address, from its log line (logged just after the start line).
async fn mgmt_addr(broker: &Broker) -> String {
    for _ in 0..100 {
        let output = broker.output();
        if let Some(addr) = output
            .lines()
            .find(|l| l.contains("management API listening"))
            .and_then(|l| field(l, "addr"))
        {
            return addr.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no management listener in the log:\n{}", broker.output());
}

#[tokio::test]
#[ignore = "performance scaffolding: run on a quiet machine with --release --ignored --nocapture"]
async fn ui_perf_queue_list_first_paint_and_polling_cost() {
    let queues = setting("WHARF_UI_PERF_QUEUES", 10_000);
    let rounds = setting("WHARF_UI_PERF_ROUNDS", 20);
    let window = Duration::from_secs(setting("WHARF_UI_PERF_SECONDS", 60));
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let mgmt = mgmt_addr(&broker).await;
    let base = format!("http://{mgmt}");
    let started = Stopwatch::start();
    declare_queues(&broker, queues).await;
    let declare_s = started.elapsed().as_secs_f64();

    let api = wharf_ctl::Client::new(&base, "guest", "guest");
    let page = "/api/queues?page=1&page_size=100&name=&use_regex=false&sort=name&sort_reverse=false\
                &columns=name,vhost,type,state,messages_ready,messages_unacknowledged,messages,consumers,policy";
    let (page_med, page_max) = timed_gets(&api, page, rounds).await;
    let (all_med, all_max) = timed_gets(&api, "/api/queues", rounds.min(5)).await;
    let idle = cpu_share(broker.pid(), window).await;
    let mut report = json!({
        "queues": queues,
        "declare_s": declare_s,
        "api_page_ms": {"median": page_med, "max": page_max},
        "api_all_ms": {"median": all_med, "max": all_max},
        "cpu_share_no_page": idle,
    });

    if !browser_missing("ui_perf's") {
        let profile = tempfile::tempdir().unwrap();
        let (_driver, client) = browser(profile.path()).await;
        login(&client, &base).await;
        let fcp = client
            .execute(
                "const e = performance.getEntriesByName('first-contentful-paint')[0]; \
                 return e ? e.startTime : null;",
                vec![],
            )
            .await
            .unwrap();
        let overview = cpu_share(broker.pid(), window).await;
        let clicked = Stopwatch::start();
        click(&client, "//nav//a[text()='Queues']").await;
        let rows = queues.clamp(1, 100);
        until(&client, &format!("//table[@id='listing']/tbody/tr[{rows}]")).await;
        let list_ms = clicked.elapsed().as_secs_f64() * 1000.0;
        let listing = cpu_share(broker.pid(), window).await;
        client.close().await.unwrap();
        let r = report.as_object_mut().unwrap();
        r.insert("first_contentful_paint_ms".into(), fcp);
        r.insert("queue_list_shown_ms".into(), json!(list_ms));
        r.insert("cpu_share_overview_open".into(), json!(overview));
        r.insert("cpu_share_queue_list_open".into(), json!(listing));
    }
    println!("ui_perf {report}");
    broker.terminate();
}

/// Publishes `n` persistent messages of 100 bytes into `queue` with confirms, a window of
/// them in flight at a time.
async fn fill_queue(broker: &Broker, queue: &str, n: u64) {
    const IN_FLIGHT: u64 = 2_000;
    let (conn, ch) = broker.channel().await;
    declare_durable(&ch, queue).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let body = vec![b'm'; 100];
    let mut pending = Vec::new();
    for i in 0..n {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_message_id(format!("m{i}").into()),
            )
            .await
            .unwrap();
        pending.push(confirm);
        if pending.len() as u64 == IN_FLIGHT {
            for c in pending.drain(..) {
                c.await.unwrap();
            }
        }
    }
    for c in pending {
        c.await.unwrap();
    }
    conn.close(200, "filled".into()).await.unwrap();
}

#[tokio::test]
#[ignore = "performance scaffolding: run on a quiet machine with --release --ignored --nocapture"]
async fn ui_perf_browse_a_million_messages() {
    let messages = setting("WHARF_UI_PERF_MESSAGES", 1_000_000);
    let rounds = setting("WHARF_UI_PERF_ROUNDS", 20);
    let window = Duration::from_secs(setting("WHARF_UI_PERF_SECONDS", 60));
    let memory = std::env::var("WHARF_UI_PERF_MEMORY").unwrap_or_else(|_| "16MB".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wharf.toml");
    std::fs::write(&config, format!("message_memory_bytes = \"{memory}\"\n")).unwrap();
    let data = dir.path().join("data");
    let broker = Broker::start_with_args(
        env!("CARGO_BIN_EXE_wharf"),
        &data,
        &["--config", config.to_str().unwrap()],
    );
    let mgmt = mgmt_addr(&broker).await;
    let api = wharf_ctl::Client::new(&format!("http://{mgmt}"), "guest", "guest");
    let started = Stopwatch::start();
    fill_queue(&broker, "browse-perf", messages).await;
    let fill_s = started.elapsed().as_secs_f64();

    let browse =
        |offset: u64| format!("/api/queues/%2F/browse-perf/browse?offset={offset}&count=50");
    let middle = browse(messages / 2);
    let first = api.request("GET", &middle, None).unwrap();
    let page: serde_json::Value = serde_json::from_str(&first.body).unwrap();
    assert_eq!(page["messages_ready"], messages, "{}", first.body);
    assert_eq!(page["messages"][0]["position"], messages / 2);
    let paged_out = page["messages"][0]["paged_out"].clone();
    let (first_med, first_max) = timed_gets(&api, &browse(0), rounds).await;
    let (mid_med, mid_max) = timed_gets(&api, &middle, rounds).await;
    // The queue page's polls while it is open, as the dashboard sends them.
    let polls = Stopwatch::start();
    let before = cpu_s(broker.pid());
    while polls.elapsed() < window {
        for path in ["/api/overview", "/api/queues/%2F/browse-perf"] {
            let a = api.request("GET", path, None).unwrap();
            assert_eq!(a.status, 200, "{path}: {}", a.body);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let polling = (cpu_s(broker.pid()) - before) / polls.elapsed().as_secs_f64();
    let report = json!({
        "messages": messages,
        "message_memory": memory,
        "fill_s": fill_s,
        "middle_page_paged_out": paged_out,
        "browse_page_1_ms": {"median": first_med, "max": first_max},
        "browse_middle_page_ms": {"median": mid_med, "max": mid_max},
        "cpu_share_queue_page_polling": polling,
    });
    println!("ui_perf_browse {report}");
    broker.terminate();
}
