//! The dashboard's Exchanges, Admin and queue time pages in a real Chromium (S-UI-24, with the
//! helpers of `ui_browser`): set a policy on the admin page and see it in effect on the queue
//! page (its definition and the expiries it causes, S-UI-20); declare an exchange, bind a
//! queue and publish through it from the exchange page, then find the message with the queue
//! page's search (S-UI-22). Skips, saying so, without chromium and chromedriver.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::TestServer;
use crate::ui_browser::{
    api_get, browser, browser_missing, click, declare_and_fill, login, ready, type_into, until,
};
use fantoccini::Client;

/// Replaces the text of the textarea or input `id` with `text`.
async fn set_text(client: &Client, id: &str, text: &str) {
    let e = until(client, &format!("//*[@id='{id}']")).await;
    e.clear().await.unwrap();
    e.send_keys(text).await.unwrap();
}

async fn status_says(client: &Client, text: &str) {
    until(client, &format!("//div[@id='status'][text()='{text}']")).await;
}

/// S-UI-24: the admin and exchange pages change the broker through RabbitMQ's API, and the
/// queue page shows the effect.
#[tokio::test]
async fn s_ui_24_admin_and_exchange_pages_in_chromium() {
    if browser_missing("s_ui_24") {
        return;
    }
    let server = TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await;
    let conn = declare_and_fill(&server, "ui-pol", 1).await;
    let _dest = declare_and_fill(&server, "ui-dest", 0).await;
    let ch = conn.create_channel().await.unwrap();

    let profile = tempfile::tempdir().unwrap();
    let (_driver, client) = browser(profile.path()).await;
    let base = format!("http://{}", server.handle.mgmt_addr().unwrap());
    login(&client, &base).await;

    set_policy(&client, &server).await;
    exchange_publish_and_search(&client, &server, &ch).await;
    client.close().await.unwrap();
    drop(conn);
}

/// Admin → Policies: a 60 s message TTL on `ui-pol`; the queue page then names the policy,
/// shows its definition in effect, and counts its one message as expiring within the minute.
async fn set_policy(client: &Client, server: &TestServer) {
    click(client, "//nav//a[text()='Admin']").await;
    until(client, "//h1[text()='Admin: Users']").await;
    until(client, "//table[@id='users-table']//th[text()='guest']").await;
    click(client, "//nav[@aria-label='Admin']//a[text()='Policies']").await;
    until(client, "//h1[text()='Admin: Policies']").await;
    type_into(client, "#pol-name", "ttl-ui").await;
    type_into(client, "#pol-pattern", "^ui-pol$").await;
    client
        .find(fantoccini::Locator::Css(
            "#pol-apply option[value='queues']",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    set_text(client, "pol-definition", "{\"message-ttl\": 60000}").await;
    click(client, "//form[@id='pol-form']//button[@type='submit']").await;
    status_says(client, "Policy ttl-ui saved.").await;
    until(client, "//table[@id='policies-table']//th[text()='ttl-ui']").await;
    let q = api_get(server, "/api/queues/%2F/ui-pol").await;
    assert_eq!(q["policy"], "ttl-ui");

    client
        .goto(&format!(
            "http://{}/#/queues/%2F/ui-pol",
            server.handle.mgmt_addr().unwrap()
        ))
        .await
        .unwrap();
    until(
        client,
        "//dl//dt[text()='Policy']/following-sibling::dd[1][text()='ttl-ui']",
    )
    .await;
    until(
        client,
        "//code[@id='effective-definition'][contains(text(), '\"message-ttl\":60000')]",
    )
    .await;
    until(
        client,
        "//table[@id='expiry-table']//tr[th[text()='within the next minute']]/td[text()='1']",
    )
    .await;
}

/// Exchanges: declare `ui-x` (topic), bind `ui-dest` with `orders.#`, publish `orders.new`
/// with a message id; the queue holds it and the queue page's search finds it by that id.
async fn exchange_publish_and_search(client: &Client, server: &TestServer, ch: &lapin::Channel) {
    click(client, "//nav//a[text()='Exchanges']").await;
    until(client, "//h1[text()='Exchanges']").await;
    type_into(client, "#dx-name", "ui-x").await;
    client
        .find(fantoccini::Locator::Css("#dx-type option[value='topic']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    click(
        client,
        "//form[@id='exchange-form']//button[@type='submit']",
    )
    .await;
    status_says(client, "Exchange ui-x declared.").await;
    let x = api_get(server, "/api/exchanges/%2F/ui-x").await;
    assert_eq!(x["type"], "topic");

    type_into(client, "#filter-name", "ui-x").await;
    click(client, "//form[@role='search']//button[@type='submit']").await;
    click(client, "//table[@id='listing']//a[text()='ui-x']").await;
    until(client, "//h1/q[text()='ui-x']").await;
    type_into(client, "#bind-dest", "ui-dest").await;
    type_into(client, "#bind-key", "orders.#").await;
    click(client, "//form[@id='bind-form']//button[@type='submit']").await;
    status_says(client, "Bound to ui-dest.").await;
    until(
        client,
        "//table[@id='bindings-out-table']//a[text()='ui-dest']",
    )
    .await;

    type_into(client, "#xpub-key", "orders.new").await;
    set_text(client, "xpub-props", "{\"message_id\": \"find-me\"}").await;
    type_into(client, "#xpub-payload", "an order").await;
    click(client, "//form[@id='xpub-form']//button[@type='submit']").await;
    status_says(client, "Message published and routed.").await;
    assert_eq!(ready(ch, "ui-dest").await, 1);

    click(
        client,
        "//table[@id='bindings-out-table']//a[text()='ui-dest']",
    )
    .await;
    until(client, "//h1/q[text()='ui-dest']").await;
    type_into(client, "#search-value", "find-me").await;
    click(client, "//form[@id='search-form']//button[@type='submit']").await;
    until(client, "//table[@id='search-table']//td[text()='find-me']").await;
    assert_eq!(ready(ch, "ui-dest").await, 1, "searching took nothing");
}
