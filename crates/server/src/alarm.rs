//! Resource alarms, as RabbitMQ has them: when free disk space falls below `disk_free_limit`,
//! when the write-ahead log finds the disk full, or when memory use passes
//! `memory_high_watermark`, the server blocks publishers. [`Alarms`] holds which alarms are
//! on and publishes the combined reason on a `watch` channel; a connection that publishes
//! while it is set stops being read (its publishes wait in TCP, nothing is refused or lost) and
//! is told `connection.blocked`; connections that only consume go on, so queues can drain.
//! [`monitor`] samples a [`ResourceProbe`] every `limits::RESOURCE_CHECK_INTERVAL` and
//! raises or clears the alarms, with hysteresis so that they do not flap. Free disk space is
//! counted net of what the store is about to take (its next segment's reservation and a
//! checkpoint in progress or waiting for room, S-DISK-1), so the log never runs out of space
//! while the alarm is off; the store itself checks free space before it writes a checkpoint
//! (S-DISK-3), the allocation that takes most at once.
//!
//! Memory is measured as the process's resident anonymous memory (`/proc/self/statm`: resident
//! minus shared pages). That is what the kernel cannot reclaim and what an out-of-memory kill
//! is about: it covers the broker's indexes, outboxes, partly received bodies and allocator
//! overhead alike, which an account of queued bytes would miss, while the segment pages mapped
//! for reading (file-backed, reclaimable) are left out.
//!
//! Depends on tokio (the watch channel, the timer), `rustix` (statvfs, sysinfo) and the store (the
//! log writer's disk-full state, `wharf_store::LogHealth`); holds no business rule.

use std::fmt::Debug;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tracing::{info, warn};

use wharf_base::limits;
use wharf_store::LogHealth;

/// RabbitMQ's `connection.blocked` reason for the disk alarm.
pub const REASON_DISK: &str = "low on disk";
/// RabbitMQ's `connection.blocked` reason for the memory alarm.
pub const REASON_MEMORY: &str = "low on memory";

/// Where the monitor reads free disk space and memory use; tests inject their own, so that an
/// alarm is raised without filling a disk.
pub trait ResourceProbe: Send + Sync + Debug {
    /// Bytes available to the broker on the file system of its data directory.
    ///
    /// # Errors
    /// The operating system's error.
    fn disk_free_bytes(&self) -> io::Result<u64>;
    /// Bytes of memory the process uses (see the module doc for what counts).
    ///
    /// # Errors
    /// The operating system's error.
    fn memory_used_bytes(&self) -> io::Result<u64>;
}

/// The real machine: `statvfs` on the data directory, `/proc/self/statm` for memory.
#[derive(Debug, Clone)]
pub struct SystemProbe {
    /// The data directory.
    pub dir: PathBuf,
}

impl ResourceProbe for SystemProbe {
    fn disk_free_bytes(&self) -> io::Result<u64> {
        let st = rustix::fs::statvfs(&self.dir)?;
        // f_bavail: the blocks an unprivileged writer may still use (what `df` shows).
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }

    fn memory_used_bytes(&self) -> io::Result<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm")?;
        let mut fields = statm.split_ascii_whitespace().map(str::parse::<u64>);
        let mut next = || {
            fields
                .next()
                .and_then(Result::ok)
                .ok_or_else(|| io::Error::other("unexpected /proc/self/statm format"))
        };
        let _size = next()?;
        let resident = next()?;
        let shared = next()?;
        let page = rustix::param::page_size() as u64;
        Ok(resident.saturating_sub(shared).saturating_mul(page))
    }
}

/// The memory limit as configured: absolute, or a fraction of the machine's RAM (RabbitMQ's
/// `vm_memory_high_watermark.relative`, default 0.4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryLimit {
    /// Bytes.
    Bytes(u64),
    /// A fraction of total RAM, in `(0, 1]`.
    Fraction(f64),
}

impl MemoryLimit {
    /// The limit in bytes on a machine with `total_ram_bytes` of RAM.
    pub fn bytes(self, total_ram_bytes: u64) -> u64 {
        match self {
            MemoryLimit::Bytes(b) => b,
            MemoryLimit::Fraction(f) => {
                #[expect(
                    clippy::cast_precision_loss,
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "a fraction in (0, 1] of a RAM size: the result is in range and \
                              a few bytes of rounding do not matter"
                )]
                let bytes = (total_ram_bytes as f64 * f.clamp(0.0, 1.0)) as u64;
                bytes
            }
        }
    }
}

/// Total RAM of the machine, in bytes.
pub fn total_ram_bytes() -> u64 {
    let info = rustix::system::sysinfo();
    #[expect(
        clippy::useless_conversion,
        reason = "c_ulong is u64 here but u32 on 32-bit targets"
    )]
    let total = u64::from(info.totalram);
    total.saturating_mul(u64::from(info.mem_unit))
}

/// Where cgroup v2 is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup v2 memory limit (`memory.max`) of the process's cgroup: `self_cgroup` is the
/// text of `/proc/self/cgroup`, whose `0::PATH` line names the cgroup under `root`. Tries that
/// cgroup's `memory.max`, then the one at `root` itself (a container with its own cgroup
/// namespace sees its cgroup there). `None` when there is no cgroup v2, no limit (`max`), or
/// the file cannot be read or parsed.
pub fn cgroup_memory_max(root: &std::path::Path, self_cgroup: &str) -> Option<u64> {
    let read = |dir: &std::path::Path| -> Option<u64> {
        let text = std::fs::read_to_string(dir.join("memory.max")).ok()?;
        text.trim().parse().ok()
    };
    let own = self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| root.join(p.trim().trim_start_matches('/')));
    own.and_then(|dir| read(&dir)).or_else(|| read(root))
}

/// The memory a relative `memory_high_watermark` is a fraction of: the machine's RAM, or the
/// process's cgroup v2 limit when that is lower (a container's limit is what the
/// out-of-memory killer enforces, as RabbitMQ also takes it into account).
pub fn memory_available_bytes() -> u64 {
    let ram = total_ram_bytes();
    let self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    match cgroup_memory_max(std::path::Path::new(CGROUP_ROOT), &self_cgroup) {
        Some(limit) if limit > 0 => limit.min(ram),
        _ => ram,
    }
}

/// One alarm source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmSource {
    /// Free disk below the limit, or the log paused on a full disk.
    Disk,
    /// Memory use above the watermark.
    Memory,
}

#[derive(Debug, Default)]
struct Sources {
    disk: bool,
    memory: bool,
    /// The limits in force (changed at runtime by [`ResourceControl::set`]).
    limits: Limits,
    /// Raised by hand (`ServerHandle::set_blocked`), with its reason.
    manual: Option<String>,
    /// The monitor's last samples (`None`: not measured yet, or the probe failed).
    samples: Samples,
}

/// What the monitor measured at its last check, kept for the metrics endpoint so that free
/// disk space is measured once, by the monitor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[expect(
    clippy::struct_field_names,
    reason = "units go last in names (STYLE 3.6), and both samples are bytes"
)]
pub struct Samples {
    /// Free bytes on the data directory's file system.
    pub disk_free_bytes: Option<u64>,
    /// Memory the process uses, bytes (see the module doc).
    pub memory_used_bytes: Option<u64>,
    /// The memory limit applied, bytes.
    pub memory_limit_bytes: Option<u64>,
}

/// The alarms in force, and the combined reason published to every connection.
#[derive(Debug)]
pub struct Alarms {
    sources: Mutex<Sources>,
    reason: watch::Sender<Option<String>>,
    /// Notified at every change of the reason (see [`AlarmWatch::cleared`]).
    changed: Arc<Notify>,
}

impl Default for Alarms {
    fn default() -> Self {
        Alarms {
            sources: Mutex::new(Sources::default()),
            reason: watch::channel(None).0,
            changed: Arc::new(Notify::new()),
        }
    }
}

/// A connection's view of the alarms: the reason now, and a wait for every alarm to clear
/// that wakes its waiters in the order they began to wait. (A `watch` receiver's wake order
/// follows a per-thread random choice inside tokio, and the order in which blocked
/// publishers resume is the order of their messages in a queue: a simulated run must not
/// depend on a thread's state.)
#[derive(Debug, Clone)]
pub struct AlarmWatch {
    reason: watch::Receiver<Option<String>>,
    changed: Arc<Notify>,
}

impl AlarmWatch {
    /// The blocking reason now (`Some` while any alarm is on).
    pub fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// Returns once no alarm is on.
    pub async fn cleared(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the reason is read: a change after the read wakes it.
            notified.as_mut().enable();
            if self.reason.borrow().is_none() {
                return;
            }
            notified.await;
        }
    }
}

impl Alarms {
    /// A connection's view of the alarms.
    pub fn watch(&self) -> AlarmWatch {
        AlarmWatch {
            reason: self.reason.subscribe(),
            changed: Arc::clone(&self.changed),
        }
    }

    /// The blocking reason now.
    pub fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// Raises or clears one source's alarm.
    pub fn set(&self, source: AlarmSource, on: bool) {
        self.update(|s| match source {
            AlarmSource::Disk => s.disk = on,
            AlarmSource::Memory => s.memory = on,
        });
    }

    /// Raises (`Some(reason)`) or clears (`None`) the alarm raised by hand.
    pub fn set_manual(&self, reason: Option<String>) {
        self.update(|s| s.manual = reason);
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .limits
    }

    /// Replaces the limits; the monitor applies them at its next check.
    pub fn set_limits(&self, limits: Limits) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .limits = limits;
    }

    /// The monitor's last samples.
    pub fn samples(&self) -> Samples {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .samples
    }

    fn record(&self, samples: Samples) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .samples = samples;
    }

    /// Whether one source's alarm is on.
    pub fn is_on(&self, source: AlarmSource) -> bool {
        let s = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        match source {
            AlarmSource::Disk => s.disk,
            AlarmSource::Memory => s.memory,
        }
    }

    fn update(&self, change: impl FnOnce(&mut Sources)) {
        // The lock is held while the reason is published, so that two updates cannot publish
        // their reasons in the opposite order of their changes.
        let mut s = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut s);
        let reason = combined_reason(&s);
        let changed = self.reason.send_if_modified(|current| {
            let changed = *current != reason;
            *current = reason;
            changed
        });
        if changed {
            self.changed.notify_waiters();
        }
    }
}

fn combined_reason(s: &Sources) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    if s.memory {
        parts.push(REASON_MEMORY);
    }
    if s.disk {
        parts.push(REASON_DISK);
    }
    if let Some(manual) = &s.manual {
        parts.push(manual);
    }
    (!parts.is_empty()).then(|| parts.join(" & "))
}

/// The thresholds the monitor applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// The disk alarm goes on below this many free bytes.
    pub disk_free_limit_bytes: u64,
    /// The memory alarm goes on at this many bytes used.
    pub memory_limit_bytes: u64,
}

/// The free disk limit as set: bytes, or a multiple of the memory the broker may use
/// (RabbitMQ's `set_disk_free_limit mem_relative F`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskLimit {
    /// Bytes.
    Bytes(u64),
    /// A multiple of the available memory, positive.
    MemRelative(f64),
}

impl DiskLimit {
    /// The limit in bytes when `memory_bytes` of memory are available.
    pub fn bytes(self, memory_bytes: u64) -> u64 {
        match self {
            DiskLimit::Bytes(b) => b,
            DiskLimit::MemRelative(f) => {
                #[expect(
                    clippy::cast_precision_loss,
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "a positive multiple of a RAM size; `as` saturates and a few \
                              bytes of rounding do not matter"
                )]
                let bytes = (memory_bytes as f64 * f.max(0.0)) as u64;
                bytes
            }
        }
    }
}

/// The limits as set (what the configuration or an operator said) and as applied (bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The memory high watermark as set.
    pub memory: MemoryLimit,
    /// The free disk limit as set.
    pub disk: DiskLimit,
    /// Both in bytes, as the monitor applies them.
    pub thresholds: Thresholds,
}

impl Default for Limits {
    /// No limits: no alarm ever goes on (a server sets its own at start).
    fn default() -> Self {
        Limits::resolve(MemoryLimit::Bytes(u64::MAX), DiskLimit::Bytes(0), 0)
    }
}

impl Limits {
    /// The limits `memory` and `disk` on a machine where `memory_bytes` are available (what a
    /// fraction is of).
    pub fn resolve(memory: MemoryLimit, disk: DiskLimit, memory_bytes: u64) -> Limits {
        Limits {
            memory,
            disk,
            thresholds: Thresholds {
                disk_free_limit_bytes: disk.bytes(memory_bytes),
                memory_limit_bytes: memory.bytes(memory_bytes),
            },
        }
    }
}

/// Changing the limits at runtime (`wharfctl set_vm_memory_high_watermark`,
/// `set_disk_free_limit`; S-OPS-8): the new limits apply at once (the monitor checks again
/// before [`ResourceControl::set`] returns) and last until the server stops, as RabbitMQ's
/// do.
#[derive(Debug, Clone)]
pub struct ResourceControl {
    /// The alarms and their limits.
    pub alarms: Arc<Alarms>,
    /// The monitor's request channel (a check, answered once done).
    pub check: mpsc::Sender<oneshot::Sender<()>>,
    /// What a fraction of memory is of (see [`memory_available_bytes`]).
    pub memory_bytes: u64,
}

impl ResourceControl {
    /// Sets the memory watermark and/or the disk limit (`None`: unchanged), has the monitor
    /// check at once, and returns the limits now in force.
    pub async fn set(&self, memory: Option<MemoryLimit>, disk: Option<DiskLimit>) -> Limits {
        let old = self.alarms.limits();
        let limits = Limits::resolve(
            memory.unwrap_or(old.memory),
            disk.unwrap_or(old.disk),
            self.memory_bytes,
        );
        self.alarms.set_limits(limits);
        info!(
            memory_limit_bytes = limits.thresholds.memory_limit_bytes,
            disk_free_limit_bytes = limits.thresholds.disk_free_limit_bytes,
            "resource limits changed"
        );
        let (done, wait) = oneshot::channel();
        if self.check.send(done).await.is_ok() {
            let _ = wait.await;
        }
        limits
    }
}

/// Whether the disk alarm is on after seeing `free` bytes: on below the limit, off again only
/// once free space is [`limits::ALARM_HYSTERESIS_PERCENT`] above it.
pub fn disk_alarm(was_on: bool, free: u64, limit: u64) -> bool {
    let clear_at = limit.saturating_add(limit / 100 * limits::ALARM_HYSTERESIS_PERCENT);
    if was_on {
        free < clear_at
    } else {
        free < limit
    }
}

/// Whether the memory alarm is on after seeing `used` bytes: on at the limit, off again only
/// once use is [`limits::ALARM_HYSTERESIS_PERCENT`] below it.
pub fn memory_alarm(was_on: bool, used: u64, limit: u64) -> bool {
    let clear_below = limit.saturating_sub(limit / 100 * limits::ALARM_HYSTERESIS_PERCENT);
    if was_on {
        used >= clear_below
    } else {
        used >= limit
    }
}

/// The monitor's state between checks.
#[derive(Debug)]
pub struct Monitor {
    /// Where samples come from.
    pub probe: Arc<dyn ResourceProbe>,
    /// The alarms it raises, and the limits it applies ([`Alarms::limits`]).
    pub alarms: Arc<Alarms>,
    /// The log, for its disk-full state.
    pub wal: LogHealth,
    /// Whether a probe error was already logged (logged once, not every second).
    pub probe_failed: bool,
}

impl Monitor {
    /// Samples once and raises or clears the disk and memory alarms.
    pub fn check(&mut self) {
        let thresholds = self.alarms.limits().thresholds;
        let disk_was = self.alarms.is_on(AlarmSource::Disk);
        let wal_full = self.wal.disk_full();
        let free = self.sample(|p| p.disk_free_bytes());
        // S-DISK-1: what the store is about to take (the next segment's reservation, a
        // checkpoint being written or waiting for room) counts as used already.
        let demand = self.wal.demand_bytes();
        let usable = free.map(|f| f.saturating_sub(demand));
        let low = usable.map_or(disk_was, |usable| {
            disk_alarm(disk_was, usable, thresholds.disk_free_limit_bytes)
        });
        let disk_on = low || wal_full;
        if disk_on != disk_was {
            if disk_on {
                warn!(
                    free_bytes = ?free,
                    about_to_be_used_bytes = demand,
                    limit_bytes = thresholds.disk_free_limit_bytes,
                    wal_disk_full = wal_full,
                    "disk alarm: blocking publishers"
                );
            } else {
                info!(free_bytes = ?free, "disk alarm cleared");
            }
            self.alarms.set(AlarmSource::Disk, disk_on);
        }
        if wal_full {
            // The paused log tries again at every check: at once when space is back by our
            // measure, and on a log whose writer runs inline (the simulation), which has no
            // retry period of its own, this is its retry (as a writer thread retries every
            // `DISK_FULL_RETRY` whatever statvfs says: the free-space limit is not the log's).
            self.wal.retry_now();
        }
        let mem_was = self.alarms.is_on(AlarmSource::Memory);
        let used = self.sample(|p| p.memory_used_bytes());
        self.alarms.record(Samples {
            disk_free_bytes: free,
            memory_used_bytes: used,
            memory_limit_bytes: Some(thresholds.memory_limit_bytes),
        });
        if let Some(used) = used {
            let mem_on = memory_alarm(mem_was, used, thresholds.memory_limit_bytes);
            if mem_on != mem_was {
                if mem_on {
                    warn!(
                        used_bytes = used,
                        limit_bytes = thresholds.memory_limit_bytes,
                        "memory alarm: blocking publishers"
                    );
                } else {
                    info!(used_bytes = used, "memory alarm cleared");
                }
                self.alarms.set(AlarmSource::Memory, mem_on);
            }
        }
    }

    fn sample(&mut self, read: impl FnOnce(&dyn ResourceProbe) -> io::Result<u64>) -> Option<u64> {
        match read(&*self.probe) {
            Ok(v) => Some(v),
            Err(e) => {
                if !self.probe_failed {
                    warn!(error = %e, "cannot read resource use; alarms keep their state");
                    self.probe_failed = true;
                }
                None
            }
        }
    }
}

/// Runs the monitor: a check every `RESOURCE_CHECK_INTERVAL`, and one at each request (answered
/// once done), until the request channel closes.
pub async fn monitor(mut monitor: Monitor, mut requests: mpsc::Receiver<oneshot::Sender<()>>) {
    let mut every = tokio::time::interval(limits::RESOURCE_CHECK_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Biased: no random choice between ready branches (a simulated run is a function of
        // its seed); both check.
        tokio::select! {
            biased;
            _ = every.tick() => monitor.check(),
            request = requests.recv() => match request {
                Some(done) => {
                    monitor.check();
                    let _ = done.send(());
                }
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_alarm_has_hysteresis() {
        let limit = 50_000_000;
        assert!(!disk_alarm(false, limit, limit));
        assert!(disk_alarm(false, limit - 1, limit));
        assert!(disk_alarm(true, limit, limit), "still on at the limit");
        assert!(disk_alarm(true, limit + limit / 20 - 1, limit));
        assert!(!disk_alarm(true, limit + limit / 20, limit));
        assert!(!disk_alarm(false, 0, 0), "a zero limit never alarms");
    }

    #[test]
    fn memory_alarm_has_hysteresis() {
        let limit = 1_000_000;
        assert!(!memory_alarm(false, limit - 1, limit));
        assert!(memory_alarm(false, limit, limit));
        assert!(memory_alarm(true, limit - 1, limit), "still on just below");
        assert!(memory_alarm(true, limit - limit / 20, limit));
        assert!(!memory_alarm(true, limit - limit / 20 - 1, limit));
    }

    #[test]
    fn reasons_combine_and_clear() {
        let alarms = Alarms::default();
        let watch = alarms.watch();
        assert_eq!(alarms.reason(), None);
        alarms.set(AlarmSource::Disk, true);
        assert_eq!(watch.reason().as_deref(), Some("low on disk"));
        alarms.set(AlarmSource::Memory, true);
        assert_eq!(
            alarms.reason().as_deref(),
            Some("low on memory & low on disk")
        );
        alarms.set(AlarmSource::Disk, false);
        assert_eq!(alarms.reason().as_deref(), Some("low on memory"));
        alarms.set(AlarmSource::Memory, false);
        assert_eq!(alarms.reason(), None);
    }

    /// S-DISK-2: blocked publishers resume when every alarm clears, in the order they began
    /// to wait (not in an order drawn per thread), and not while another alarm is still on.
    #[test]
    fn s_disk_2_waiters_resume_once_every_alarm_clears_in_the_order_they_waited() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let alarms = Arc::new(Alarms::default());
            alarms.watch().cleared().await; // none on: at once
            alarms.set(AlarmSource::Disk, true);
            alarms.set(AlarmSource::Memory, true);
            let order = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for i in 0..8 {
                let (watch, order) = (alarms.watch(), Arc::clone(&order));
                tasks.push(tokio::spawn(async move {
                    watch.cleared().await;
                    order.lock().unwrap().push(i);
                }));
                tokio::task::yield_now().await;
            }
            alarms.set(AlarmSource::Disk, false);
            tokio::task::yield_now().await;
            assert!(order.lock().unwrap().is_empty(), "memory is still on");
            alarms.set(AlarmSource::Memory, false);
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
        });
    }

    #[derive(Debug)]
    struct Plenty;

    impl ResourceProbe for Plenty {
        fn disk_free_bytes(&self) -> io::Result<u64> {
            Ok(u64::MAX)
        }
        fn memory_used_bytes(&self) -> io::Result<u64> {
            Ok(0)
        }
    }

    /// The log pausing on a full disk raises the disk alarm even when `statvfs` says there is
    /// room (root-reserved blocks, another file system's view), and the monitor's next check
    /// lets the log retry and clears the alarm once it wrote again.
    #[test]
    fn s_dur_3_a_log_paused_on_a_full_disk_raises_the_disk_alarm() {
        use wharf_wal::{SimStorage, Wal, WalConfig};
        let sim = SimStorage::new(5);
        let config = WalConfig {
            segment_bytes_max: 4096,
            ..WalConfig::default()
        };
        let dir = std::path::Path::new("/sim/alarm");
        let (wal, _) = Wal::open(dir, Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap();
        let appender = wal.appender();
        let alarms = Arc::new(Alarms::default());
        alarms.set_limits(Limits::resolve(
            MemoryLimit::Bytes(u64::MAX),
            DiskLimit::Bytes(1),
            0,
        ));
        let mut monitor = Monitor {
            probe: Arc::new(Plenty),
            alarms: alarms.clone(),
            wal: LogHealth::from(appender.clone()),
            probe_failed: false,
        };
        monitor.check();
        assert_eq!(alarms.reason(), None);
        // Fill the first segment, then the disk.
        let record = [7u8; 500];
        while appender.append_durable(1, &record).unwrap().position.offset < 3000 {}
        sim.set_capacity(Some(sim.used_bytes()));
        let held = appender.append(1, &record).unwrap();
        for _ in 0..5000 {
            if appender.disk_full() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(appender.disk_full());
        monitor.check();
        assert_eq!(alarms.reason().as_deref(), Some(REASON_DISK));
        sim.set_capacity(None);
        monitor.check(); // asks the log to retry now
        appender.wait_durable(held.lsn).unwrap();
        monitor.check();
        assert_eq!(alarms.reason(), None);
        wal.close().unwrap();
    }

    #[test]
    fn the_cgroup_v2_memory_limit_is_read_from_the_process_cgroup() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("system.slice/wharf.service");
        std::fs::create_dir_all(&own).unwrap();
        let self_cgroup = "0::/system.slice/wharf.service\n";
        // No file anywhere: no limit.
        assert_eq!(cgroup_memory_max(root.path(), self_cgroup), None);
        // Only the root's (a cgroup namespace): that one.
        std::fs::write(root.path().join("memory.max"), "2147483648\n").unwrap();
        assert_eq!(cgroup_memory_max(root.path(), self_cgroup), Some(2 << 30));
        // The process's own cgroup wins.
        std::fs::write(own.join("memory.max"), "536870912\n").unwrap();
        assert_eq!(cgroup_memory_max(root.path(), self_cgroup), Some(512 << 20));
        // `max` is no limit: fall back to the root's.
        std::fs::write(own.join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_memory_max(root.path(), self_cgroup), Some(2 << 30));
        std::fs::write(root.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_memory_max(root.path(), self_cgroup), None);
        // Garbage is no limit; cgroup v1 lines are ignored.
        std::fs::write(own.join("memory.max"), "lots\n").unwrap();
        assert_eq!(cgroup_memory_max(root.path(), "4:memory:/x\n"), None);
        assert_eq!(cgroup_memory_max(root.path(), self_cgroup), None);
        // On this machine: never above the RAM.
        let available = memory_available_bytes();
        assert!(available > 0 && available <= total_ram_bytes());
    }

    #[test]
    fn fractions_of_ram_resolve_to_bytes() {
        assert_eq!(MemoryLimit::Fraction(0.4).bytes(1000), 400);
        assert_eq!(MemoryLimit::Fraction(1.0).bytes(1000), 1000);
        assert_eq!(MemoryLimit::Bytes(7).bytes(1000), 7);
        assert!(total_ram_bytes() > 0);
        let probe = SystemProbe { dir: ".".into() };
        assert!(probe.memory_used_bytes().unwrap() > 0);
        assert!(probe.disk_free_bytes().is_ok());
    }
}
