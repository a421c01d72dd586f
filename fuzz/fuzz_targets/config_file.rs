//! Fuzzes the configuration file: TOML text -> `FileConfig::parse` -> `config::merge` (every
//! validation) -> `Config::server_config`. Any input is refused with a `ConfigError` or
//! accepted; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_server::config::{FileConfig, Overrides, merge};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = FileConfig::parse(text) else {
        return;
    };
    if let Ok(config) = merge(file, Overrides::default()) {
        let _ = config.server_config();
    }
});
