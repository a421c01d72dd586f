//! The dashboard in a real browser (S-UI-6, S-UI-1): Debian's Chromium driven through the
//! `WebDriver` protocol (chromedriver on a loopback port this test picks, stopped by its pid
//! at the end) logs in, sees a queue declared by a lapin client with its count, opens its page
//! and browses a message (the queue unchanged afterwards), publishes and purges from the
//! queue page, declares a queue with arguments and closes a connection. It takes a screenshot
//! of the overview; with `WHARF_UPDATE_SCREENSHOTS=1` it saves it as
//! `docs/dashboard-overview.png` (the README shows it). Without chromium and chromedriver it
//! skips, saying so loudly; `.ci/run` installs them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, ShortString};
use serde_json::json;

use crate::support::{TestServer, within};

pub(crate) const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub(crate) const CHROMIUM: &str = "/usr/bin/chromium";
/// How long the page may take to show what the test waits for.
const WAIT: Duration = Duration::from_secs(20);

/// chromedriver, stopped by its pid when dropped.
pub(crate) struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port for chromedriver (bound, read, released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts chromedriver and a Chromium session with the brief's flags and a fresh profile.
pub(crate) async fn browser(profile: &Path) -> (Driver, Client) {
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver(child);
    let caps = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1100",
                format!("--user-data-dir={}", profile.display()),
            ],
        }
    });
    let caps = caps.as_object().unwrap().clone();
    let url = format!("http://127.0.0.1:{port}");
    // chromedriver answers once it listens: try to open the session until it does (for up
    // to 20 s: 200 tries 100 ms apart).
    let mut tries = 0;
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return (driver, client),
            Err(e) if tries == 200 => panic!("no WebDriver session: {e}"),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `xpath` matches (the page re-renders on its own polling), then returns it.
pub(crate) async fn until(client: &Client, xpath: &str) -> fantoccini::elements::Element {
    match client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::XPath(xpath))
        .await
    {
        Ok(e) => e,
        Err(e) => {
            // What the page showed instead, for whoever reads the failure.
            let url = client.current_url().await.map(|u| u.to_string());
            let text = match client.find(Locator::Css("body")).await {
                Ok(b) => b.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            panic!("never matched {xpath}: {e}\nat {url:?}, the page said:\n{text}");
        }
    }
}

/// Clicks what `xpath` matches, finding it again if a re-render replaced it meanwhile.
pub(crate) async fn click(client: &Client, xpath: &str) {
    for _ in 0..3 {
        if until(client, xpath).await.click().await.is_ok() {
            return;
        }
    }
    panic!("could not click {xpath}");
}

/// Opens the dashboard at `base` and logs in as guest: the overview appears.
pub(crate) async fn login(client: &Client, base: &str) {
    client.goto(&format!("{base}/")).await.unwrap();
    type_into(client, "#login-user", "guest").await;
    type_into(client, "#login-pass", "guest").await;
    click(client, "//button[@id='login-submit']").await;
    until(client, "//h1[text()='Overview']").await;
}

pub(crate) async fn type_into(client: &Client, css: &str, text: &str) {
    let e = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap();
    e.send_keys(text).await.unwrap();
}

async fn declare_and_fill(server: &TestServer, queue: &str, n: u32) -> lapin::Connection {
    let (conn, ch) = server.channel().await;
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
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for i in 0..n {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type(ShortString::from("application/json"))
            .with_message_id(ShortString::from(format!("order-{i}")));
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            format!("{{\"order\":{i},\"item\":\"crate of apples\"}}").as_bytes(),
            props,
        )
        .await
        .unwrap();
    }
    within(10, ch.wait_for_confirms()).await.unwrap();
    conn
}

fn screenshot_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard-overview.png")
}

/// S-UI-6, S-UI-1: log in, see the queue and its count, open it, browse a message.
#[tokio::test]
async fn s_ui_6_dashboard_in_chromium_logs_in_lists_a_queue_and_browses_it() {
    if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
        eprintln!(
            "SKIPPED s_ui_6 browser test: {CHROMIUM} or {CHROMEDRIVER} is missing \
             (apt-get install chromium chromium-driver; .ci/run installs them)"
        );
        return;
    }
    let server = TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await;
    let conn = declare_and_fill(&server, "ui-orders", 3).await;
    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;
    let base = format!("http://{}", server.handle.mgmt_addr().unwrap());

    // Log in: the overview appears, with its charts and the node's figures.
    login(&client, &base).await;
    until(&client, "//figure[@id='chart-rates']//*[name()='polyline']").await;
    until(
        &client,
        "//section[@aria-labelledby='c-totals']//dd[text()='3']",
    )
    .await;
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    if std::env::var_os("WHARF_UPDATE_SCREENSHOTS").is_some() {
        std::fs::write(screenshot_path(), &png).unwrap();
    }

    // The queue list shows the queue with its 3 ready messages (4th data column: Ready).
    click(&client, "//nav//a[text()='Queues']").await;
    type_into(&client, "#filter-name", "orders").await;
    click(&client, "//form[@role='search']//button[@type='submit']").await;
    let row = "//table[@id='listing']//tr[th/a[text()='ui-orders']]";
    until(&client, &format!("{row}/td[4][text()='3']")).await;

    // Its page, then browse: the first message with its id and its body shown as JSON.
    click(&client, &format!("{row}/th/a")).await;
    until(&client, "//h1/q[text()='ui-orders']").await;
    click(&client, "//button[@id='browse']").await;
    until(&client, "//table[@id='browse-table']//td[text()='order-0']").await;
    until(&client, "//table[@id='browse-table']//td[text()='order-2']").await;
    click(
        &client,
        "//table[@id='browse-table']//tr[td[text()='order-0']]//summary",
    )
    .await;
    let body = until(
        &client,
        "//table[@id='browse-table']//tr[td[text()='order-0']]//pre",
    )
    .await;
    let text = body.text().await.unwrap();
    assert!(
        text.contains("\"item\": \"crate of apples\""),
        "pretty JSON body: {text}"
    );

    // Browsing took nothing.
    let ch = conn.create_channel().await.unwrap();
    assert_eq!(ready(&ch, "ui-orders").await, 3);
    publish_and_purge(&client, &ch).await;

    declare_with_arguments(&client, &server).await;
    close_connection(&client, &server).await;
    client.close().await.unwrap();
}

/// The ready messages of `queue`, by a passive declare.
pub(crate) async fn ready(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

/// `GET path` of the management API as guest (ureq blocks: off the runtime).
async fn api_get(server: &TestServer, path: &'static str) -> serde_json::Value {
    let api = wharf_ctl::Client::new(
        &format!("http://{}", server.handle.mgmt_addr().unwrap()),
        "guest",
        "guest",
    );
    tokio::task::spawn_blocking(move || api.request("GET", path, None))
        .await
        .unwrap()
        .unwrap()
        .json()
}

/// The queue page publishes a message with its form, then purges the queue (after the
/// confirmation).
async fn publish_and_purge(client: &Client, ch: &lapin::Channel) {
    type_into(client, "#pub-payload", "one more").await;
    click(client, "//form[@id='publish-form']//button[@type='submit']").await;
    until(client, "//div[@id='status'][text()='Message published.']").await;
    assert_eq!(ready(ch, "ui-orders").await, 4);
    click(client, "//button[@id='purge']").await;
    client.accept_alert().await.unwrap();
    until(
        client,
        "//div[@id='status'][text()='Queue ui-orders purged.']",
    )
    .await;
    assert_eq!(ready(ch, "ui-orders").await, 0);
}

/// The queues page's form declares a queue with arguments.
async fn declare_with_arguments(client: &Client, server: &TestServer) {
    click(client, "//nav//a[text()='Queues']").await;
    type_into(client, "#dq-name", "ui-ttl").await;
    let args = until(client, "//textarea[@id='dq-args']").await;
    args.clear().await.unwrap();
    args.send_keys("{\"x-message-ttl\": 60000}").await.unwrap();
    click(client, "//form[@id='declare-form']//button[@type='submit']").await;
    until(
        client,
        "//div[@id='status'][text()='Queue ui-ttl declared.']",
    )
    .await;
    let q = api_get(server, "/api/queues/%2F/ui-ttl").await;
    assert_eq!(q["arguments"], json!({"x-message-ttl": 60000}));
}

/// The connections page lists the test's connection and closes it (after the confirmation).
async fn close_connection(client: &Client, server: &TestServer) {
    click(client, "//nav//a[text()='Connections']").await;
    let close = "//table[@id='listing']//button[starts-with(@aria-label, 'Close connection')]";
    click(client, close).await;
    client.accept_alert().await.unwrap();
    until(
        client,
        "//div[@id='status'][starts-with(text(), 'Connection ')]",
    )
    .await;
    let left = api_get(server, "/api/connections").await;
    assert_eq!(left, json!([]), "the connection is closed");
}
