//! The node: `clock` (`--test-clock` only), `export_definitions`, `import_definitions`.

use serde_json::{Value as JsonValue, json};

use super::{Ctl, cell};
use crate::exit::{EXIT_DATAERR, EXIT_SOFTWARE};
use crate::opts::{Fail, Outcome, arg, check_args, usage};

impl Ctl<'_, '_> {
    /// `clock show`, `clock advance 30m`, `clock set MS`: a broker started with --test-clock.
    pub(super) fn clock(&mut self, pos: &[String]) -> Outcome {
        let shape = "clock show | clock advance DURATION | clock set MS";
        let answer = match arg(pos, 1) {
            "show" => {
                check_args(pos, 1, 1, shape)?;
                self.call("GET", "/api/test/clock", None)?
            }
            "advance" => {
                check_args(pos, 2, 2, shape)?;
                let body = json!({ "by": arg(pos, 2) });
                self.call("POST", "/api/test/clock/advance", Some(&body))?
            }
            "set" => {
                check_args(pos, 2, 2, shape)?;
                let ms: u64 = arg(pos, 2)
                    .parse()
                    .map_err(|_| usage(format!("not milliseconds: {}", arg(pos, 2))))?;
                self.call(
                    "POST",
                    "/api/test/clock/set",
                    Some(&json!({ "now_ms": ms })),
                )?
            }
            _ => return Err(usage(format!("Usage: {shape}"))),
        };
        let now = answer
            .json()
            .get("now_ms")
            .cloned()
            .unwrap_or(JsonValue::Null);
        if self.opts.json {
            let _ = writeln!(self.io.out, "{}", json!({ "now_ms": now }));
        } else {
            let _ = writeln!(self.io.out, "{now}");
        }
        Ok(())
    }

    pub(super) fn export(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "export_definitions FILE|-")?;
        let target = arg(pos, 1);
        let defs = self.call("GET", "/api/definitions", None)?.json();
        let text =
            serde_json::to_string_pretty(&defs).map_err(|e| Fail(EXIT_SOFTWARE, e.to_string()))?;
        if target == "-" {
            let _ = writeln!(self.io.out, "{text}");
        } else {
            self.info(&format!(
                "Exporting definitions in JSON to a file at \"{target}\" ..."
            ));
            std::fs::write(target, text + "\n")
                .map_err(|e| Fail(EXIT_DATAERR, format!("cannot write {target}: {e}")))?;
        }
        Ok(())
    }

    pub(super) fn import(&mut self, pos: &[String]) -> Outcome {
        check_args(pos, 1, 1, "import_definitions FILE|-")?;
        let source = arg(pos, 1);
        let text = if source == "-" {
            let mut s = String::new();
            self.io
                .input
                .read_to_string(&mut s)
                .map_err(|e| Fail(EXIT_DATAERR, format!("cannot read standard input: {e}")))?;
            s
        } else {
            std::fs::read_to_string(source)
                .map_err(|e| Fail(EXIT_DATAERR, format!("cannot read {source}: {e}")))?
        };
        let defs: JsonValue = serde_json::from_str(&text)
            .map_err(|e| Fail(EXIT_DATAERR, format!("the definitions are not JSON: {e}")))?;
        self.info(&format!(
            "Importing definitions in JSON from a file at \"{source}\" ..."
        ));
        let answer = self.call("POST", "/api/definitions", Some(&defs))?;
        if let Some(warnings) = answer.json().get("warnings").and_then(JsonValue::as_array) {
            for w in warnings {
                let _ = writeln!(self.io.err, "Warning: {}", cell(w));
            }
        }
        self.info("Successfully started definition import.");
        Ok(())
    }
}
