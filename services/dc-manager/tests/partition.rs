//! Each DC on its own NATS cluster and JetStream domain, joined to the coordinators' cluster
//! (the hub) by a leaf-node link: the production topology of `nats/prod`
//! (`leasehold_nats_harness::leaf_topology`), with the shipped roles as JWT credentials (every
//! service connects with its role's credential, every pod with its own, each DC's leaf link as
//! the DC's leaf user). One server per cluster in
//! `scripts/test`; `LEASEHOLD_PARTITION_NODES=3` runs 3 per cluster with buckets of 3 replicas.
//! The ledger lives in the hub's domain (the coordinator creates it); each DC's leader key lives
//! in the DC's own. Cutting Europe's link (a TCP proxy on it) must leave Europe autonomous on its
//! floor: its manager keeps leading, its pods keep a lease and admit at most the floor's rate and
//! burst, and BKK's pods get at most what the floor leaves. A standby that takes over during the
//! cut cannot read the ledger: it uses the floor its watch delivered because Europe's floor
//! confirmations (in Europe's own JetStream) vouch for it, and after the heal everything follows
//! demand again.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_coordinator::settings::Settings as CoordSettings;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::DcManagerConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_dc_manager::manager::Status;
use leasehold_dc_manager::settings::Settings;
use leasehold_nats_harness::leaf_topology::LeafTopology;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_pod::{Limiter, Pod, PodSettings};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WITHIN: Duration = Duration::from_secs(20);
const RATE_PER_S: f64 = 100.0;
const FLOOR_PER_S: f64 = 20.0;
const FLOOR_TOKENS: f64 = 4.0;
const DC_TTL_MS: u64 = 2_000;
const POD_TTL_MS: u64 = 1_000;

fn limit() -> LimitDef {
    let floor = Quota::per_s(FLOOR_PER_S as u64, FLOOR_TOKENS as u64);
    let mut l = LimitConfig::new("api", Quota::per_s(RATE_PER_S as u64, 20), &[("bkk", floor), ("europe", floor)]);
    l.renew_interval_ms = 200;
    l.dc_ttl_ms = DC_TTL_MS;
    LimitDef::from_config(&l)
}

/// Servers per cluster: 1 in `scripts/test`; `LEASEHOLD_PARTITION_NODES=3` runs the production
/// shape (3 nodes per cluster, buckets with 3 replicas).
fn nodes() -> usize {
    std::env::var("LEASEHOLD_PARTITION_NODES").ok().and_then(|n| n.parse().ok()).unwrap_or(1).clamp(1, 3)
}

fn manager(url: &str, dc: &str, id: &str) -> Settings {
    let mut m = DcManagerConfig::new("api", dc, "");
    m.pod_ttl_ms = POD_TTL_MS;
    m.renew_interval_ms = 200;
    m.heartbeat_timeout_ms = 400;
    Settings {
        nats_url: url.into(),
        id: Some(id.into()),
        leader_ttl_ms: 1_000,
        report_interval_ms: 100,
        ledger_domain: Some("hub".into()),
        replicas: nodes(),
        manager: m,
        ..Settings::default()
    }
}

/// A pod of `dc` that asks for far more than the limit: a call every 2 ms, admissions counted.
struct LoadedPod {
    _pod: Pod,
    limiter: Limiter,
    admitted: Arc<AtomicU64>,
}

async fn loaded_pod(topology: &LeafTopology, servers: &[NatsServer], dc: &str, id: &str) -> LoadedPod {
    let settings = PodSettings {
        nats_url: LeafTopology::url(servers),
        limit: Some("api".into()),
        dc: dc.into(),
        pod_id: Some(id.into()),
        report_interval_ms: 100,
        ..PodSettings::default()
    };
    let pod = Pod::start(topology.client(servers, id).await, &settings);
    let limiter = pod.limiter("api").expect("the pod serves api");
    let admitted = Arc::new(AtomicU64::new(0));
    let (l, a) = (limiter.clone(), admitted.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(2));
        loop {
            every.tick().await;
            if matches!(l.try_acquire(1), Ok(Ok(()))) {
                a.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    LoadedPod { _pod: pod, limiter, admitted }
}

/// The rate of the pods' leases still running now (their newest, by their own clocks).
fn held_rate(pods: &[LoadedPod]) -> f64 {
    pods.iter()
        .filter_map(|p| {
            let s = p.limiter.status().borrow().clone();
            let now = p.limiter.now_ns();
            s.lease.filter(|l| l.expires_at_ns > now).map(|l| l.quota.rate_per_s())
        })
        .sum()
}

fn admitted(pods: &[LoadedPod]) -> u64 {
    pods.iter().map(|p| p.admitted.load(Ordering::Relaxed)).sum()
}

/// Wait until a lease of one of `pods` changes or ends, or until `until`. What the pods hold
/// changes only then, so a check after every return sees every value it takes.
async fn next_lease_change(pods: &[&[LoadedPod]], until: Instant) {
    let pods: Vec<&LoadedPod> = pods.iter().flat_map(|ps| ps.iter()).collect();
    let soonest_end = pods
        .iter()
        .filter_map(|p| {
            let (end, now) = (p.limiter.status().borrow().lease.as_ref()?.expires_at_ns, p.limiter.now_ns());
            (end > now).then(|| Instant::now() + Duration::from_nanos(end - now))
        })
        .min();
    let until = soonest_end.map_or(until, |end| end.min(until));
    let mut statuses: Vec<_> = pods.iter().map(|p| p.limiter.status()).collect();
    let changed = futures::future::select_all(statuses.iter_mut().map(|rx| Box::pin(rx.changed())));
    let _ = tokio::time::timeout_at(until.into(), changed).await;
}

/// Wait until `ok` holds for the pods' held rates, checking at every change of a lease that the
/// two DCs together never hold more than the limit.
async fn until_rates(what: &str, bkk: &[LoadedPod], eu: &[LoadedPod], ok: impl Fn(f64, f64) -> bool) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let (b, e) = (held_rate(bkk), held_rate(eu));
        assert!(b + e <= RATE_PER_S + 1e-6, "{what}: the pods hold {b:.3}/s + {e:.3}/s, above {RATE_PER_S}/s");
        if ok(b, e) {
            return;
        }
        assert!(Instant::now() < deadline, "not within {WITHIN:?}: {what} (bkk {b:.3}/s, europe {e:.3}/s)");
        next_lease_change(&[bkk, eu], deadline).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dc_cut_off_from_the_hub_keeps_leading_and_runs_on_its_floor() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        cut_and_heal(&bin).await;
    }
}

async fn cut_and_heal(bin: &std::path::Path) {
    let topology = LeafTopology::start(bin, &["bkk", "europe"], nodes()).await.unwrap_or_else(|e| panic!("{e}"));
    let ((bkk, _), (eu, eu_link)) = (topology.dc("bkk"), topology.dc("europe"));
    let v = format!("{} ({} node(s) per cluster)", topology.hub[0].version, nodes());
    let url = LeafTopology::url(&topology.hub);
    let coordinator = CoordSettings {
        nats_url: url.clone(),
        id: Some("coord".into()),
        leader_ttl_ms: 1_000,
        replicas: nodes(),
        limits: vec![limit()],
        ..CoordSettings::default()
    };
    let _coord = leasehold_coordinator::spawn(topology.client(&topology.hub, "coordinator").await, coordinator);
    let url = LeafTopology::url(bkk);
    let _m_bkk = leasehold_dc_manager::spawn(topology.client(bkk, "dc-bkk").await, manager(&url, "bkk", "bkk-m1"));
    let url = LeafTopology::url(eu);
    let mut eu1 = leasehold_dc_manager::spawn(topology.client(eu, "dc-europe").await, manager(&url, "europe", "eu-m1"));
    wait::until(&mut eu1.status, WITHIN, "eu-m1 leads Europe", |s: &Status| s.leading && s.ledger_read).await;
    let mut eu2 = leasehold_dc_manager::spawn(topology.client(eu, "dc-europe").await, manager(&url, "europe", "eu-m2"));
    let mut bkk_pods = Vec::new();
    let mut eu_pods = Vec::new();
    for n in ["bkk-pod1", "bkk-pod2"] {
        bkk_pods.push(loaded_pod(&topology, bkk, "bkk", n).await);
    }
    for n in ["europe-pod1", "europe-pod2"] {
        eu_pods.push(loaded_pod(&topology, eu, "europe", n).await);
    }

    // Linked: both DCs hold more than their floors (the rest follows demand).
    until_rates("both DCs above their floors", &bkk_pods, &eu_pods, |b, e| {
        b > FLOOR_PER_S + 5.0 && e > FLOOR_PER_S + 5.0
    })
    .await;

    // Cut Europe off from the hub. Europe keeps its leader (its key is in its own JetStream),
    // its pods keep leases, and once Europe's DC lease has run out they hold and admit no
    // more than the floor; BKK gets no more than the rest.
    // Europe's leader key and floor confirmations live in Europe's JetStream only: a bucket of
    // the same name in the hub's never sees them (KV subjects do not cross between domains).
    let leaders = |client| async move {
        let js = leasehold_nats::connect::jetstream(client);
        leasehold_nats::kv::open_bucket(&js, "lh_leaders").await.expect("lh_leaders")
    };
    let (in_europe, in_hub) = (
        leaders(topology.client(eu, "dc-europe").await).await,
        leaders(topology.client(&topology.hub, "coordinator").await).await,
    );
    for key in ["dc.europe", "floors.europe"] {
        let local = leasehold_nats::kv::read(&in_europe, key).await.expect("read in Europe");
        assert!(local.is_some(), "{v}: {key} is not in Europe's own lh_leaders");
        let hub = leasehold_nats::kv::read(&in_hub, key).await.expect("read in the hub");
        assert!(hub.is_none(), "{v}: {key} reached the hub's lh_leaders");
    }

    eu_link.cut();
    let cut_at = Instant::now();
    let step_downs = eu1.status.borrow().step_downs;
    let settled = Duration::from_millis(DC_TTL_MS + POD_TTL_MS + 500);
    let mut window: Option<(Instant, u64)> = None;
    let mut renewals_in_cut = None;
    let mut summary = String::new();
    let cut_ends = cut_at + settled + Duration::from_secs(4);
    loop {
        let s = eu1.status.borrow().clone();
        assert!(s.leading && s.step_downs == step_downs, "{v}: Europe's manager lost its leadership in the cut: {s:?}");
        let (b, e) = (held_rate(&bkk_pods), held_rate(&eu_pods));
        assert!(b + e <= RATE_PER_S + 1e-6, "{v}: {b:.3}/s + {e:.3}/s above the limit during the cut");
        if cut_at.elapsed() >= settled {
            assert!(e <= FLOOR_PER_S + 1e-6, "{v}: Europe holds {e:.3}/s, above its floor, while cut off");
            assert!(b <= RATE_PER_S - FLOOR_PER_S + 1e-6, "{v}: BKK holds {b:.3}/s, into Europe's floor");
            let applied: u64 = eu_pods.iter().map(|p| p.limiter.status().borrow().leases_applied).sum();
            let (since, start) = *window.get_or_insert((Instant::now(), admitted(&eu_pods)));
            let first_applied = *renewals_in_cut.get_or_insert(applied);
            let (secs, spent) = (since.elapsed().as_secs_f64(), admitted(&eu_pods) - start);
            let most = FLOOR_PER_S * (secs + 0.2) + FLOOR_TOKENS;
            assert!(
                spent as f64 <= most,
                "{v}: Europe admitted {spent} in {secs:.2} s while cut off (at most {most:.0})"
            );
            if secs > 3.5 {
                assert!(e > 0.0, "{v}: Europe's pods hold no lease while cut off: not running on the floor");
                assert!(applied > first_applied, "{v}: Europe's pods got no lease in {secs:.1} s of the cut");
                assert!(
                    spent as f64 >= FLOOR_PER_S * secs * 0.5,
                    "{v}: Europe admitted only {spent} in {secs:.2} s on a {FLOOR_PER_S}/s floor"
                );
                summary = format!("{v}: cut off, Europe admitted {spent} in {secs:.2} s on its {FLOOR_PER_S}/s floor ({e:.1}/s held; BKK {b:.1}/s)");
            }
        }
        if Instant::now() >= cut_ends {
            break;
        }
        // Wake at the settling instant too: the measured window starts there.
        let settles = cut_at + settled;
        next_lease_change(&[&bkk_pods, &eu_pods], if Instant::now() < settles { settles } else { cut_ends }).await;
    }
    assert!(!summary.is_empty(), "{v}: the cut was never measured");
    eprintln!("{summary}");

    // Europe's leader dies during the cut: the standby takes over in Europe's own JetStream. It
    // cannot read the ledger, but Europe's floor confirmations (its own JetStream), which eu-m1
    // wrote before it confirmed its floor, vouch for the floor eu-m2's watch delivered: after its
    // quiet period eu-m2 runs Europe on that floor.
    eu1.crash();
    let s = wait::until(&mut eu2.status, WITHIN, "eu-m2 leads Europe and fails to read the ledger", |s: &Status| {
        s.leading && s.terms_without_ledger == 1
    })
    .await;
    assert!(!s.ledger_read && s.floors_vouched == 1, "{v}: {s:?}");
    let from_eu2 = |pods: &[LoadedPod]| {
        pods.iter().all(|p| p.limiter.status().borrow().lease.as_ref().is_some_and(|l| l.issuer.starts_with("eu-m2")))
    };
    let deadline = Instant::now() + WITHIN;
    while !(from_eu2(&eu_pods) && held_rate(&eu_pods) > 0.0) {
        let e = held_rate(&eu_pods);
        assert!(e <= FLOOR_PER_S + 1e-6, "{v}: Europe holds {e:.3}/s, above its floor, during the takeover");
        assert!(Instant::now() < deadline, "{v}: eu-m2 never ran Europe's pods on the floor during the cut");
        next_lease_change(&[&eu_pods], deadline).await;
    }
    let (since, start) = (Instant::now(), admitted(&eu_pods));
    let measured_until = since + Duration::from_secs(3);
    loop {
        let e = held_rate(&eu_pods);
        assert!(e <= FLOOR_PER_S + 1e-6, "{v}: Europe holds {e:.3}/s under eu-m2, above its floor");
        if Instant::now() >= measured_until {
            break;
        }
        next_lease_change(&[&eu_pods], measured_until).await;
    }
    let (secs, spent) = (since.elapsed().as_secs_f64(), admitted(&eu_pods) - start);
    let most = FLOOR_PER_S * (secs + 0.2) + FLOOR_TOKENS;
    assert!(
        spent as f64 <= most && spent as f64 >= FLOOR_PER_S * secs * 0.5,
        "{v}: {spent} in {secs:.2} s under eu-m2"
    );
    eprintln!("{v}: after the takeover in the cut, Europe admitted {spent} in {secs:.2} s on its floor");

    // Healed: the term reads the ledger and Europe's share follows demand again.
    eu_link.heal();
    wait::until(&mut eu2.status, WITHIN, "eu-m2 reads the ledger after the heal", |s: &Status| s.ledger_read).await;
    until_rates("Europe back above its floor", &bkk_pods, &eu_pods, |_, e| e > FLOOR_PER_S + 5.0).await;
}
