//! [`ConfigError`]: what is wrong with a configuration, naming the key.

/// What is wrong with a configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The file is not valid TOML, has an unknown key, or a value of the wrong type; the
    /// text names the key (from the TOML parser).
    #[error(transparent)]
    Parse(#[from] toml::de::Error),
    /// A value is out of range or inconsistent.
    #[error("{key}: {reason}")]
    Invalid {
        /// The key, as written in the file (`users[1].name`).
        key: String,
        /// Why it is refused.
        reason: String,
    },
}

/// An [`ConfigError::Invalid`] of `key`.
pub(super) fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}
