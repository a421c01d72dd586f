//! [`run`]: `wharfctl`'s entry point over the process's streams ([`Io`]).

use crate::client::Client;
use crate::cmd::Ctl;
use crate::exit::{DEFAULT_URL, EXIT_OK, EXIT_USAGE};
use crate::help;
use crate::opts::{Fail, Opts, USAGE, parse};
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
    if opts.help || pos.first().is_some_and(|c| c == "help") {
        return help(&opts, &pos, io);
    }
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

/// `wharfctl help`, `wharfctl help COMMAND`, `wharfctl COMMAND --help`: 0, or 64 for an
/// unknown command (rabbitmqctl's habits).
fn help(opts: &Opts, pos: &[String], io: &mut Io<'_>) -> i32 {
    let skip = usize::from(!opts.help);
    match pos.get(skip) {
        None => {
            help::list(io.out);
            EXIT_OK
        }
        Some(name) => match help::command(io.out, name) {
            Ok(()) => EXIT_OK,
            Err(Fail(code, text)) => {
                let _ = writeln!(io.err, "\n{text}\n");
                help::list(io.err);
                code
            }
        },
    }
}
