//! The resource alarms' limits, changed at runtime as `rabbitmqctl` changes them (S-OPS-8):
//! `set_vm_memory_high_watermark FRACTION | absolute VALUE` and `set_disk_free_limit VALUE |
//! mem_relative FRACTION`, through wharf's `PUT /api/wharf/resource-limits`. The broker
//! checks the values (a refused one exits 65 with rabbitmqctl's "Bad argument" words); the
//! new limit applies at once and lasts until the broker restarts.

use serde_json::json;

use super::Ctl;
use crate::opts::{Outcome, arg, usage};

const LIMITS_PATH: &str = "/api/wharf/resource-limits";

impl Ctl<'_, '_> {
    /// `set_vm_memory_high_watermark FRACTION` or `set_vm_memory_high_watermark absolute N`.
    pub(super) fn set_vm_memory_high_watermark(&mut self, pos: &[String]) -> Outcome {
        let shape = "set_vm_memory_high_watermark <fraction> | absolute <value>";
        let (setting, shown) = match pos.len() {
            2 => (json!({ "relative": arg(pos, 1) }), arg(pos, 1).to_owned()),
            3 if arg(pos, 1) == "absolute" => (
                json!({ "absolute": arg(pos, 2) }),
                format!("{} bytes", arg(pos, 2)),
            ),
            _ => return Err(usage(format!("Usage: {shape}"))),
        };
        let node = self.node()?;
        self.info(&format!(
            "Setting memory threshold on {node} to {shown} ..."
        ));
        let body = json!({ "vm_memory_high_watermark": setting });
        self.call("PUT", LIMITS_PATH, Some(&body))?;
        Ok(())
    }

    /// `set_disk_free_limit N` (bytes, or with RabbitMQ's units: `50MB`, `1GiB`) or
    /// `set_disk_free_limit mem_relative F` (a multiple of the memory available).
    pub(super) fn set_disk_free_limit(&mut self, pos: &[String]) -> Outcome {
        let shape = "set_disk_free_limit <disk_limit> | mem_relative <fraction>";
        let (setting, shown) = match pos.len() {
            2 => (
                json!({ "absolute": arg(pos, 1) }),
                format!("{} bytes", arg(pos, 1)),
            ),
            3 if arg(pos, 1) == "mem_relative" => (
                json!({ "mem_relative": arg(pos, 2) }),
                format!("{} times the total RAM", arg(pos, 2)),
            ),
            _ => return Err(usage(format!("Usage: {shape}"))),
        };
        let node = self.node()?;
        self.info(&format!("Setting disk free limit on {node} to {shown} ..."));
        let body = json!({ "disk_free_limit": setting });
        self.call("PUT", LIMITS_PATH, Some(&body))?;
        Ok(())
    }
}
