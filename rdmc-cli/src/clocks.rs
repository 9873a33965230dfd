//! The clocks a process's measurements are on: `CLOCK_MONOTONIC`, one
//! clock for every network namespace of the machine (so times printed by
//! different processes can be subtracted), and the process's own CPU time.

use std::time::Instant;

/// `instant` on the `CLOCK_MONOTONIC` clock, in nanoseconds.
pub fn mono_ns(instant: Instant) -> u64 {
    let now = Instant::now();
    let mono = clock_monotonic_ns();
    let ago = now.saturating_duration_since(instant).as_nanos() as u64;
    let ahead = instant.saturating_duration_since(now).as_nanos() as u64;
    (mono + ahead).saturating_sub(ago)
}

/// The `CLOCK_MONOTONIC` time now, in nanoseconds.
pub fn clock_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// User + system CPU seconds this process has used so far (`getrusage`).
pub fn cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
