//! The `wharf` broker binary. Until the server lands it only says what it would do.

fn main() {
    let bind = std::env::var("WHARF_BIND").unwrap_or_else(|_| "127.0.0.1".to_owned());
    let port = std::env::var("WHARF_PORT").unwrap_or_else(|_| "5672".to_owned());
    let data_dir = std::env::var("WHARF_DATA_DIR").unwrap_or_else(|_| "./wharf-data".to_owned());
    println!(
        "wharf {}: would listen for AMQP 0-9-1 on {bind}:{port} with data in {data_dir} \
         (the server is not built yet)",
        env!("CARGO_PKG_VERSION")
    );
}
