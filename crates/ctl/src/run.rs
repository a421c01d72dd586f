//! [`run`]: `wharfctl`'s entry point over the process's streams ([`Io`]).

use crate::client::Client;
use crate::cmd::Ctl;
use crate::exit::{DEFAULT_URL, EXIT_OK, EXIT_USAGE};
use crate::opts::{Fail, USAGE, parse};
use crate::streams::Io;

/// Runs `wharfctl` with `args` (without the program name); `env_url` is `WHARF_URL`.
/// Returns the exit code.
pub fn run(args: &[String], env_url: Option<String>, io: &mut Io<'_>) -> i32 {
    let (opts, pos) = match parse(args) {
        Ok(p) => p,
        Err(Fail(code, text)) => {
            let _ = writeln!(io.err, "Error: {text}\n\n{USAGE}");
            return code;
        }
    };
    let url = opts
        .url
        .clone()
        .or(env_url)
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let mut client = Client::new(
        &url,
        opts.username.as_deref().unwrap_or("guest"),
        opts.password.as_deref().unwrap_or("guest"),
    );
    if let Some(path) = &opts.cacert {
        let trusted = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|pem| client.clone().trusting(&pem));
        match trusted {
            Ok(c) => client = c,
            Err(e) => {
                let _ = writeln!(io.err, "Error: --cacert {path}: {e}\n\n{USAGE}");
                return EXIT_USAGE;
            }
        }
    }
    let mut ctl = Ctl { client, opts, io };
    match ctl.command(&pos) {
        Ok(()) => EXIT_OK,
        Err(Fail(code, text)) => {
            let _ = writeln!(ctl.io.err, "Error:\n{text}");
            if code == EXIT_USAGE {
                let _ = writeln!(ctl.io.err, "\n{USAGE}");
            }
            code
        }
    }
}
