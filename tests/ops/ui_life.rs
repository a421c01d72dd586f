//! A message's life and the dead-letter explorer in a real browser (S-UI-7, S-UI-9, S-UI-10),
//! with the drivers of `ui_browser`: browse a queue, open a message's timeline, move a
//! dead-lettered message back (through the confirmation step) and see it in its source
//! queue. It takes a screenshot of a timeline; with `WHARF_UPDATE_SCREENSHOTS=1` it saves it
//! as `docs/message-timeline.png` (the README shows it). Skips, saying so, without Chromium.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use lapin::BasicProperties;
use lapin::options::{BasicGetOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::ShortString;

use crate::support::TestServer;
use crate::ui_browser::{CHROMEDRIVER, CHROMIUM, browser, click, login, ready, until};

/// `ui-dlx` (fanout) into `ui-dlq`; `ui-work` dead-letters to it. Publishes `order-1` and
/// `order-2` to `ui-work` and rejects `order-2` into `ui-dlq`.
async fn dead_letter_one(ch: &lapin::Channel) {
    crate::support::dead_letter_topology(ch, "ui-dlx", "ui-dlq", &["ui-work"]).await;
    for id in ["order-2", "order-1"] {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type(ShortString::from("application/json"))
            .with_message_id(ShortString::from(id));
        let body = format!("{{\"order\":\"{id}\",\"item\":\"crate of pears\"}}");
        ch.basic_publish(
            "".into(),
            "ui-work".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    let m = ch
        .basic_get("ui-work".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    ch.basic_reject(
        m.delivery.delivery_tag,
        BasicRejectOptions { requeue: false },
    )
    .await
    .unwrap();
    assert_eq!(ready(ch, "ui-dlq").await, 1);
}

/// S-UI-7, S-UI-9, S-UI-10 in Chromium.
#[tokio::test]
async fn s_ui_10_dashboard_in_chromium_shows_a_timeline_and_moves_a_dead_letter_back() {
    if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
        eprintln!(
            "SKIPPED s_ui_10 browser test: {CHROMIUM} or {CHROMEDRIVER} is missing \
             (apt-get install chromium chromium-driver; .ci/run installs them)"
        );
        return;
    }
    let server = TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await;
    let (_conn, ch) = server.channel().await;
    dead_letter_one(&ch).await;
    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;
    let base = format!("http://{}", server.handle.mgmt_addr().unwrap());
    login(&client, &base).await;

    // Browse ui-work, then open the timeline of its message from the browse table.
    timeline_from_browse(&client, &base, "order-1").await;
    until(
        &client,
        "//ol[@id='timeline']/li[1]/strong[text()='published']",
    )
    .await;
    until(&client, "//p[@id='timeline-end'][contains(., 'ui-work')]").await;

    move_back_in_explorer(&client, &base, &ch).await;

    // It is in its source queue, and its timeline tells the whole story.
    timeline_from_browse(&client, &base, "order-2").await;
    until(
        &client,
        "//ol[@id='timeline']/li/strong[text()='moved back']",
    )
    .await;
    // Each copy's story starts with the step that made it, naming the message it came from:
    // back through the dead-letter queue's copy to the original and its whole story.
    let from = "//ol[@id='timeline']/li[1]//a[starts-with(text(), 'message ')]";
    click(&client, from).await;
    until(
        &client,
        "//ol[@id='timeline']/li[1]/strong[text()='dead-lettered']",
    )
    .await;
    click(&client, from).await;
    until(
        &client,
        "//ol[@id='timeline']/li[1]/strong[text()='published']",
    )
    .await;
    until(
        &client,
        "//ol[@id='timeline']/li/strong[text()='enqueued (moved back)']",
    )
    .await;
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    if std::env::var_os("WHARF_UPDATE_SCREENSHOTS").is_some() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/message-timeline.png");
        std::fs::write(path, &png).unwrap();
    }
    client.close().await.unwrap();
}

/// The dead-letter explorer of ui-dlq: one group, rejected in ui-work; move it back through
/// the confirmation step.
async fn move_back_in_explorer(client: &fantoccini::Client, base: &str, ch: &lapin::Channel) {
    client
        .goto(&format!("{base}/#/queues/%2F/ui-dlq"))
        .await
        .unwrap();
    click(client, "//a[text()='Dead-letter explorer']").await;
    let group = "//section[@class='dl-group'][h2[starts-with(., 'rejected in ui-work')]]";
    click(client, &format!("{group}//input[@type='checkbox']")).await;
    click(client, "//button[@id='dl-move-selected']").await;
    until(
        client,
        "//div[@role='alertdialog']/p[contains(., '1 selected message')]",
    )
    .await;
    assert_eq!(ready(ch, "ui-dlq").await, 1, "nothing moves before the yes");
    click(client, "//button[@id='dl-confirm-yes']").await;
    until(
        client,
        "//div[@id='status'][text()='Moved 1 message back.']",
    )
    .await;
    until(client, "//p[text()='No dead-lettered messages here.']").await;
    assert_eq!(ready(ch, "ui-dlq").await, 0);
    assert_eq!(ready(ch, "ui-work").await, 2);
}

/// Opens ui-work's page, browses it, and follows the timeline link of the message whose
/// message id is `message_id`.
async fn timeline_from_browse(client: &fantoccini::Client, base: &str, message_id: &str) {
    client
        .goto(&format!("{base}/#/queues/%2F/ui-work"))
        .await
        .unwrap();
    click(client, "//button[@id='browse']").await;
    let row = format!("//table[@id='browse-table']//tr[td[text()='{message_id}']]");
    click(
        client,
        &format!("{row}//a[starts-with(@aria-label, 'Timeline')]"),
    )
    .await;
}
