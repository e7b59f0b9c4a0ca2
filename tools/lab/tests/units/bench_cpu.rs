//! Tests of `tools/lab/src/bench/cpu.rs`.

use leasehold_lab::bench::cpu::*;

#[test]
#[cfg(target_os = "linux")]
fn this_process_has_used_some_cpu_and_the_meter_counts_it() {
    let me = std::process::id();
    let meter = CpuMeter::start(vec![("me", vec![me])]);
    let mut x = 0u64;
    // Spin until the kernel has charged at least one clock tick (bounded).
    for i in 0..2_000_000_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
        if i % 1_000_000 == 0 && meter.per_decision(1)[0].cpu_us > 0.0 {
            break;
        }
    }
    assert!(x != 1);
    let used = meter.per_decision(1);
    assert!(used[0].cpu_us > 0.0, "{used:?}");
    assert_eq!(used[1].component, "total");
    assert!(cpu_seconds(u32::MAX).is_none());
}
