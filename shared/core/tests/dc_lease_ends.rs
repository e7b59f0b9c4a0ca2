//! A DC manager's grant keeps, from now on and at the end of every DC lease the coordinator may
//! still count, the pod leases still admitting then within the floor and the DC leases still
//! running then; a DC lease whose end has passed on the manager's clock backs nothing
//! (`dc_manager/lease_ends.rs`; docs/FINDINGS.md#f25, docs/FINDINGS.md#f29). Each test drives
//! the real cores and asserts the safe outcome.
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew). The ground truth is what the real pods may spend:
//! the sum of their applied, unexpired leases (`PodCore::applied`).

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::CoordinatorCore;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport};

use crate::support;
use support::world::{print_run, sample, sample_held, step_two_dcs, Dc};
use support::{config, config_with_dc_ttl, counted_dc_leases, floor_burst, manager, pods_applied, secs, MS, S};

// -------------------------------------------------------------------------------------------
// A pod lease cut from the floor alone (no DC lease current) outlives a later, shorter DC
// lease whose room a renewal reused: the DC's pods hold more than the coordinator counts
// -------------------------------------------------------------------------------------------

/// R = 1,000/s, B = 20; floors BKK 0, Europe 600; `dc_ttl_ms` = 3,000 (the simulator's own
/// rolling restart lowers it to 30% of 10 s), pod leases 5,000 ms (the managers' default).
/// Nothing relates the two settings (they live in different services), and nothing nests a pod
/// lease cut while the DC holds no DC lease.
///
/// 1. Europe is busy, BKK idle: Europe holds DC leases of 400/s. Europe is cut off from the
///    coordinator at 8 s; at 10 s BKK turns busy and Europe's demand drops.
/// 2. ~11 s: Europe's last DC lease ends and its manager falls to the floor: p1 and p2 get
///    300/s each for a full pod TTL (no DC lease to nest in): until 16 s. At 11.25 s p1 is cut
///    off from its manager (a pod partition; it keeps spending its lease, as it may).
/// 3. 11.5 s: Europe reconnects and gets DC lease e1v26 of 200/s at 12 s (the coordinator counts
///    it until 15.28 s). Budget 800: p2 gets 400/s (p1's unreceived grant holds the rest).
///    Europe's pods: 300 + 400 = 700 (within 800).
/// 4. 13 s: Europe's DC lease shrinks to 0 (e1v29). Budget 600; every pod lease is inherited
///    and p2 is renewed at its 400/s claim (`Ledger::grantable`: up to the current claim; the
///    lasting room is 600 since p1's lease counts as inherited). Europe's pods hold 700 against
///    floor 600 + 0. The manager acks neither e1v29 (700 > 600) nor e1v26 (p1's lease outlives
///    it) — but e1v26 needs no ack to stop counting: it expires on the coordinator at 15.28 s.
/// 5. From then on the coordinator counts Europe at 600 + 0 and grants BKK 400/s (15.5 s) while
///    p1 still holds its floor lease until 16 s: 700 + 400 = 1,100/s against 1,000/s.
///
/// At fault: the manager's ledger (`Ledger::grantable`/`grant` after `set_capacity` shrinks:
/// "inherited" leases) assumes an inherited pod lease ends before the capacity it was counted
/// against stops being counted upstream. A pod lease cut from the floor alone (`pass` with no
/// current DC lease: the full `pod_ttl_ms`, nested in nothing) outlives a later, shorter DC
/// lease whose room a renewal leaned on beside it.
#[test]
fn a_pod_lease_cut_from_the_floor_alone_never_outlives_the_dc_lease_a_renewal_leaned_on() {
    let (worst, q) = floor_lease_outlives(KnownBugs::default());
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}

/// Negative control: grants within the budget of the moment only break the limit here.
#[test]
fn pod_leases_granted_within_the_momentary_budget_only_break_the_limit_here() {
    let bugs = KnownBugs { pod_lease_outlives_counted_dc_lease: true, ..KnownBugs::default() };
    let (worst, q) = floor_lease_outlives(bugs);
    assert!(!worst.fits_in(&q), "held at most {worst}");
}

/// Runs the scenario above with `bugs` in the DC managers. Returns the most the pods ever held,
/// and the limit.
fn floor_lease_outlives(bugs: KnownBugs) -> (Quota, Quota) {
    let q = Quota::per_s(1_000, 20);
    // Europe's floor holds a token for each of its pods: a pod lease needs one to admit.
    let cfg = || floor_burst(config_with_dc_ttl(q, 0, 600, 3_000), "eu", 4);
    let mut log = Vec::new();
    let mut coord = CoordinatorCore::new(cfg(), "coord1", 1);
    let mut bkk = Dc::with_bugs("bkk", "bkk-mgr-a", 1, 0, bugs);
    let mut eu = Dc::with_bugs("eu", "eu-mgr-a", 1, 0, bugs);
    assert_eq!(eu.mgr.config().pod_ttl_ms, 5_000, "the default pod lease TTL");
    bkk.offer(0);
    bkk.on_record(&coord, 0);
    eu.on_record(&coord, 0);
    let (cut_from, demand_moves, p1_cut, cut_until, end) = (8 * S, 10 * S, 11_250 * MS, 11_500 * MS, 20 * S);
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == demand_moves {
            bkk.offer(2_000);
            eu.offer(20);
        }
        if t == p1_cut {
            log.push(format!(
                "{:6.3}s p1 cut off from its manager holding {:?}",
                secs(t),
                eu.pods[0].applied(t).map(|a| (a.quota.to_string(), a.version.to_string(), secs(a.expires_at_ns)))
            ));
            eu.pod_cut[0] = true;
        }
        step_two_dcs(&mut coord, &mut bkk, &mut eu, (cut_from..cut_until).contains(&t), t);
        if (11 * S..17 * S).contains(&t) && t.is_multiple_of(S / 2) {
            let eu_leases = counted_dc_leases(&coord, "eu", t);
            let pods = pods_applied(&eu.pods, t);
            log.push(format!(
                "{:6.3}s coordinator counts europe: floor {}/s + DC leases {:?}; europe's pods {:?}; bkk's pods {}",
                secs(t),
                coord.floor_reserved("eu", t).rate_milli_per_s / 1_000,
                eu_leases,
                pods,
                bkk.pods_hold(t)
            ));
        }
        sample(&bkk, &eu, t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    (worst, q)
}

// -------------------------------------------------------------------------------------------
// A renewal just after a DC lease ended (manager clock) leans on a pod claim that lease
// backed, beside an inherited pod lease: `room_at_dc_lease_ends` skips the ended lease
// -------------------------------------------------------------------------------------------

/// A DC of manager term `<name>-mgr-a` and idle pods `<name>-p`, `<name>-q`. Each pod has its own
/// demand and health flag, and may be deaf to the manager (leases lost; its reports still arrive).
fn dc(name: &'static str, now: u64) -> Dc {
    let (p, q) = (format!("{name}-p"), format!("{name}-q"));
    let mut dc = Dc::with_pods(name, manager(name, &format!("{name}-mgr-a"), 1, now), &[&p, &q]);
    dc.offer(0);
    dc
}

/// Move the pod leases `dc`'s manager sent (if it keeps them) to the log.
fn log_grants(dc: &mut Dc, log: &mut Vec<String>) {
    for s in dc.sent.as_mut().map(std::mem::take).unwrap_or_default() {
        let l = &s.lease;
        log.push(format!(
            "{:6.3}s {} grants {} {}/s ({}; ttl {} ms) [{}]",
            secs(s.at),
            dc.name,
            l.pod,
            l.quota.rate_milli_per_s / 1_000,
            l.version,
            l.ttl_ms,
            if s.applied.is_some() { "applied" } else { "lost" }
        ));
    }
}

/// `dc`'s pods report, its manager ticks: its reports.
fn step(dc: &mut Dc, now: u64, log: &mut Vec<String>) -> Vec<DcReport> {
    let reports = dc.step(now);
    log_grants(dc, log);
    reports
}

/// Give `dc` DC lease `l` if it is its own; a refusal goes to the log.
fn on_dc_lease(dc: &mut Dc, l: &DcLease, now: u64, log: &mut Vec<String>) {
    if let Err(e) = dc.on_dc_lease(l, now) {
        log.push(format!("{:6.3}s {} refuses DC lease {}: {e}", secs(now), dc.name, l.version));
    }
    log_grants(dc, log);
}

fn eu_books(coord: &CoordinatorCore, eu: &Dc, bkk: &Dc, t: u64) -> String {
    let leases = counted_dc_leases(coord, "eu", t);
    let pods = pods_applied(&eu.pods, t);
    format!(
        "{:6.3}s coordinator counts europe {:?} (claim {}/s); europe's pods [p, q] {:?}; bkk's pods {}/s",
        secs(t),
        leases,
        coord.ledger().holder_claim(&"eu-mgr-a".to_string(), t).rate_milli_per_s / 1_000,
        pods,
        bkk.pods_hold(t).rate_milli_per_s / 1_000
    )
}

/// R = 1,000/s, B = 20, no floors, every TTL at its default (DC 10 s, pod 5 s, grace 100 ms),
/// egress spread 150 ms, Equal split. Europe has pods p (400/s of demand) and q (2,000/s); BKK is
/// idle at first. One clock (no skew); the versions are those the run prints.
///
/// 1. Europe holds DC lease L1 = e1v10, 1,000/s, issued at 3 s for its report sent at 3 s: it
///    ends at E1 = 13.000 s on the manager's clock (the coordinator counts it until 13.35 s, and
///    e1v12, 1,000/s issued at 4 s and lost in the cut, until 14.35 s). Europe is cut off from
///    the coordinator from 3.25 s to 11 s, so L1 stays its current lease. BKK turns busy at 5 s
///    and gets nothing yet (Europe's 1,000/s claim holds the whole limit).
/// 2. The manager renews p and q every second nested in L1 (500/s each). p's lease of the 10 s
///    pass (e1v30, ttl 2,871 ms) ends with L1: the manager's ledger counts it until E1 + egress
///    = ~13.15 s. From 10.25 s to 13 s the manager→p direction is lost (p's reports still
///    arrive): p applies nothing newer, so e1v30 (500/s) stays p's ledger claim until ~13.15 s.
/// 3. 11 s: Europe reconnects; the coordinator issues L_mid = e1v21, 500/s (ends 21 s). The
///    budget shrinks to 500: q gets 250/s (e1v35, until 16 s; `room_at_dc_lease_ends` checks it
///    at E1: fine), p's 250 is lost.
/// 4. 11.25 s: q reports itself unhealthy (it keeps spending its lease: "unhealthy: excluded
///    from the next split; its current lease is not revoked and runs out"). Europe's demand is
///    now p's 400/s: the 12 s tick issues L2 = e1v23, 400/s. From 12 s Europe's KV watch lags
///    1,050 ms (a delayed message), so L2 reaches the manager at E1 + 50 ms = 13.05 s. (The 13 s
///    renewal pass, on L_mid, gives p 250/s: 250 + 250 = L_mid, fine.)
/// 5. 13.05 s: L2 shrinks the budget to 400: q's 250 is now inherited. p, the only eligible
///    pod, is renewed: `Ledger::grantable` lets it have up to its own claim (500: e1v30, still
///    live in the ledger until ~13.15 s) within the lasting room (400 − 0: q's lease is
///    inherited); `room_at_dc_lease_ends` skips L1 (`end <= now_ns`), and p's new lease ends
///    (~18.3 s counted) before L_mid's and L2's ends. p gets 400/s (e1v38, until 18 s).
///    Europe's pods: 250 + 400 = 650/s, above every DC lease the coordinator keeps counting
///    (no ack: 650 fits neither floor 0 + 500 nor + 400).
/// 6. 14.35 s: the coordinator stops counting Europe's 1,000/s leases and counts it at
///    max(500, 400) = 500/s; at 14.5 s BKK gets 500/s. 650 + 500 = 1,150/s against 1,000/s,
///    from 14.5 s until q's lease ends at 16 s.
///
/// Before 13 s the same grant is refused: the check at E1 counts q's 250 against L_mid (room
/// 500 − 250). At 13.05 s L1's end has passed on the manager's clock, but a pod claim it backed
/// (p's e1v30, counted until E1 + egress) still licenses a renewal, and nothing checks q's
/// inherited lease beside it against the DC leases that stay counted.
///
/// At fault: `room_at_dc_lease_ends` (dc_manager/lease_ends.rs) skips a DC lease whose end
/// (manager clock) has passed, while `Ledger::grantable` still lets a pod renew up to a claim
/// only that lease backed (a pod lease nested in it counts until its end + egress).
#[test]
fn a_renewal_just_after_a_dc_lease_ends_never_leans_on_the_claim_it_backed() {
    let (worst, q) = renewal_after_dc_lease_end(1_050);
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}

/// Control: the same run with the KV watch lagging 950 ms instead of 1,050 ms, so that L2 reaches
/// the manager at E1 − 50 ms: the check at L1's end counts q's lease against L_mid and p gets
/// 250/s at most. The limit holds (this passes today): the hole is the skipped end alone.
#[test]
fn the_same_renewal_just_before_the_dc_lease_ends_keeps_the_limit() {
    let (worst, q) = renewal_after_dc_lease_end(950);
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}

/// Runs the scenario above; Europe's KV watch lags `lag_ms` from 12 s. Returns the most the pods
/// ever held, and the limit.
fn renewal_after_dc_lease_end(lag_ms: u64) -> (Quota, Quota) {
    let q = Quota::per_s(1_000, 20);
    let mut log = Vec::new();
    let mut coord = CoordinatorCore::new(config(q, 0, 0), "coord1", 1);
    let mut bkk = dc("bkk", 0);
    let mut eu = dc("eu", 0);
    eu.sent = Some(Vec::new());
    for d in [&mut bkk, &mut eu] {
        if let Some((f, v)) = coord.record().floor_of(d.name) {
            d.mgr.on_floor(f, v, 0);
        }
    }
    eu.offered = vec![100, 500]; // 400/s and 2,000/s (reports every 250 ms)
    let (cut_from, cut_until, end) = (3_250 * MS, 11 * S, 20 * S);
    let mut e1 = None;
    let mut late: Vec<(u64, DcLease)> = Vec::new();
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == 5 * S {
            bkk.offered = vec![500, 500];
        }
        if t == 10 * S {
            let l = eu.mgr.current_lease(t).expect("L1 current").clone();
            log.push(format!(
                "{:6.3}s europe's current DC lease L1 {} {} ends {:.3}s",
                secs(t),
                l.version,
                l.quota,
                secs(l.expires_at_ns)
            ));
            e1 = Some(l.expires_at_ns);
        }
        eu.deaf[0] = (10_250 * MS..e1.unwrap_or(u64::MAX)).contains(&t);
        if t == 11_250 * MS {
            eu.healthy[1] = false;
            log.push(format!("{:6.3}s q reports itself unhealthy", secs(t)));
        }
        // Late DC leases (KV watch delay).
        let delivered_now = late.iter().any(|(at, _)| *at == t);
        for (_, l) in late.iter().filter(|(at, _)| *at == t) {
            log.push(format!("{:6.3}s europe receives DC lease {} {} (late)", secs(t), l.version, l.quota));
            on_dc_lease(&mut eu, l, t, &mut log);
        }
        late.retain(|(at, _)| *at != t);
        if t.is_multiple_of(250 * MS) {
            let cut = (cut_from..cut_until).contains(&t);
            let mut reports = step(&mut bkk, t, &mut log);
            let eu_reports = step(&mut eu, t, &mut log);
            if !cut {
                reports.extend(eu_reports);
            }
            let mut out = Vec::new();
            for r in reports {
                out.extend(coord.on_dc_report(&r, t));
            }
            if t.is_multiple_of(S) {
                out.extend(coord.tick(t));
            }
            for l in &out {
                log.push(format!("{:6.3}s coordinator issues {} DC lease {} {}", secs(t), l.dc, l.version, l.quota));
                on_dc_lease(&mut bkk, l, t, &mut log);
                if l.dc == "eu" && !cut {
                    // From 12 s Europe's KV watch lags `lag_ms` behind the record.
                    if t >= 12 * S {
                        late.push((t + lag_ms * MS, l.clone()));
                    } else {
                        on_dc_lease(&mut eu, l, t, &mut log);
                    }
                }
            }
        }
        if (9 * S..16 * S).contains(&t) && (t.is_multiple_of(250 * MS) || delivered_now) {
            log.push(eu_books(&coord, &eu, &bkk, t));
        }
        sample_held(t, 50 * MS, q, &mut worst, &mut log, |now| {
            let (b, e) = (bkk.pods_hold(now), eu.pods_hold(now));
            (b.saturating_add(e), format!("bkk's pods hold {b}, europe's pods hold {e}"))
        });
        t += 50 * MS;
    }
    print_run(&log, worst, q);
    (worst, q)
}
